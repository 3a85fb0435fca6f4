"""A new WAL's first segment made ahead (`Wal.make_first_segment`, `wal.log` invariant 5): a stream's
directory is formatted whole with it, so the group's first cycle fsyncs no `wal/` directory.

Method: on `SimDisk` (which loses every unsynced write and name at a crash) and on a real `OsDisk` in
shadow mode with `power_cut`: a WAL whose first segment was made and synced (the format's tree sync,
here the WAL's own), reopened — before any append, after a crash with the first cycle unsynced (a prefix
of it may survive), and after the first cycle synced — comes back clean (not repairing, no finding but a
torn-tail cut: the first cycle, written as `replica.persist` writes it, puts its raised term in the log
before its entries, `replica.persist` invariant 5), keeps every synced entry, and appends into that same
file. The first cycle's `sync` fsyncs no directory (counted on
`OsDisk`), where a WAL without the segment made ahead fsyncs `wal/` once. Making a first segment in a WAL
that has one, or any entry, is refused.
"""

from __future__ import annotations

import random

import pytest
from wal_helpers import make_entries

from jsraft.disk import OsDisk, power_cut
from jsraft.errors import InvariantViolation
from jsraft.raft.ready import Ready
from jsraft.raft.types import HardState
from jsraft.replica import persist
from jsraft.replica.persist import Work
from jsraft.testing.simdisk import SimDisk
from jsraft.wal import Wal
from jsraft.wal.format import WAL_DIR


def _made(disk) -> Wal:
    wal, _ = Wal.open(disk)
    wal.make_first_segment()
    wal.close()
    reopened, recovered = Wal.open(disk)
    assert recovered.entries == [] and not recovered.repairing and recovered.reasons == []
    return reopened


def _first_cycle(wal: Wal, lo: int = 1) -> list:
    """A new group's first cycle up to its fsync, as `replica.persist` writes it (term raised 0 -> 2)."""
    entries = make_entries(lo, 4, term=2)
    hard_state = HardState(current_term=2, voted_for="n1", acked_watermark=3)
    ready = Ready(entries=tuple(entries), must_sync=True)
    work = Work(ready=ready, hard_state=hard_state, marker=b"{}")
    persist.write_work(wal, wal_disk(wal), work)
    persist.seal_work(wal, work)
    return entries


def wal_disk(wal: Wal):
    return wal._disk  # the marker is not written here: only step 1's and 2's writes matter


@pytest.mark.parametrize("seed", range(20))
def test_an_empty_first_segment_survives_crashes_and_takes_the_first_cycle(seed: int) -> None:
    root = SimDisk(random.Random(seed), corruption_allowed=False)
    disk = root.sub("g")
    wal = _made(disk)
    names = disk.listdir(WAL_DIR)
    assert len(names) == 1
    written = _first_cycle(wal)
    root.crash(torn=bool(seed % 2))  # the first cycle's fsync never returned: some of it may be kept
    wal, recovered = Wal.open(disk)
    kept = recovered.entries
    assert kept == written[:len(kept)] and not recovered.repairing
    assert recovered.damage_findings() == ()  # no "term raised": the term went into the log first
    entries = kept + _first_cycle(wal, len(kept) + 1)
    wal.sync()
    root.crash(torn=True)
    _, recovered = Wal.open(disk)
    assert recovered.entries == entries and not recovered.repairing and recovered.reasons == []
    assert recovered.hard_state.acked_watermark == 3 and recovered.hard_state.current_term == 2
    assert disk.listdir(WAL_DIR) == names  # the first cycle went into the segment made ahead


def _dir_syncs_of_first_cycle(root: str, made_ahead: bool, monkeypatch) -> int:
    disk = OsDisk(root, shadow=True)
    wal, _ = Wal.open(disk)
    if made_ahead:
        wal.make_first_segment()
    counted = []
    real = OsDisk.sync_dir
    monkeypatch.setattr(OsDisk, "sync_dir", lambda self, path: (counted.append(path), real(self, path)))
    entries = _first_cycle(wal)
    wal.sync()
    monkeypatch.setattr(OsDisk, "sync_dir", real)
    wal.close()
    power_cut(root, "torn", 7)
    _, recovered = Wal.open(OsDisk(root))
    assert recovered.entries == entries and not recovered.repairing and recovered.reasons == []
    return len(counted)


def test_the_first_cycle_fsyncs_no_directory_when_its_segment_was_made_ahead(tmp_path, monkeypatch) -> None:
    assert _dir_syncs_of_first_cycle(str(tmp_path / "ahead"), True, monkeypatch) == 0
    assert _dir_syncs_of_first_cycle(str(tmp_path / "plain"), False, monkeypatch) == 1


def test_a_wal_with_a_segment_or_an_entry_gets_no_first_segment_made(tmp_path) -> None:
    disk = OsDisk(str(tmp_path / "g"))
    wal, _ = Wal.open(disk)
    wal.make_first_segment()
    with pytest.raises(InvariantViolation):
        wal.make_first_segment()
    wal.append(make_entries(1, 2))
    with pytest.raises(InvariantViolation):
        wal.make_first_segment()
