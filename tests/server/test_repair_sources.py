"""Repairs on a real 3-node cluster: only a verified source serves, and a fresh store is built beside.

Method: a real 3-node `Cluster` (drift_kit: small blocks and chunks, audits only when asked).

Sources: the stream leader learns that its store disagreed with the majority at an audit (its repair
worker's `note_audit`, the entry point of a verdict it judged and of a resync order it was sent; the
verdict is placed above any audit to come, so none overrides it during the test). Asked over the real
`$rpc` by a follower, it refuses `stream.snapshot` with `RepairSourceRefused` (err_code 20507, code
`source_disagreed` in the description) and answers `stream.catchup` with a refusal carrying that code. A
follower that needs a repair meanwhile keeps retrying and names the code in its last error; its store is
left as it was. Once a later verdict says the leader agreed, the same follower is repaired.

Beside: a follower's store is cut at its head while it is stopped (the store compacts itself: no fault,
so only a fresh store can take the group's head back). At restart the audit it asks for outvotes it, the
leader's snapshot plans a reset, and the replacement store is built beside the old one (`msgs.repair-<n>/`).
The leader serves two chunks and then refuses: the repair fails midway, again and again, while the old
store stays on disk exactly as it was and readable, `msgs/` never missing. Then the leader serves: the
follower ends identical to the others, the repaired advisory says `reset`, and no build or `.old`
directory is left. Every wait polls with a deadline.
"""

from __future__ import annotations

import os

import pytest
import trio
from drift_kit import (
    STREAM, change_body, check_identical, converged, msgs_dir, publish_range, replica, repaired_of, setup_stream,
    start, with_store,
)

from jsraft.disk import OsDisk
from jsraft.server.groups import handlers
from jsraft.store.filestore import FileStore
from jsraft.stream import (
    CatchupRefusal, CatchupRequest, RefusalCode, RepairSourceRefused, decode_catchup, encode_refusal, encode_request,
)

FAR_INDEX = 1 << 40  # above any audit index this test reaches


def _on_disk(cluster, name: str) -> tuple:
    store = FileStore.open(OsDisk(msgs_dir(cluster, name), read_only=True), read_only=True)
    try:
        return store.state().agreement_key()
    finally:
        store.close()


async def test_a_leader_outvoted_at_its_latest_audit_serves_no_repair(tmp_path):
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path) as cluster:
            js, acked, leader, follower = await setup_stream(cluster, 600)
            last = max(acked.values())
            source, asker = replica(cluster, leader), replica(cluster, follower)
            source.repair.note_audit(FAR_INDEX, False)

            with pytest.raises(RepairSourceRefused) as refused:
                await asker.repair.call_peer(leader, "stream.snapshot", {"stream": STREAM}, timeout_s=10)
            assert refused.value.err_code == 20507 and RefusalCode.source_disagreed in refused.value.description
            request = CatchupRequest(stream=STREAM, snapshot_index=1, ranges=((1, 10),), bytes_max=1 << 16)
            _, blobs = await asker.repair.call_peer(leader, "stream.catchup", {"stream": STREAM},
                                                   [encode_request(request)], timeout_s=10)
            answer = decode_catchup(blobs[0])
            assert isinstance(answer, CatchupRefusal) and answer.code == RefusalCode.source_disagreed

            # A follower that needs a repair now (its store changed on disk while it was stopped: its
            # post-recovery audit outvotes it) waits: refused, retried, its store left as it was.
            await cluster.stop(follower)
            with_store(cluster, follower, change_body(last - 5, last))
            changed = _on_disk(cluster, follower)
            await cluster.start_node(follower)

            def waits_refused() -> bool:
                found = replica(cluster, follower)
                return (found is not None and found.machine is not None and str(found.machine.health) == "drifted"
                        and RefusalCode.source_disagreed in found.repair.last_error)

            await cluster.wait_until(waits_refused, 30, what="the follower's resync refused by the leader")
            assert replica(cluster, follower).store.state().agreement_key() == changed
            assert not repaired_of(cluster, follower)

            source.repair.note_audit(FAR_INDEX + 1, True)  # a later verdict: the leader agreed
            await cluster.wait_until(lambda: converged(cluster, last), 30, what="repaired from the leader")
            check_identical(cluster, acked)


async def test_a_fresh_store_is_built_beside_and_a_failed_repair_leaves_the_old_one(tmp_path, monkeypatch):
    gate = {"open": False, "served": 0, "refused": 0}
    serve = handlers.serve_catchup_request

    async def gated(replica_, blob):
        if not gate["open"] and gate["served"] >= 2:
            gate["refused"] += 1
            return encode_refusal(CatchupRefusal(reason="held back by the test"))
        gate["served"] += 1
        return await serve(replica_, blob)

    monkeypatch.setattr(handlers, "serve_catchup_request", gated)
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path) as cluster:
            js, acked, leader, follower = await setup_stream(cluster, 1500)
            last = max(acked.values())
            await cluster.stop(follower)

            def cut_head(store) -> tuple:
                store.compact(400)  # no fault: the store dropped 1..399 itself, the group holds them
                return store.state().agreement_key()

            before = with_store(cluster, follower, cut_head)
            gate["served"] = 0
            await cluster.start_node(follower)
            stream_dir = cluster.stream_dir(follower, STREAM)

            def failing_midway() -> bool:
                names = os.listdir(stream_dir)
                assert "msgs" in names and "msgs.old" not in names  # the old store never moved aside
                return gate["refused"] >= 3

            await cluster.wait_until(failing_midway, 30, what="the repair failing midway, retried")
            assert gate["served"] == 2  # two chunks served, into the build beside `msgs/`: the old is as it was
            assert _on_disk(cluster, follower) == before  # the old store, intact and readable on disk
            assert "refused" in replica(cluster, follower).repair.last_error

            gate["open"] = True
            await cluster.wait_until(lambda: converged(cluster, last), 30, what="repaired into a fresh store")
            check_identical(cluster, acked)
            assert sorted(name for name in os.listdir(stream_dir) if name.startswith("msgs")) == ["msgs"]
            assert any(advisory["reset"] for advisory in repaired_of(cluster, follower))
            more = await publish_range(js, 1500, 50)  # the swapped-in store takes new messages
            await cluster.wait_until(lambda: converged(cluster, max(more.values())), 20, what="new messages")
