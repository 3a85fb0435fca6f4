"""The record of started groups as a journal (`runtime.group_record` invariants 2–4).

Method: the real `GroupRecord` on a real `OsDisk` (damage made by editing the file's bytes, power cuts by the
shadow tracker's `power_cut`) and on a `SimDisk` (crashes that tear what was not synced). Checked:

- a change writes a few dozen bytes whatever the number of groups, and the rewrites that keep the file small
  are rare: over 3,000 groups the bytes written per change stay bounded (the whole record written at every
  change grew with the groups: `bench/README.md` "Scale");
- a torn append (bytes after the newest mark's end that do not verify) is dropped, not taken for damage, and
  the next change cuts it; a change whose mark was never written is kept;
- damage before the mark's end (a flipped byte in the snapshot or in a change, a tail cut below the mark)
  and two bad marks are damage: the record is lost (decision 2); one bad mark is not;
- a format-1 record (an older build's) is read and rewritten as a journal at its first change;
- a crash at any fsync of any change, on both disks, never makes the record lost, and the record read back
  is the state before the change in flight or after it: every change whose call returned is there.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

import pytest

from jsraft.codec.records import FILE_HEADER, FILE_MAGIC, Kind, encode_record
from jsraft.disk import OsDisk, power_cut
from jsraft.runtime import group_record
from jsraft.runtime.group_record import (
    GROUP_RECORD_FILE, GROUP_RECORD_FILE_TYPE, JOURNAL_START, MARK_SLOT_BYTES, GroupRecord,
)
from jsraft.testing.simdisk import SimDisk


def _state(record: GroupRecord) -> tuple[list[str], dict[str, int]]:
    return record.names(), dict(record._ceilings)


def _journal_with_changes(disk: Any, count: int) -> GroupRecord:
    record = GroupRecord.open(disk, node_existed=False)
    for i in range(count):
        record.started(f"S-{i}", term=i + 1)
    return record


# --- Cost -------------------------------------------------------------------------------------------------


class _HookedDisk:
    """Delegates to a disk, calling `before(kind, nbytes)` ahead of every whole-file rewrite ("rewrite"),
    write to an open file ("pwrite") and fsync of one ("sync"): what counts bytes, and what cuts the power."""

    def __init__(self, inner: Any, before: Any) -> None:
        self.inner, self.before = inner, before

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def write_atomic(self, path: str, data: bytes) -> None:
        self.before("rewrite", len(data))
        self.inner.write_atomic(path, data)

    def open(self, path: str, *, create: bool = False) -> Any:
        before, handle = self.before, self.inner.open(path, create=create)

        class _File:
            def __getattr__(self, name: str) -> Any:
                return getattr(handle, name)

            def pwrite(self, offset: int, data: bytes) -> None:
                before("pwrite", len(data))
                handle.pwrite(offset, data)

            def sync(self) -> None:
                before("sync", 0)
                handle.sync()

        return _File()


def test_a_change_costs_bounded_bytes_whatever_the_number_of_groups(tmp_path):
    counts = {"written": 0, "rewrites": 0}

    def count(kind: str, nbytes: int) -> None:
        counts["written"] += nbytes
        counts["rewrites"] += kind == "rewrite"

    record = GroupRecord.open(_HookedDisk(OsDisk(str(tmp_path)), count), node_existed=False)
    per_thousand = []
    for thousand in range(3):
        before = counts["written"]
        for i in range(1000):
            record.started(f"S-STREAM-{thousand}-{i}", term=1)
        per_thousand.append((counts["written"] - before) / 1000)
    # One change: its record (~60 bytes) and its mark (32); the rewrites add a constant factor on average.
    assert max(per_thousand) < 400, per_thousand
    assert per_thousand[2] < 1.5 * per_thousand[0] + 50, f"grows with the groups: {per_thousand}"
    assert counts["rewrites"] <= 12, counts
    assert GroupRecord.open(OsDisk(str(tmp_path)), node_existed=True).names() == record.names()


# --- Torn appends, marks and damage -----------------------------------------------------------------------


def test_a_torn_append_is_dropped_and_cut_by_the_next_change(tmp_path):
    disk = OsDisk(str(tmp_path))
    record = _journal_with_changes(disk, 5)
    path = tmp_path / GROUP_RECORD_FILE
    whole = path.read_bytes()
    torn = encode_record(Kind.GROUP_RECORD, 99, 1, b'{"add":"S-TORN"}')
    for tail in (torn[:-3], torn[:10], bytes(40), torn[:-1] + bytes([torn[-1] ^ 1])):
        path.write_bytes(whole + tail)
        reopened = GroupRecord.open(disk, node_existed=True)
        assert not reopened.lost and _state(reopened) == _state(record), tail
    reopened.add("S-NEXT")
    journal = path.read_bytes()[JOURNAL_START:]
    assert journal[: len(whole) - JOURNAL_START] == whole[JOURNAL_START:] and b"S-TORN" not in journal
    again = GroupRecord.open(disk, node_existed=True)
    assert not again.lost and again.recorded("S-NEXT") and not again.recorded("S-TORN")


def test_a_change_whose_mark_was_never_written_is_kept(tmp_path):
    disk = OsDisk(str(tmp_path))
    _journal_with_changes(disk, 3)
    path = tmp_path / GROUP_RECORD_FILE
    before = path.read_bytes()
    GroupRecord.open(disk, node_existed=True).add("S-UNMARKED")
    after = path.read_bytes()
    # Put the marks back as they were: the change's record is there, its mark is not.
    path.write_bytes(before[:JOURNAL_START] + after[JOURNAL_START:])
    reopened = GroupRecord.open(disk, node_existed=True)
    assert not reopened.lost and reopened.recorded("S-UNMARKED")


def _damaged(tmp_path, edit) -> GroupRecord:
    disk = OsDisk(str(tmp_path))
    _journal_with_changes(disk, 4)
    path = tmp_path / GROUP_RECORD_FILE
    data = bytearray(path.read_bytes())
    path.write_bytes(bytes(edit(data)))
    return GroupRecord.open(disk, node_existed=True)


def _flip(at: int):
    def edit(data: bytearray) -> bytearray:
        data[at] ^= 0x10
        return data
    return edit


@pytest.mark.parametrize("what, edit", [
    ("a byte of the snapshot", _flip(JOURNAL_START + 30)),
    ("a byte of the first change", lambda data: _flip(_change_offsets(data)[0] + 28)(data)),
    ("a byte of the last change", lambda data: _flip(len(data) - 2)(data)),
    ("the tail cut below the mark", lambda data: data[:-7]),
    ("the last change cut whole", lambda data: data[:_change_offsets(data)[-1]]),
    ("both marks", lambda data: _flip(FILE_HEADER.size + 9)(_flip(FILE_HEADER.size + MARK_SLOT_BYTES + 9)(data))),
    ("the file header", _flip(0)),
])
def test_damage_before_the_marked_end_is_never_trusted(tmp_path, what, edit):
    reopened = _damaged(tmp_path, edit)
    assert reopened.lost, what
    assert reopened.lost_storage("S-0", assigned_index=3), what


def test_one_bad_mark_is_not_damage(tmp_path):
    disk = OsDisk(str(tmp_path))
    record = _journal_with_changes(disk, 4)
    path = tmp_path / GROUP_RECORD_FILE
    for slot in range(2):
        data = bytearray(path.read_bytes())
        data[FILE_HEADER.size + slot * MARK_SLOT_BYTES + 9] ^= 0x10
        path.write_bytes(bytes(data))
        reopened = GroupRecord.open(disk, node_existed=True)
        assert not reopened.lost and _state(reopened) == _state(record), slot
        reopened.add(f"S-AFTER-{slot}")  # writes the slot after the newest good mark
        record.add(f"S-AFTER-{slot}")
        assert _state(GroupRecord.open(disk, node_existed=True)) == _state(record)


def _change_offsets(data: bytes) -> list[int]:
    from jsraft.codec.records import read_record

    offsets, offset = [], JOURNAL_START
    while offset < len(data):
        view = read_record(data, offset)
        if view.ident_b == 1:
            offsets.append(offset)
        offset += view.length
    return offsets


def test_a_format_1_record_is_read_and_rewritten_as_a_journal_at_its_first_change(tmp_path):
    disk = OsDisk(str(tmp_path))
    body = json.dumps({"version": 2, "groups": ["$meta", "S-A-1"], "unknown_through_meta_index": None,
                       "vote_ceilings": {"S-A-1": 9}}, sort_keys=True).encode()
    disk.write_atomic(GROUP_RECORD_FILE, FILE_HEADER.pack(FILE_MAGIC, 1, GROUP_RECORD_FILE_TYPE)
                      + encode_record(Kind.GROUP_RECORD, 4, 0, body))
    old = GroupRecord.open(disk, node_existed=True)
    assert not old.lost and old.names() == ["$meta", "S-A-1"] and old.vote_ceiling("S-A-1") == 9
    old.started("S-B-2", term=1)
    data = (tmp_path / GROUP_RECORD_FILE).read_bytes()
    assert data[4] == 2, "format 2 of the file type"
    reopened = GroupRecord.open(disk, node_existed=True)
    assert not reopened.lost and _state(reopened) == _state(old)


# --- Crashes at every fsync -------------------------------------------------------------------------------


class _Cut(Exception):
    """The power failed at this fsync (before it, or, for a whole-file rewrite, before the rewrite)."""


def _operations(rng: random.Random, count: int) -> list[tuple[str, str, int]]:
    names = [f"S-{i}" for i in range(count // 2 + 2)]
    ops = []
    for _ in range(count):
        kind = rng.choice(("started", "started", "add", "cover_term", "discard"))
        ops.append((kind, rng.choice(names), rng.randrange(1, 60)))
    return ops


def _apply(record: GroupRecord, op: tuple[str, str, int]) -> None:
    kind, name, term = op
    if kind == "started":
        record.started(name, term)
    elif kind == "cover_term":
        record.cover_term(name, term)
    else:
        getattr(record, kind)(name)


def _model(ops: list[tuple[str, str, int]]) -> tuple[list[str], dict[str, int]]:
    """The record's state after `ops`, by the decisions' rules alone."""
    names: set[str] = set()
    ceilings: dict[str, int] = {}
    for kind, name, term in ops:
        if kind in ("started", "add"):
            names.add(name)
        if kind in ("started", "cover_term") and term > ceilings.get(name, 0):
            ceilings[name] = term + group_record.VOTE_CEILING_STEP
        if kind == "discard":
            names.discard(name)
            ceilings.pop(name, None)
    return sorted(names), ceilings


def _crash_run(seed: int, make_disk, crash) -> None:
    rng = random.Random(seed)
    ops = _operations(rng, 40)
    countdown = [rng.randrange(1, 120)]  # the countdown-th fsync or rewrite is where the power fails

    def cut(kind: str, nbytes: int) -> None:
        if kind != "pwrite":
            countdown[0] -= 1
            if countdown[0] == 0:
                raise _Cut()

    disk = _HookedDisk(make_disk(), cut)
    done = 0
    try:
        record = GroupRecord.open(disk, node_existed=False)
        for op in ops:
            _apply(record, op)
            done += 1
    except _Cut:
        pass
    inner = crash(disk.inner, rng)
    if not inner.exists(GROUP_RECORD_FILE):  # the cut struck the fresh node's first write
        assert done == 0, seed
        return
    reopened = GroupRecord.open(inner, node_existed=True)
    assert not reopened.lost, f"seed {seed}: a crash made the record look damaged"
    assert _state(reopened) in (_model(ops[:done]), _model(ops[: done + 1])), f"seed {seed} after {done} changes"


def test_a_crash_at_any_fsync_keeps_every_change_that_returned_on_a_simulated_disk(monkeypatch):
    monkeypatch.setattr(group_record, "COMPACT_BYTES_MIN", 300)  # rewrites among the appends

    def crash(disk: SimDisk, rng: random.Random) -> SimDisk:
        disk.crash(torn=True)
        return disk

    for seed in range(300):
        _crash_run(seed, lambda seed=seed: SimDisk(random.Random(seed), corruption_allowed=False), crash)


@pytest.mark.parametrize("mode", ["drop", "torn", "pages"])
def test_a_crash_at_any_fsync_keeps_every_change_that_returned_on_real_files(tmp_path, monkeypatch, mode):
    monkeypatch.setattr(group_record, "COMPACT_BYTES_MIN", 300)
    for seed in range(25):
        root = str(tmp_path / f"{mode}-{seed}")

        def crash(disk: OsDisk, rng: random.Random, root=root) -> OsDisk:
            power_cut(root, mode, rng.randrange(1000))
            return OsDisk(root)

        _crash_run(seed, lambda root=root: OsDisk(root, shadow=True), crash)
        assert os.path.isdir(root)
