"""The node's record of the groups its storage started (`runtime.group_record`).

Method: a real `OsDisk` under a temporary directory. The record's decisions are checked directly: a fresh
node starts with an empty record (written at once), a started group stays on it across reopening until it
is discarded, and a record that is missing although the node ran before, or damaged (one flipped byte, a
truncated file), is never trusted: every group assigned up to the meta floor counts as lost storage, and
that floor survives a reopen. `on_open` records a group with durable state of its own at once and leaves
one with nothing durable to `started` (decisions 4, 5), each read back from the file. The vote-term
ceiling (decision 6): `started` writes the name and the ceiling in one change, `cover_term` writes only
when a term passes the ceiling (counted by the record's generation), a reopen reads it back, and `discard`
drops it. The journal itself (torn appends, damage, marks, rewrites, crashes) is `test_group_record_journal.py`'s.
"""

from __future__ import annotations

import os

from jsraft.disk import OsDisk
from jsraft.runtime.group_record import GROUP_RECORD_FILE, VOTE_CEILING_STEP, GroupRecord


def test_a_fresh_node_records_what_it_starts_and_forgets_what_it_deleted(tmp_path):
    disk = OsDisk(str(tmp_path))
    record = GroupRecord.open(disk, node_existed=False)
    assert os.path.exists(tmp_path / GROUP_RECORD_FILE) and not record.lost
    assert not record.lost_storage("$meta", assigned_index=None)
    record.add("$meta")
    record.add("S-ORDERS-7")
    reopened = GroupRecord.open(disk, node_existed=True)
    assert reopened.names() == ["$meta", "S-ORDERS-7"] and not reopened.lost
    assert reopened.lost_storage("S-ORDERS-7", assigned_index=7)
    assert not reopened.lost_storage("S-NEW-9", assigned_index=9)
    reopened.discard("S-ORDERS-7")
    assert GroupRecord.open(disk, node_existed=True).names() == ["$meta"]


def test_a_missing_record_of_a_node_that_ran_counts_every_older_group_as_lost(tmp_path):
    disk = OsDisk(str(tmp_path))
    record = GroupRecord.open(disk, node_existed=True)
    assert record.lost
    # Before the meta floor is known, every group is on the safe side.
    assert record.lost_storage("$meta", assigned_index=None)
    assert record.lost_storage("S-X-1000000", assigned_index=1_000_000)
    record.set_lost_floor(40)
    assert record.lost_storage("S-OLD-40", assigned_index=40)
    assert not record.lost_storage("S-NEW-41", assigned_index=41)
    record.add("S-NEW-41")
    reopened = GroupRecord.open(disk, node_existed=True)  # the floor is durable
    assert reopened.unknown_through_meta_index == 40
    assert reopened.lost_storage("S-OLD-40", assigned_index=40) and reopened.lost_storage("S-NEW-41", assigned_index=41)
    assert not reopened.lost_storage("S-NEWER-50", assigned_index=50)


def test_a_damaged_record_is_never_trusted(tmp_path):
    disk = OsDisk(str(tmp_path))
    record = GroupRecord.open(disk, node_existed=False)
    record.add("S-A-3")
    path = tmp_path / GROUP_RECORD_FILE
    data = bytearray(path.read_bytes())
    for damage in ("flip", "truncate"):
        broken = bytearray(data)
        if damage == "flip":
            broken[-3] ^= 0x01
        else:
            broken = broken[:-5]
        path.write_bytes(bytes(broken))
        reopened = GroupRecord.open(disk, node_existed=True)
        assert reopened.lost, damage
        assert reopened.lost_storage("S-A-3", assigned_index=3), damage
        assert path.read_bytes() == bytes(broken), "a damaged record must not be replaced before the floor is known"


def test_a_group_is_recorded_at_open_only_with_durable_state_of_its_own(tmp_path):
    disk = OsDisk(str(tmp_path))
    record = GroupRecord.open(disk, node_existed=False)
    # Nothing durable (decision 5): may bootstrap, recorded only by `started`, after its first durable cycle.
    assert record.on_open("S-NEW-3", formatted=False, empty=True, assigned_index=3) is False
    assert not GroupRecord.open(disk, node_existed=True).recorded("S-NEW-3")
    record.started("S-NEW-3")
    assert GroupRecord.open(disk, node_existed=True).recorded("S-NEW-3")
    # Its marker, or a WAL that holds something (decision 4): recorded before the open returns.
    assert record.on_open("S-MARKED-4", formatted=True, empty=True, assigned_index=4) is True
    assert record.on_open("S-LOGGED-5", formatted=False, empty=False, assigned_index=5) is False
    reopened = GroupRecord.open(disk, node_existed=True)
    assert reopened.recorded("S-MARKED-4") and reopened.recorded("S-LOGGED-5")
    # Recorded, then its directory lost (decision 1): opens as a member that lost its storage.
    assert reopened.on_open("S-NEW-3", formatted=False, empty=True, assigned_index=3) is True


