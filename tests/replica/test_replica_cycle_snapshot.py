"""Our own snapshot refused by the state machine: `GroupCycle` skips that compaction and the group goes on.

Method: a real `RaftNode` (one voter) and a real `Wal` on `OsDisk` in a temporary directory, driven by
`GroupCycle.run`; the state machine is production's `StreamAdapter` around a `StreamStateMachine` on a
MemStore that can be told to read a record back damaged (as a read-time bit flip does): the walk over the
live messages that builds the snapshot raises `DamagedSequence`, the store lists the fault, and the
adapter answers `SnapshotUnavailable`. Checked: the cycle neither saves a snapshot nor compacts (the WAL,
reopened, still holds every entry), the group keeps applying, the refusal is not retried at the same
index, and once the store is repaired the next compaction happens.
"""

from __future__ import annotations

import random

import pytest

from jsraft.disk import OsDisk
from jsraft.errors import DamagedSequence
from jsraft.jsapi.stream_config import parse_stream_config
from jsraft.raft import RaftConfig, RaftNode, RestoredState
from jsraft.replica import GroupCycle, marker_contents
from jsraft.replica.state_machine import SnapshotUnavailable
from jsraft.replica.stream_adapter import StreamAdapter
from jsraft.store.base import Fault, FaultKind
from jsraft.store.memstore import MemStore
from jsraft.stream import StreamStateMachine, store_config_for
from jsraft.stream import entries as stream_entries
from jsraft.wal import Wal

NOW = 1_700_000_000_000_000_000


class FlippingStore(MemStore):
    """A MemStore whose records read back damaged while `flipped` (each read lists the fault)."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.flipped = False
        self.found: list[Fault] = []

    def load_next(self, filters, start_seq):  # type: ignore[no-untyped-def]
        if self.flipped:
            self.found.append(Fault(first=start_seq, last=start_seq, kind=FaultKind.corrupt))
            raise DamagedSequence(start_seq, "crc")
        return super().load_next(filters, start_seq)

    def faults(self) -> list[Fault]:
        return list(self.found)


def _group(tmp_path) -> tuple[GroupCycle, StreamAdapter, FlippingStore]:  # type: ignore[no-untyped-def]
    config, raw = parse_stream_config(b'{"name": "S", "subjects": ["s.>"]}')
    store = FlippingStore(store_config_for(config))
    adapter = StreamAdapter(StreamStateMachine(store, config, raw))
    disk = OsDisk(str(tmp_path / "g"))
    wal, _ = Wal.open(disk)
    node = RaftNode(RaftConfig(node_id="n1"), random.Random(1), RestoredState.bootstrap(("n1",)))
    cycle = GroupCycle(name="S", node=node, wal=wal, disk=disk, state_machine=adapter,
                       marker=marker_contents("S", "n1"), snapshot_every_entries=2)
    return cycle, adapter, store


def _settle(cycle: GroupCycle) -> None:
    for _ in range(50):
        if not cycle.has_work():
            return
        cycle.run(lambda to_id, group, message: True)
    raise AssertionError("the cycle did not settle")


def _publish(cycle: GroupCycle, seq: int) -> None:
    cycle.node.propose(stream_entries.encode_msgs(seq, [(b"s.x", b"", b"m%d" % seq, NOW + seq, b"", 0)]))
    _settle(cycle)


def _started(tmp_path) -> tuple[GroupCycle, StreamAdapter, FlippingStore]:  # type: ignore[no-untyped-def]
    """A leading group with messages 1..3 and 2 deleted (an interior delete: the snapshot walks the store)."""
    cycle, adapter, store = _group(tmp_path)
    cycle.node.campaign()
    _settle(cycle)
    for seq in (1, 2, 3):
        _publish(cycle, seq)
    cycle.node.propose(stream_entries.encode_delete(2))
    _settle(cycle)
    return cycle, adapter, store


def test_a_snapshot_refused_for_a_damaged_read_skips_the_compaction_and_the_group_goes_on(tmp_path):
    cycle, adapter, store = _started(tmp_path)
    compacted = cycle.node.log.snapshot_index
    assert compacted > 0  # compaction works while the store reads clean

    store.flipped = True
    with pytest.raises(SnapshotUnavailable):
        adapter.snapshot()  # what the cycle meets: the adapter's answer, not the stream's own error
    store.found.clear()
    _publish(cycle, 4)
    _publish(cycle, 5)  # a compaction is now due; building its snapshot reads a damaged record
    assert cycle.snapshots_refused == 1
    assert cycle.node.log.snapshot_index == compacted  # not compacted past what the store can serve
    applied = adapter.machine.applied_index
    assert applied == cycle.node.log.applied_index and adapter.machine.last_seq == 5  # the group goes on
    assert not cycle.has_work()  # the refusal is not retried at the same index, nor while the fault stands
    cycle.wal.close()
    wal, recovered = Wal.open(OsDisk(str(tmp_path / "g")))
    assert recovered.snapshot is not None and recovered.snapshot[0].index == compacted
    assert [e.index for e in recovered.entries] == list(range(compacted + 1, applied + 1))
    wal.close()


def test_after_the_store_is_repaired_the_next_compaction_happens(tmp_path):
    cycle, adapter, store = _started(tmp_path)
    store.flipped = True
    _publish(cycle, 4)
    _publish(cycle, 5)
    refused_at, refusals = cycle.node.log.snapshot_index, cycle.snapshots_refused
    assert refusals >= 1
    store.flipped = False
    store.found.clear()  # repaired: the store reads clean and lists no fault
    _publish(cycle, 6)
    assert cycle.snapshots_refused == refusals
    assert cycle.node.log.snapshot_index == adapter.machine.applied_index > refused_at
