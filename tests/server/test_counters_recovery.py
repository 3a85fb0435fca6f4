"""Counter streams (ADR-49) through a follower's snapshot install, a leader change and node restarts.

Method: a real 3-node `Cluster` (real TCP, files, fsync; the drift kit's frequent snapshots and small
catch-up chunks). An R3 stream with `allow_msg_counter`; increments (`Nats-Incr`, +k and -k, 16 at a time
so proposals are in flight together) go through the in-process JetStream API of the stream leader's node.
Every replica's WAL is compacted; a follower is stopped, more increments pass the leader's compaction
point, the leader compacts its WAL past them and the follower restarts (it must install the leader's
snapshot and fetch the tail: a repair episode is announced); then the leader
node is stopped, so another replica leads and must find each subject's total from the last stored body
(no counter state lives outside the messages), more increments go in, and the old leader restarts and
catches up. Checked: every replica ends with the same state tuple and the same bytes, and on every replica
the bodies, in sequence order, are the running totals `{"val":"<total>"}` per subject of exactly the
acknowledged increments (none lost, none counted twice, none computed differently by a replica).
Waits poll with deadlines.
"""

from __future__ import annotations

import json

import trio
from drift_kit import compact, contents, converged, repaired_of, replica, start, stream_leader

STREAM = "S"
SUBJECTS = ("c.a", "c.b", "c.c")


def _increment(i: int) -> int:
    return (i % 9 + 1) * (-1 if i % 4 == 0 else 1) * 10**(i % 3)


async def _increments(js, first: int, count: int, acked: dict[int, tuple[int, str, int]]) -> None:
    """Publish increments `first..first+count-1`, 16 concurrently; acked[seq] = (i, subject, increment)."""
    async def one(i: int) -> None:
        subject, value = SUBJECTS[i % len(SUBJECTS)], _increment(i)
        ack = await js.publish(subject, b"", headers={"Nats-Incr": str(value)})
        acked[ack.seq] = (i, subject, value)

    for start_i in range(first, first + count, 16):
        async with trio.open_nursery() as nursery:
            for i in range(start_i, min(start_i + 16, first + count)):
                nursery.start_soon(one, i)


def _check_totals(cluster, acked: dict[int, tuple[int, str, int]]) -> None:
    held = [contents(replica(cluster, name, STREAM).store) for name in cluster.names]
    assert held[0] == held[1] == held[2]
    assert sorted(held[0]) == sorted(acked), "a stored message no publish was acknowledged for, or the reverse"
    totals = dict.fromkeys(SUBJECTS, 0)
    for seq in sorted(acked):
        _, subject, value = acked[seq]
        totals[subject] += value
        assert held[0][seq] == (subject, json.dumps({"val": str(totals[subject])}, separators=(",", ":")).encode()), seq


async def _leader(cluster) -> str:
    return await cluster.wait_until(lambda: stream_leader(cluster, STREAM), 20, what="a stream leader")


async def test_counter_totals_survive_a_snapshot_install_a_leader_change_and_restarts(tmp_path):
    acked: dict[int, tuple[int, str, int]] = {}
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path) as cluster:
            await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            await cluster.node("n1").jetstream().add_stream(
                name=STREAM, subjects=["c.>"], num_replicas=3, allow_msg_counter=True)
            leader = await _leader(cluster)
            await _increments(cluster.node(leader).jetstream(), 0, 96, acked)
            await cluster.wait_until(lambda: converged(cluster, max(acked)), 20, what="replicas converged")
            for name in cluster.names:
                await compact(cluster, name)

            follower = next(name for name in cluster.names if name != leader)
            await cluster.stop(follower)
            await _increments(cluster.node(leader).jetstream(), 96, 96, acked)
            await compact(cluster, leader)  # the entries the follower missed are gone from the leader's WAL
            await cluster.start_node(follower)
            await cluster.wait_until(lambda: converged(cluster, max(acked)), 30, what="follower caught up")
            # It came back through the leader's snapshot (the leader compacted past it): a repair episode.
            await cluster.wait_until(lambda: repaired_of(cluster, follower), 10, what="the install's repair")
            _check_totals(cluster, acked)

            await cluster.stop(leader)
            new_leader = await cluster.wait_until(
                lambda: (found := stream_leader(cluster, STREAM)) != leader and found, 30, what="a new leader")
            await _increments(cluster.node(new_leader).jetstream(), 192, 48, acked)
            await cluster.start_node(leader)
            await cluster.wait_until(lambda: converged(cluster, max(acked)), 30, what="old leader caught up")
            _check_totals(cluster, acked)
