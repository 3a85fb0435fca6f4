"""Stream group snapshots in the running server: WAL compaction, InstallSnapshot, range catch-up over `$rpc`.

Method: a real 3-node `Cluster` (real TCP, real files, real fsync) whose nodes snapshot each stream group
every 16 applied entries (`stream_snapshot_every_entries`). We check that every replica's Raft log stays
short while thousands of messages go through, then stop a follower, publish past the leader's compaction
point, and restart it: it must receive the leader's snapshot (InstallSnapshot), whose restore leaves a
repair plan for exactly the missed tail, fetched chunk by chunk from the leader (`stream.catchup`); the
replica goes repairing -> current, and all three end identical with every acknowledged message; the
replica's install mark (replica/install_mark.py) was written and is clear again. Waits poll with deadlines.
"""

from __future__ import annotations

import trio
from drift_kit import (
    check_identical, converged, drift_of, publish_range, replica, repaired_of, setup_stream, start,
)

from jsraft.replica.install_mark import MARK_FILE, InstallMark


async def test_wal_compacts_and_a_lagging_follower_installs_the_snapshot_then_fetches_the_tail(tmp_path):
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path) as cluster:
            js, acked, leader, follower = await setup_stream(cluster, 1500)
            for name in cluster.names:
                status = cluster.node(name).runtime.status(replica(cluster, name).group).raft
                assert status.snapshot_index > 0
                assert status.last_index - status.snapshot_index <= 16 + 4, (name, status)

            before = replica(cluster, follower).store.state().last_seq
            await cluster.stop(follower)
            acked.update(await publish_range(cluster.node(leader).jetstream(), 1500, 1000))
            last = max(acked.values())
            leader_status = cluster.node(leader).runtime.status(replica(cluster, leader).group).raft
            assert leader_status.snapshot_index > 0

            await cluster.start_node(follower)
            await cluster.wait_until(lambda: converged(cluster, last), 30, what="replicas converged")
            check_identical(cluster, acked)
            drift = drift_of(cluster, follower)
            repaired = repaired_of(cluster, follower)
            # One install, or more: on a loaded machine the leader can take its next snapshot (and compact
            # its log past the follower) while the follower still catches up from the first; the follower
            # then takes the newer one for the rest. Each repair episode is announced and ends repaired.
            assert len(drift) == len(repaired) >= 1, (drift, repaired)
            behind = [f for f in drift[0]["findings"] if f["kind"] == "store_behind"]
            assert behind and behind[0]["first_seq"] == before + 1, drift[0]
            # Only the missed tail crossed the network, never the whole stream.
            assert 0 < sum(r["fetched_msgs"] for r in repaired) <= last - before, repaired
            assert all(r["verified"] is not False for r in repaired)
            # The leader's snapshot was marked before the WAL held it and unmarked once repaired to
            # (replica/install_mark.py): the mark's file exists and names no pending install.
            disk = replica(cluster, follower).disk
            assert disk.exists(MARK_FILE) and InstallMark(disk).pending() is None
