"""The one Ready cycle (`replica.GroupCycle`, `replica.persist`): its order and its truncation guard.

Method: a real `Wal` on `OsDisk` in a temporary directory and a real `RaftNode`; the WAL is wrapped in a
recorder that notes each storage call before passing it on, so a test can read the order in which one
cycle touched storage and the network. The guard tests build the storage state a repairing replica
reaches (a commit hint above a log it must cut) and hand `write_work` the `Work` the core would.
"""

from __future__ import annotations

import random

import pytest

from jsraft.disk import OsDisk
from jsraft.errors import InvariantViolation
from jsraft.raft import Entry, HardState, RaftConfig, RaftNode, Ready, RestoredState
from jsraft.replica import GROUP_MARKER, GroupCycle, Work, marker_contents, sync_work, write_work
from jsraft.wal import Wal


class Recorder:
    """Passes every call to the real `Wal`, noting the storage calls in `events`."""

    NOTED = {"append", "sync", "save_hard_state", "truncate_from", "save_snapshot", "compact", "replace"}

    def __init__(self, wal: Wal, events: list[str]) -> None:
        self._wal, self._events = wal, events

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        value = getattr(self._wal, name)
        if name in self.NOTED:
            def noted(*args, **kwargs):  # type: ignore[no-untyped-def]
                self._events.append(name)
                return value(*args, **kwargs)
            return noted
        return value


class Values:
    """A state machine that keeps each applied entry's data."""

    def __init__(self) -> None:
        self.applied_index = 0
        self.values: list[bytes] = []

    def apply(self, entries):  # type: ignore[no-untyped-def]
        self.values.extend(e.data for e in entries)
        self.applied_index = entries[-1].index
        return [None] * len(entries)

    def snapshot(self) -> bytes:
        return b"\n".join(self.values)

    def restore(self, data: bytes) -> None:
        raise AssertionError("not in these tests")


def _voter(tmp_path, events: list[str], voters: tuple[str, ...] = ("n1",)) -> tuple[GroupCycle, Wal, OsDisk]:
    disk = OsDisk(str(tmp_path / "g"))
    wal, _ = Wal.open(disk)
    node = RaftNode(RaftConfig(node_id="n1"), random.Random(1), RestoredState.bootstrap(voters))
    cycle = GroupCycle(name="g", node=node, wal=Recorder(wal, events), disk=disk,  # type: ignore[arg-type]
                       state_machine=Values(), marker=marker_contents("g", "n1"), snapshot_every_entries=None)
    return cycle, wal, disk


def _run_all(cycle: GroupCycle, events: list[str]) -> None:
    def send(to_id, group, message):  # type: ignore[no-untyped-def]
        events.append("send")
        return True

    for _ in range(20):
        if not cycle.has_work():
            return
        cycle.run(send, lambda work: events.append("persisted"))
    raise AssertionError("the cycle did not settle")


def test_entries_and_the_hard_state_that_vouches_for_them_share_one_sync(tmp_path):
    events: list[str] = []
    cycle, wal, disk = _voter(tmp_path, events)
    cycle.node.campaign()
    _run_all(cycle, events)
    events.clear()
    index = cycle.node.propose(b"x")
    _run_all(cycle, events)
    # The hard-state record follows the entries it vouches for, and one sync makes both durable (#18).
    first_cycle = events[: events.index("persisted")]
    assert first_cycle == ["append", "save_hard_state", "sync"]
    assert cycle.state_machine.values[-1] == b"x" and cycle.state_machine.applied_index == index
    assert wal.hard_state.acked_watermark >= index
    assert disk.exists(GROUP_MARKER)  # written once the first cycle was durable


def test_messages_leave_only_after_the_cycle_is_durable(tmp_path):
    events: list[str] = []
    cycle, _, _ = _voter(tmp_path, events, voters=("n1", "n2"))  # n2 is never driven
    cycle.node.campaign()
    _run_all(cycle, events)
    assert "send" in events  # the (pre-)vote request to n2
    for at, event in enumerate(events):
        if event == "send":
            assert "persisted" in events[:at]


def _repairing_log(tmp_path) -> tuple[Wal, list[Entry]]:
    """Entries 1..10 (term 1), commit hint 8 stored, not yet known to be repairing."""
    wal, _ = Wal.open(OsDisk(str(tmp_path / "r")))
    entries = [Entry(index=i, term=1, data=b"old%d" % i) for i in range(1, 11)]
    wal.append(entries)
    wal.sync()
    wal.save_hard_state(HardState(current_term=1, commit_index=8, acked_watermark=10))
    return wal, entries


def test_a_cut_below_the_hint_by_a_replica_that_just_became_repairing(tmp_path):
    """The core found itself repairing in this very Ready and replaces stale copies from 6 on: the WAL must
    learn the flag before the cut (the old runtime guard only lowered a falling commit hint, and this
    hint did not fall)."""
    wal, _ = _repairing_log(tmp_path)
    hard_state = HardState(current_term=2, commit_index=8, acked_watermark=10, repairing=True)
    new = tuple(Entry(index=i, term=2, data=b"new%d" % i) for i in range(6, 9))
    work = Work(ready=Ready(hard_state=hard_state, truncate_from=6, entries=new, must_sync=True),
                hard_state=hard_state)
    write_work(wal, OsDisk(str(tmp_path / "r")), work)
    sync_work(wal, OsDisk(str(tmp_path / "r")), work)
    assert wal.hard_state.repairing and wal.last_index() == 8
    assert wal.entries(6, 9) == list(new)


def test_a_cut_below_the_hint_is_refused_on_a_replica_that_is_not_repairing(tmp_path):
    """The guard is the WAL's (never truncate a committed entry); the cycle only tells it the truth."""
    wal, _ = _repairing_log(tmp_path)
    hard_state = HardState(current_term=2, commit_index=8, acked_watermark=10)
    work = Work(ready=Ready(hard_state=hard_state, truncate_from=6, must_sync=True), hard_state=hard_state)
    with pytest.raises(InvariantViolation, match="never truncate a committed entry"):
        write_work(wal, OsDisk(str(tmp_path / "r")), work)


def test_a_commit_hint_that_went_down_is_recorded_before_the_cut(tmp_path):
    wal, _ = _repairing_log(tmp_path)
    hard_state = HardState(current_term=2, commit_index=5, acked_watermark=10)
    work = Work(ready=Ready(hard_state=hard_state, truncate_from=6, must_sync=True), hard_state=hard_state)
    write_work(wal, OsDisk(str(tmp_path / "r")), work)
    assert wal.last_index() == 5 and wal.hard_state.commit_index == 5
