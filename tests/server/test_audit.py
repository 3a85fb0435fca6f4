"""The running AUDIT on a real 3-node cluster: periodic audits, and a leader that disagrees with its majority.

Method: a real `Cluster` (real TCP, real files). First, with a 300 ms audit interval, stream info must show
every replica agreeing at audits whose index keeps moving, and no drift advisory. Then, with audits only on
request, the stream *leader's* store is changed in place (one message rewritten with a valid CRC, as a
firmware bug would) and an audit is asked for: the leader must find itself outvoted, say so (a
`stream_drift` advisory with `leader: true`), stop leading (a replica that agreed takes over), resync from
the new leader fetching only the changed message and what follows it, and end identical to the others,
with every acknowledged message. Every wait polls with a deadline.
"""

from __future__ import annotations

import trio
from drift_kit import (
    advisories, check_identical, converged, drift_of, publish_range, replica, repaired_of, setup_stream, start,
    stream_leader,
)

from jsraft.stream import DRIFT_ADVISORY


async def test_periodic_audits_show_every_replica_agreeing(tmp_path):
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path, stream_audit_interval_ms=300) as cluster:
            js, acked, leader, _ = await setup_stream(cluster, 500)

            async def audited_after(index: int) -> int | None:
                info = await js.stream_info("S")
                replicas = info.cluster["replicas"]
                if all(r["agreed_at_last_audit"] is True and r["last_audit_index"] > index for r in replicas.values()):
                    return min(r["last_audit_index"] for r in replicas.values())
                return None

            first = await cluster.wait_until(lambda: audited_after(0), 10, what="a first audit everyone agreed at")
            acked.update(await publish_range(js, 500, 200))
            await cluster.wait_until(lambda: audited_after(first), 10, what="a later audit")
            info = await js.stream_info("S")
            assert {r["status"] for r in info.cluster["replicas"].values()} == {"current"}
            assert replica(cluster, leader).audit.verdicts >= 2
            assert not advisories(cluster, DRIFT_ADVISORY)


async def test_a_leader_outvoted_at_an_audit_steps_down_and_resyncs(tmp_path):
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path) as cluster:
            _, acked, leader, _ = await setup_stream(cluster, 1500)
            store = replica(cluster, leader).store
            last = store.state().last_seq
            target = last - 25
            tail = [store.load(seq) for seq in range(target, last + 1)]
            store.truncate(target - 1)
            rows = [(m.seq, m.subject, m.headers, m.payload, m.timestamp_ns) for m in tail]
            rows[0] = (target, tail[0].subject, tail[0].headers, b"rewritten in place", tail[0].timestamp_ns)
            store.append_batch(rows)
            assert store.state().last_seq == last and not store.faults()

            replica(cluster, leader).audit.request()
            new_leader = await cluster.wait_until(
                lambda: (found := stream_leader(cluster)) is not None and found != leader and found, 20,
                what="another replica leads")
            await cluster.wait_until(lambda: converged(cluster, last), 30, what="the old leader resynced")
            check_identical(cluster, acked)

            outvoted = [a for a in advisories(cluster, DRIFT_ADVISORY, replica_name=leader) if a["audit_id"]]
            assert outvoted and outvoted[0]["leader"] is True, outvoted
            own = [a for a in drift_of(cluster, leader) if not a["audit_id"]]
            assert own and own[0]["findings"][0]["kind"] == "audit_mismatch"
            (repaired,) = repaired_of(cluster, leader)
            assert repaired["fetched_msgs"] == last - target + 1 and repaired["verified"] is True

            js = cluster.node(new_leader).jetstream()
            acked.update(await publish_range(js, 1500, 200))
            await cluster.wait_until(lambda: converged(cluster, max(acked.values())), 20, what="converged again")
            check_identical(cluster, acked)
