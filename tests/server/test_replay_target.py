"""A restarted replica whose WAL held an uncommitted tail ends its recovery replay once a new leader
replaced that tail, even on an idle stream (`StreamAdapter.bound_recovery`, via `RepairWorker`).

Method: a real 3-node `Cluster` (real TCP, real files; audits only when asked), a stream with messages on
every replica. A follower is stopped; the stream's leadership moves to the third node (a new term). While
the follower is down, its WAL gets an uncommitted tail from the old term — 30 NOOP entries after its last
index, written with the WAL's own API, as a leader of that term could have left them before it lost its
leadership. Restarted, the follower's replay targets the end of that tail; the new leader's entries
conflict with it and Raft truncates it, and the stream stays idle, so the log never reaches that index.
Checked: the follower leaves its replay (its target lowered to the log's last index), reports an audit,
and holds every acknowledged message. Before the fix it stayed replaying (simulator consumer seed 51287):
no audit report, no snapshot, no repair served — the control with `bound_recovery` a no-op shows that.
"""

from __future__ import annotations

import os

import pytest
import trio
from drift_kit import check_identical, converged, replica, setup_stream, start, stream_leader

from jsraft.disk import OsDisk
from jsraft.raft.types import Entry, EntryType
from jsraft.replica.stream_adapter import StreamAdapter
from jsraft.wal import Wal

TAIL = 30


def _add_old_term_tail(cluster, name: str) -> int:
    """Append `TAIL` NOOP entries of the WAL's last term to `name`'s stopped stream WAL; its new last index."""
    wal, _ = Wal.open(OsDisk(os.path.join(cluster.stream_dir(name, "S"), "raft")))
    try:
        last = wal.last_index()
        term = wal.term(last)
        assert term is not None
        wal.append([Entry(index=last + i, term=term, type=EntryType.NOOP) for i in range(1, TAIL + 1)])
        wal.sync()
        return wal.last_index()
    finally:
        wal.close()


async def _restart_with_a_replaced_tail(cluster) -> tuple[str, int, dict[int, int]]:
    _, acked, leader, follower = await setup_stream(cluster, 200)
    third = next(name for name in cluster.names if name not in (leader, follower))
    await cluster.stop(follower)
    old_leader = replica(cluster, leader)
    old_leader.runtime.transfer_leadership(old_leader.group, third)
    await cluster.wait_until(lambda: stream_leader(cluster) == third, 20, what="the third node leads (a new term)")
    target = _add_old_term_tail(cluster, follower)
    await cluster.start_node(follower)
    await cluster.wait_until(lambda: (found := replica(cluster, follower)) is not None and found.adapter is not None
                             and found.adapter.recovery_target is not None, 20, what="the follower opened")
    assert replica(cluster, follower).adapter.recovery_target == target  # the replay aims at the tail's end
    return follower, target, acked


async def test_a_replay_ends_when_a_new_leader_replaced_the_uncommitted_tail(tmp_path):
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path) as cluster:
            follower, target, acked = await _restart_with_a_replaced_tail(cluster)
            restarted = replica(cluster, follower)
            await cluster.wait_until(lambda: not restarted.machine.replaying, 20, what="the replay ended")
            assert restarted.adapter.recovery_target < target
            await cluster.wait_until(lambda: restarted.audit.last_audit_index > 0, 20,
                                     what="the follower reported an audit after its recovery")
            await cluster.wait_until(lambda: converged(cluster, max(acked.values())), 20, what="converged")
            check_identical(cluster, acked)


async def test_control_without_the_lowered_target_the_replay_never_ends(tmp_path, monkeypatch):
    monkeypatch.setattr(StreamAdapter, "bound_recovery", lambda self, log_last_index: None)
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path) as cluster:
            follower, _, _ = await _restart_with_a_replaced_tail(cluster)
            restarted = replica(cluster, follower)
            with pytest.raises(TimeoutError):
                await cluster.wait_until(lambda: not restarted.machine.replaying, 5, what="the replay ended")
            assert restarted.audit.last_audit_index == 0  # a replaying replica reports no audit
