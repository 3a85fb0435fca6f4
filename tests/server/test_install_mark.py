"""A leader's snapshot whose repair never finished, restored after a crash: compared with the store in full.

Method: a leader `StreamStateMachine` (MemStore) applies a real log (MSGS 1..3, then a DELETE of 2) and
takes its snapshot at index 2. A follower — production's `StreamAdapter` with its `InstallMark`, over a
`FileStore`, both on `OsDisk` in a temporary directory — applied only the MSGS entry, so its store holds
seq 2, which the group deleted. It installs the leader's snapshot the way `GroupCycle` does
(`prepare_install`, then `restore`): the plan is not empty. Then it "crashes" before carrying it out (the
store closed, a new store and adapter opened over the same files) and restores that snapshot at open, as
the runtime does with the WAL's snapshot. Checked: the replica is repairing with the plan the install had
(before the fix it restored it as its own, leniently, and called the store current: simulator stream seeds
10313 and 10601); the control without the mark shows that lenient answer; carrying the plan out clears the
mark; a stale mark (another index) is ignored and cleared; our own snapshot clears it.
"""

from __future__ import annotations

from test_repair_adapter import repair

from jsraft.disk import OsDisk
from jsraft.jsapi.stream_config import parse_stream_config
from jsraft.raft.types import ConfState, Entry, SnapshotMeta
from jsraft.replica.install_mark import InstallMark
from jsraft.replica.stream_adapter import StreamAdapter
from jsraft.store.filestore import FileStore
from jsraft.store.memstore import MemStore
from jsraft.stream import Health, StreamStateMachine, store_config_for
from jsraft.stream import entries as stream_entries

NOW = 1_700_000_000_000_000_000
CONFIG, RAW = parse_stream_config(b'{"name": "S", "subjects": ["s.>"]}')
MSGS = Entry(index=1, term=1, data=stream_entries.encode_msgs(
    1, [(b"s.x", b"", f"m{seq}".encode(), NOW + seq, b"", 0) for seq in (1, 2, 3)]))
DELETE = Entry(index=2, term=1, data=stream_entries.encode_delete(2))


def _leader() -> StreamStateMachine:
    leader = StreamStateMachine(MemStore(store_config_for(CONFIG)), CONFIG, RAW)
    for entry in (MSGS, DELETE):
        leader.apply(entry.index, entry.data)
    return leader


def _open(disk: OsDisk, *, marked: bool = True) -> StreamAdapter:
    store = FileStore.open(disk.sub("msgs"), store_config_for(CONFIG))
    return StreamAdapter(StreamStateMachine(store, CONFIG, RAW), install_mark=InstallMark(disk) if marked else None)


def _installed_then_crashed(tmp_path) -> tuple[OsDisk, StreamStateMachine, bytes]:  # type: ignore[no-untyped-def]
    """The follower applied index 1, installed the leader's snapshot at 2 and crashed before its repair."""
    leader, disk = _leader(), OsDisk(str(tmp_path / "replica"))
    follower = _open(disk)
    follower.recovery_target = 0  # open: a snapshot restored from now on is the leader's
    follower.apply([MSGS])
    snapshot = leader.snapshot()
    follower.prepare_install(SnapshotMeta(index=2, term=1, conf=ConfState(voters=("n1", "n2", "n3"))))
    follower.restore(snapshot)
    assert follower.plan is not None and follower.machine.health is Health.repairing  # seq 2 is extra here
    follower.machine.store.close()
    return disk, leader, snapshot


def test_an_unrepaired_install_is_compared_in_full_at_open(tmp_path) -> None:  # type: ignore[no-untyped-def]
    disk, leader, snapshot = _installed_then_crashed(tmp_path)
    assert InstallMark(disk).pending() == 2
    reopened = _open(disk)
    reopened.restore(snapshot)  # the runtime's restore of the WAL's snapshot at open
    assert reopened.plan is not None and not reopened.plan.recovering
    assert reopened.machine.health is Health.repairing and reopened.holding
    assert reopened.plan.plan.fetch  # the differing range is fetched again
    repair(reopened, leader)  # carried out (`release`): the store is the group's, the mark is gone
    assert InstallMark(disk).pending() is None
    assert reopened.machine.health is Health.current and not reopened.holding
    assert reopened.machine.store.state().agreement_key() == leader.store.state().agreement_key()


def test_without_the_mark_the_same_restart_calls_the_store_current(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The control: the hole the mark closes (the store holds seq 2, the group deleted it)."""
    disk, leader, snapshot = _installed_then_crashed(tmp_path)
    reopened = _open(disk, marked=False)
    reopened.restore(snapshot)
    assert reopened.plan is None and reopened.machine.health is Health.current
    assert reopened.machine.store.state().agreement_key() != leader.store.state().agreement_key()


def test_a_stale_mark_is_ignored_and_cleared(tmp_path) -> None:  # type: ignore[no-untyped-def]
    disk = OsDisk(str(tmp_path / "replica"))
    follower = _open(disk)
    follower.recovery_target = 0
    follower.apply([MSGS, DELETE])
    own = follower.snapshot()  # our own snapshot at 2
    InstallMark(disk).set(7)  # an install at 7 the WAL never held (the crash came before it was written)
    follower.machine.store.close()
    reopened = _open(disk)
    reopened.restore(own)
    assert reopened.plan is None and reopened.machine.health is Health.current and reopened.machine.replaying
    assert InstallMark(disk).pending() is None


def test_our_own_snapshot_clears_the_mark(tmp_path) -> None:  # type: ignore[no-untyped-def]
    disk = OsDisk(str(tmp_path / "replica"))
    follower = _open(disk)
    follower.recovery_target = 0
    follower.apply([MSGS])
    follower.prepare_install(SnapshotMeta(index=1, term=1, conf=ConfState(voters=("n1",))))
    assert InstallMark(disk).pending() == 1
    follower.snapshot()  # at 1: the index the mark names; it must not be taken for the leader's
    assert InstallMark(disk).pending() is None
