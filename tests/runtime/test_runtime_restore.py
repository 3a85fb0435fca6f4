"""The runtime's restart path turns every WAL damage finding into a repairing replica.

Method: write two hard-state slots through a real `Wal` on `OsDisk`, rot the newest slot at rest (the
vote it holds was already granted), reopen, and build the core's `RestoredState` with the runtime's own
`prepare`. The WAL falls back to the older slot without saying repairing; the runtime must still make
the replica repairing, or it could vote twice in one term (found by the simulator, `double-vote`).
"""

from __future__ import annotations

import random

from runtime_harness import ListMachine

from jsraft.disk import OsDisk
from jsraft.raft import HardState
from jsraft.raft.core import RaftNode
from jsraft.raft.config import RaftConfig
from jsraft.replica.restore import prepare
from jsraft.wal import Wal
from jsraft.wal.format import HARD_STATE_FILE, HARD_STATE_SLOT_OFFSETS


def _two_votes_then_rot_the_newest_slot(tmp_path, *, cut_log_record: bool) -> OsDisk:
    disk = OsDisk(str(tmp_path / "g"))
    wal, _ = Wal.open(disk)
    wal.save_hard_state(HardState(current_term=4, voted_for="n2"))
    wal.sync()
    wal.save_hard_state(HardState(current_term=5, voted_for="n3"))
    wal.sync()
    wal.close()
    path = tmp_path / "g" / HARD_STATE_FILE
    data = bytearray(path.read_bytes())
    data[HARD_STATE_SLOT_OFFSETS[1] + 30] ^= 0x08
    path.write_bytes(bytes(data))
    if cut_log_record:  # the log's copy of (5, n3), its last record, is lost too
        segment = next((tmp_path / "g" / "wal").iterdir())
        segment.write_bytes(segment.read_bytes()[:-5])
    return OsDisk(str(tmp_path / "g"))


def test_rotted_newest_hard_state_slot_restarts_repairing(tmp_path):
    _, recovered = Wal.open(_two_votes_then_rot_the_newest_slot(tmp_path, cut_log_record=True))
    assert not recovered.repairing and recovered.hard_state.current_term == 4  # the WAL's own view
    restored = prepare(recovered, ListMachine(), voters=("n1", "n2", "n3"), formatted=True)
    assert restored.repair_reasons, "a damaged hard-state slot must reach the core as a repair reason"
    node = RaftNode(RaftConfig(node_id="n1"), random.Random(0), restored)
    assert node.status().repairing


def test_rotted_slot_the_log_covers_restarts_with_its_vote(tmp_path):
    _, recovered = Wal.open(_two_votes_then_rot_the_newest_slot(tmp_path, cut_log_record=False))
    assert recovered.hard_state == HardState(current_term=5, voted_for="n3")
    restored = prepare(recovered, ListMachine(), voters=("n1", "n2", "n3"), formatted=True)
    assert restored.repair_reasons == ()
    node = RaftNode(RaftConfig(node_id="n1"), random.Random(0), restored)
    assert not node.status().repairing and node.hard_state().voted_for == "n3"


def test_torn_tail_cut_alone_is_not_damage(tmp_path):
    disk = OsDisk(str(tmp_path / "g"))
    wal, _ = Wal.open(disk)
    wal.save_hard_state(HardState(current_term=1))
    wal.close()
    _, recovered = Wal.open(OsDisk(str(tmp_path / "g")))
    assert recovered.damage_findings() == ()
