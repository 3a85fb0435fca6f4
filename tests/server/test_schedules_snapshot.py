"""Message schedules through a snapshot install on three nodes: a follower that was down while a schedule
fired, and whose leader compacted past it, installs the leader's snapshot and ends identical to the others
— the schedule gone, its fired message present once — and the schedule set a later leader rebuilds from
its store fires each remaining schedule once and nothing twice (ADR-51; `stream.schedules` invariant 1).

Method: a real 3-node `Cluster` (real TCP, files, fsync; `drift_kit`'s small snapshots and blocks). An R3
stream `S` with `allow_msg_schedules` gets 40 plain messages, converged and compacted on every replica.
A follower is stopped. Schedule X (due 1 s after its publish) and schedule Y (due 10 s after) are stored;
X's fired message is awaited on the leader's store, then the leader compacts its WAL past everything the
stopped follower held. The follower is started: it must take the snapshot (its Raft snapshot index reaches
the leader's) and converge — equal state tuples and contents on all three. Then the leader is stopped:
among the two left, Y must fire (polled), and after 100 more node ticks each target holds exactly one
message and neither schedule subject any, on both; the old leader is started again and all three converge
identical. Every wait polls with a deadline.
"""

from __future__ import annotations

import time

import trio
from drift_kit import compact, contents, converged, replica, setup_stream, start, stream_leader
from schedule_kit import at

CONFIG_EXTRA = {"allow_msg_schedules": True}


def _subject_counts(found) -> dict[str, int]:
    counts: dict[str, int] = {}
    for subject, _payload in contents(found.store).values():
        if subject.startswith("s.x") or subject.startswith("s.y") or subject.startswith("s.out"):
            counts[subject] = counts.get(subject, 0) + 1
    return counts


def _identical(cluster, names) -> bool:
    stores = [replica(cluster, name).store for name in names]
    return len({store.state().agreement_key() for store in stores}) == 1 and \
        all(contents(store) == contents(stores[0]) for store in stores[1:])


async def test_a_fired_schedule_reaches_a_follower_by_snapshot_and_a_later_leader_fires_each_once(tmp_path):
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path) as cluster:
            js, _acked, leader, follower = await setup_stream(cluster, 40, **CONFIG_EXTRA)
            held_index = cluster.node(follower).runtime.status(replica(cluster, follower).group).raft.applied_index
            await cluster.stop(follower)
            now = time.time()
            await js.publish("s.x", b"X", headers={"Nats-Schedule": at(now + 1.0), "Nats-Schedule-Target": "s.out.x"})
            await js.publish("s.y", b"Y", headers={"Nats-Schedule": at(now + 10.0), "Nats-Schedule-Target": "s.out.y"})
            await cluster.wait_until(lambda: _subject_counts(replica(cluster, leader)).get("s.out.x") == 1, 15,
                                     what="X fired on the leader")
            compacted = await compact(cluster, leader)
            assert compacted > held_index  # the follower cannot catch up from the leader's log alone

            await cluster.start_node(follower)
            last = replica(cluster, leader).store.state().last_seq
            await cluster.wait_until(lambda: converged(cluster, last), 30, what="replicas converged")
            status = cluster.node(follower).runtime.status(replica(cluster, follower).group).raft
            assert status.snapshot_index >= compacted, (status, compacted)
            assert _identical(cluster, cluster.names)
            # Y still stored (not due yet), or already fired and purged, never both nor neither.
            assert _subject_counts(replica(cluster, follower)) in ({"s.y": 1, "s.out.x": 1},
                                                                   {"s.out.x": 1, "s.out.y": 1})

            await cluster.stop(leader)
            rest = [name for name in cluster.names if name != leader]
            await cluster.wait_until(lambda: stream_leader(cluster) in rest, 20, what="a new stream leader")
            await cluster.wait_until(lambda: all(_subject_counts(replica(cluster, n)).get("s.out.y") == 1 for n in rest),
                                     30, what="Y fired on the two left")
            ticker = cluster.node(rest[0]).runtime.ticker
            start_tick = ticker.ticks
            await cluster.wait_until(lambda: ticker.ticks >= start_tick + 100, 20, what="100 node ticks")
            for name in rest:
                assert _subject_counts(replica(cluster, name)) == {"s.out.x": 1, "s.out.y": 1}, name

            await cluster.start_node(leader)
            last = replica(cluster, stream_leader(cluster) or rest[0]).store.state().last_seq
            await cluster.wait_until(lambda: converged(cluster, last), 30, what="all three converged again")
            assert _identical(cluster, cluster.names)
            assert _subject_counts(replica(cluster, leader)) == {"s.out.x": 1, "s.out.y": 1}