def _generation(disk: OsDisk) -> int:
    return GroupRecord.open(disk, node_existed=True)._generation


def test_the_vote_ceiling_is_written_a_step_above_and_only_when_passed(tmp_path):
    disk = OsDisk(str(tmp_path))
    record = GroupRecord.open(disk, node_existed=False)
    first = _generation(disk)
    record.started("S-A-3", 1)
    assert _generation(disk) == first + 1, "name and ceiling in one write"
    reopened = GroupRecord.open(disk, node_existed=True)
    assert reopened.recorded("S-A-3") and reopened.vote_ceiling("S-A-3") == 1 + VOTE_CEILING_STEP
    for term in range(2, 2 + VOTE_CEILING_STEP):  # up to the ceiling: no write
        record.cover_term("S-A-3", term)
    assert _generation(disk) == first + 1
    record.cover_term("S-A-3", 2 + VOTE_CEILING_STEP)
    assert _generation(disk) == first + 2
    assert GroupRecord.open(disk, node_existed=True).vote_ceiling("S-A-3") == 2 + 2 * VOTE_CEILING_STEP
    assert record.vote_ceiling("S-NEVER") == 0
    record.discard("S-A-3")
    assert GroupRecord.open(disk, node_existed=True).vote_ceiling("S-A-3") == 0


def test_every_change_reads_back_whatever_the_order_and_a_rewrite_is_the_sorted_json(tmp_path, monkeypatch):
    """Invariants 2 and 4: after every kind of change, in any order (names out of order, and ones JSON
    escapes), a reopened record holds exactly the groups and ceilings made so far — through appended changes
    and through rewrites (the threshold lowered so that both happen) — and the snapshot a rewrite writes is
    what `json.dumps(sort_keys=True)` makes of the record."""
    import json
    import random

    from jsraft.codec.records import HEADER_BYTES, read_record
    from jsraft.runtime import group_record

    monkeypatch.setattr(group_record, "COMPACT_BYTES_MIN", 600)
    disk = OsDisk(str(tmp_path))
    record = GroupRecord.open(disk, node_existed=False)
    rng = random.Random(7)
    names = [f"S-{rng.randrange(10**6)}-{i}" for i in range(60)] + ["$meta", 'S-"q"-1', "S-é-2", "S-a\\b-3"]
    rng.shuffle(names)
    groups: set[str] = set()
    ceilings: dict[str, int] = {}
    rewrites = 0

    def check(step) -> None:
        nonlocal rewrites
        reopened = GroupRecord.open(disk, node_existed=True)
        assert not reopened.lost, step
        assert reopened.names() == sorted(groups), step
        assert {name: reopened.vote_ceiling(name) for name in ceilings} == ceilings, step
        data = (tmp_path / GROUP_RECORD_FILE).read_bytes()
        view = read_record(data, group_record.JOURNAL_START)
        if view.ident_a == reopened._generation:  # the file was rewritten by this change
            rewrites += 1
            assert view.offset + view.length == len(data), "a rewrite holds the snapshot alone"
            assert data[view.offset + HEADER_BYTES: view.offset + view.length] == json.dumps(
                {"version": 3, "groups": sorted(groups), "unknown_through_meta_index": None,
                 "vote_ceilings": ceilings}, sort_keys=True).encode(), step

    check("fresh")
    for step, name in enumerate(names):
        if step % 3 == 0:
            record.add(name)
        else:
            record.started(name, term=step)
            ceilings[name] = step + VOTE_CEILING_STEP
        groups.add(name)
        if step % 5 == 4:
            record.cover_term(name, step + 100)
            ceilings[name] = step + 100 + VOTE_CEILING_STEP
        if step % 7 == 6:
            gone = sorted(groups)[step % len(groups)]
            record.discard(gone)
            groups.discard(gone)
            ceilings.pop(gone, None)
        check(step)
    assert rewrites >= 3, f"the threshold should have made rewrites happen: {rewrites}"
    reopened = GroupRecord.open(disk, node_existed=True)
    reopened.add("S-after-reopen")
    groups.add("S-after-reopen")
    check("after reopen")
    lost = GroupRecord.open(OsDisk(str(tmp_path / "lost")), node_existed=True)
    lost.set_lost_floor(40)
    lost.started("S-b", term=3)
    again = GroupRecord.open(OsDisk(str(tmp_path / "lost")), node_existed=True)
    assert again.unknown_through_meta_index == 40 and again.names() == ["S-b"]
    assert again.vote_ceiling("S-b") == 3 + VOTE_CEILING_STEP
