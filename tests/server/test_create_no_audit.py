"""A new R1 stream proposes no audit until something was written to it (`stream.leader` invariant 6).

Method: one real node (`jsraft.open_node`, real files and fsync, a 300 ms audit interval) and nats-py in an
asyncio worker thread. An R1 stream is created and one message published; the index its entry applied at
is read on the node. Then the first audit's report is awaited (a poll with a deadline): it must be audit
1, at an index above the message's. Before, the group's only voter proposed an audit as soon as it led
(before the publish: audit 1 below the message's index, or audit 2 by the time it was read) — an AUDIT
entry, a Ready cycle and its two fsyncs on every R1 create's heels, with nobody to compare the replica with.
"""

from __future__ import annotations

import jsraft
from nats_kit import in_asyncio, nats_connect, single, until


async def test_a_new_r1_stream_audits_only_after_its_first_write(tmp_path):
    async def scenario(url: str, node) -> tuple[int, int, int]:
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="S", subjects=["s.>"])
        await js.publish("s.a", b"x")
        replica = node.streams.replicas["S"]
        published_at = replica.machine.applied_index
        await until(lambda: replica.audit.last_audit_index > 0, "the stream's first audit")
        await nc.close()
        return published_at, replica.audit.last_audit_index, replica.machine.last_audit_id

    async with jsraft.open_node(single(tmp_path, stream_audit_interval_ms=300)) as node:
        published_at, audit_index, audit_id = await in_asyncio(scenario, node.url, node, timeout_s=60)
    assert audit_id == 1 and audit_index > published_at, (published_at, audit_index, audit_id)
