"""A stream group's snapshots bounded by messages applied, in the running server, and the restart it bounds.

Method: a real 3-node `Cluster` (real TCP, real files, real fsync; `drift_kit`'s small blocks) whose
stream groups snapshot by messages only: the entry count is off (`stream_snapshot_every_entries: 0`) and
`stream_snapshot_every_msgs` is `BOUND`. 1,000 messages go through (16 publishers: entries of a few
messages each). Checked: every replica compacted its WAL several times, by the message bound alone; then
a follower is crashed (`Cluster.kill`: nothing closed or flushed) and restarted: it replays only the
messages since its last snapshot (its pace's count after the replay), not the whole stream, and all three
replicas end identical with every acknowledged message. Waits poll with deadlines. Also: the node config's
bounds reach `StreamOptions` (0 turns one off) and a negative one is refused with `InvalidConfig`.
"""

from __future__ import annotations

import pytest
import trio
from drift_kit import check_identical, converged, publish_range, replica, start, stream_leader

from jsraft.errors import InvalidConfig
from jsraft.runtime.errors import GroupNotFound
from jsraft.server.groups.stream_options import StreamOptions, snapshot_pace
from jsraft.server.settings.config import NodeConfig
from jsraft.testing.cluster import Cluster

BOUND = 200
COUNT = 1000
OPTIONS = {"stream_snapshot_every_entries": 0, "stream_snapshot_every_msgs": BOUND, "stream_snapshot_every_bytes": 0}


def _replayed(cluster: Cluster, name: str) -> tuple[int] | None:
    """(the messages `name` applied since its last snapshot,) once its replay ended (else None)."""
    found = replica(cluster, name)
    if found is None or found.machine is None or found.machine.replaying:
        return None
    return (found.adapter.pace.msgs,)


async def test_snapshots_follow_the_message_bound_and_a_restart_replays_only_what_came_after(tmp_path):
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path, **OPTIONS) as cluster:
            await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            js = cluster.node("n1").jetstream()
            await js.add_stream(name="S", subjects=["s.>"], num_replicas=3)
            acked = await publish_range(js, 0, COUNT)
            last = max(acked.values())
            await cluster.wait_until(lambda: converged(cluster, last), 30, what="replicas converged")
            for name in cluster.names:
                found = replica(cluster, name)
                status = cluster.node(name).runtime.status(found.group).raft
                assert status.snapshot_index > 0, (name, status)
                assert found.adapter.pace.requests >= COUNT // BOUND - 1, (name, found.adapter.pace.requests)
                assert found.adapter.pace.msgs < 2 * BOUND, (name, found.adapter.pace.msgs)

            leader = await cluster.wait_until(lambda: stream_leader(cluster), 10, what="a stream leader")
            follower = next(name for name in cluster.names if name != leader)
            await cluster.kill(follower)
            await cluster.restart(follower)
            (replayed,) = await cluster.wait_until(lambda: _replayed(cluster, follower), 30, what="the replay ended")
            assert replayed < 2 * BOUND, replayed  # without the bound: all 1,000 (no entry-count snapshot)
            await cluster.wait_until(lambda: converged(cluster, last), 30, what="the restarted replica current")
            check_identical(cluster, acked)


def test_the_config_bounds_reach_the_pace_and_a_negative_one_is_refused(tmp_path):
    options = StreamOptions.of(NodeConfig(name="n1", store_dir=str(tmp_path), stream_snapshot_every_msgs=0,
                                          stream_snapshot_every_bytes=1000).validate())
    assert (options.snapshot_every_msgs, options.snapshot_every_bytes) == (None, 1000)
    pace = snapshot_pace(options, lambda: None)
    pace.applied(1 << 20, 999)
    assert not pace.due()
    pace.applied(0, 1)
    assert pace.due() and pace.requests == 1

    def not_running() -> None:
        raise GroupNotFound("S")

    closed = snapshot_pace(options, not_running)  # the group is not running: not taken, asked again
    closed.applied(0, 1000)
    assert closed.due() and closed.requests == 0 and not closed.asked
    defaults = StreamOptions.of(NodeConfig(name="n1", store_dir=str(tmp_path)).validate())
    assert (defaults.snapshot_every_msgs, defaults.snapshot_every_bytes) == (32768, 64 << 20)
    for field in ("stream_snapshot_every_msgs", "stream_snapshot_every_bytes"):
        with pytest.raises(InvalidConfig):
            NodeConfig(name="n1", store_dir=str(tmp_path), **{field: -1}).validate()
