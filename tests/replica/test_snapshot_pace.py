"""A stream group snapshots by messages and bytes applied, not only by entries (`SnapshotPace`).

Method: `SnapshotPace` alone for its counting rules (asks once per period, asks again when the request
was not taken, no bound never asks, a bad bound is refused); then a real `RaftNode` (one voter) and a real
`Wal` on `OsDisk` in a temporary directory, driven by `GroupCycle.run` with the cycle's entry count off
(`snapshot_every_entries=None`). The state machine is production's `StreamAdapter` around a
`StreamStateMachine` on a MemStore, its pace asking the cycle (`request_snapshot`) for a snapshot. MSGS
entries of several messages each go through; checked: the cycle compacts once the messages (or bytes)
since the last snapshot reach the bound, the WAL reopened holds only the entries after that snapshot
(what a restart replays), and a machine restored from that snapshot counts from zero again.
"""

from __future__ import annotations

import random

import pytest
from test_replica_cycle_snapshot import _settle

from jsraft.disk import OsDisk
from jsraft.jsapi.stream_config import parse_stream_config
from jsraft.raft import RaftConfig, RaftNode, RestoredState
from jsraft.replica import GroupCycle, marker_contents
from jsraft.replica.snapshot_pace import SnapshotBound, SnapshotPace
from jsraft.replica.stream_adapter import StreamAdapter
from jsraft.store.memstore import MemStore
from jsraft.stream import StreamStateMachine, store_config_for
from jsraft.stream import entries as stream_entries
from jsraft.wal import Wal

NOW = 1_700_000_000_000_000_000
PER_ENTRY = 4


def test_the_pace_asks_once_per_period_and_again_after_a_reset():
    asked: list[int] = []
    pace = SnapshotPace(SnapshotBound(msgs=10), lambda: asked.append(1) or True)
    pace.applied(6, 100)
    assert not asked and not pace.due()
    pace.applied(4, 100)
    assert asked == [1] and pace.due() and pace.requests == 1
    pace.applied(50, 100)
    assert asked == [1]  # taken once: not asked again within the period
    pace.reset()
    assert (pace.msgs, pace.bytes, pace.due()) == (0, 0, False)
    pace.applied(10, 0)
    assert asked == [1, 1] and pace.requests == 2


def test_a_request_not_taken_is_asked_again_at_the_next_entry():
    answers = [False, True]
    pace = SnapshotPace(SnapshotBound(bytes=1000), lambda: answers.pop(0))
    pace.applied(1, 1000)
    assert pace.requests == 0 and not pace.asked  # the group was not running: not taken
    pace.applied(1, 10)
    assert pace.requests == 1 and pace.asked and answers == []


def test_no_bound_never_asks_and_a_bound_below_one_is_refused():
    pace = SnapshotPace(SnapshotBound(), lambda: pytest.fail("asked without a bound"))
    pace.applied(1 << 30, 1 << 40)
    assert not pace.due() and pace.msgs == 1 << 30
    for bad in ({"msgs": 0}, {"bytes": -1}):
        with pytest.raises(ValueError):
            SnapshotBound(**bad)


def _group(tmp_path, bound: SnapshotBound) -> tuple[GroupCycle, StreamAdapter]:  # type: ignore[no-untyped-def]
    config, raw = parse_stream_config(b'{"name": "S", "subjects": ["s.>"]}')
    machine = StreamStateMachine(MemStore(store_config_for(config)), config, raw)
    holder: list[GroupCycle] = []

    def due() -> bool:
        holder[0].request_snapshot()
        return True

    adapter = StreamAdapter(machine, pace=SnapshotPace(bound, due))
    disk = OsDisk(str(tmp_path / "g"))
    wal, _ = Wal.open(disk)
    node = RaftNode(RaftConfig(node_id="n1"), random.Random(1), RestoredState.bootstrap(("n1",)))
    cycle = GroupCycle(name="S", node=node, wal=wal, disk=disk, state_machine=adapter,
                       marker=marker_contents("S", "n1"), snapshot_every_entries=None)
    holder.append(cycle)
    cycle.node.campaign()
    _settle(cycle)
    return cycle, adapter


def _publish(cycle: GroupCycle, first_seq: int, payload: bytes = b"m") -> None:
    msgs = [(b"s.x", b"", payload, NOW + first_seq + i, b"", 0) for i in range(PER_ENTRY)]
    cycle.node.propose(stream_entries.encode_msgs(first_seq, msgs))
    _settle(cycle)


def test_the_cycle_snapshots_once_the_messages_since_the_last_snapshot_reach_the_bound(tmp_path):
    cycle, adapter = _group(tmp_path, SnapshotBound(msgs=10))
    assert cycle.node.log.snapshot_index == 0
    _publish(cycle, 1)
    _publish(cycle, 5)  # 8 messages: below the bound, no snapshot (the entry count is off)
    assert cycle.node.log.snapshot_index == 0 and adapter.pace.msgs == 8
    _publish(cycle, 9)  # 12: past it
    snapshot_at = cycle.node.log.snapshot_index
    assert snapshot_at == adapter.machine.applied_index > 0
    assert adapter.pace.msgs == 0 and adapter.pace.requests == 1
    _publish(cycle, 13)  # 4 more after the snapshot: these are all a restart replays
    assert cycle.node.log.snapshot_index == snapshot_at
    cycle.wal.close()

    wal, recovered = Wal.open(OsDisk(str(tmp_path / "g")))
    assert recovered.snapshot is not None and recovered.snapshot[0].index == snapshot_at
    replayed = [stream_entries.decode_entry(e.data) for e in recovered.entries if e.data]
    assert [(b.first_seq, len(b.msgs)) for b in replayed] == [(13, PER_ENTRY)]
    wal.close()

    config, raw = parse_stream_config(b'{"name": "S", "subjects": ["s.>"]}')
    restored = StreamAdapter(StreamStateMachine(MemStore(store_config_for(config)), config, raw),
                             pace=SnapshotPace(SnapshotBound(msgs=10)))
    restored.pace.applied(7, 7)
    restored.restore(recovered.snapshot[1])
    assert (restored.pace.msgs, restored.pace.bytes) == (0, 0)  # a restored snapshot starts a new period


def test_the_byte_bound_snapshots_large_messages_before_the_message_bound(tmp_path):
    cycle, adapter = _group(tmp_path, SnapshotBound(msgs=1000, bytes=20_000))
    _publish(cycle, 1, b"x" * 4000)  # one entry of 4 messages: ~16 KB of entry data
    assert cycle.node.log.snapshot_index == 0 and 16_000 < adapter.pace.bytes < 20_000
    _publish(cycle, 5, b"x" * 4000)
    assert cycle.node.log.snapshot_index == adapter.machine.applied_index > 0
    assert adapter.pace.bytes == 0
