"""Crash tests for the WAL: power cuts on the real disk (shadow mode) and random histories on `SimDisk`.

Method: (1) a WAL on `OsDisk(root, shadow=True)` appends random batches, syncing some of them and saving
the acked watermark after each sync as a Raft driver would; then, without closing, `power_cut` rolls the
directory back in each mode (`drop`, `torn`, `pages`) for several seeds. Every entry synced before the cut
must come back unchanged and not faulty; in `drop` and `torn` modes, which only lose or tear unsynced
tails, the log must also come back clean (no repairing). (2) Hypothesis generates sequences of append,
sync, truncate_from, snapshot+compact and crash (clean or torn) on `SimDisk`, checked against a model:
after each crash the recovered log is a prefix of what was written that contains everything synced and
vouched for by a saved hard state (the driver saves the acked watermark with every sync; an entry that
compaction's own sync made durable above it is never acknowledged, and WAL rule R7 may cut it when the
compaction took the record that anchored the newest hard state — `wal/vouch.py`), no
entry is faulty and the replica is not repairing (no corruption was injected, so any fault reported would
be a false alarm).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wal_helpers import make_entries

from jsraft.disk import POWER_CUT_MODES, OsDisk, power_cut
from jsraft.raft.types import ConfState, Entry, HardState, SnapshotMeta
from jsraft.testing.simdisk import SimDisk
from jsraft.wal import Wal

CONF = ConfState(voters=("n1",))


def _run_until_cut(wal: Wal, rng: random.Random) -> tuple[list[Entry], list[Entry]]:
    """Random batches, some synced; returns (everything written, the synced prefix)."""
    written: list[Entry] = []
    synced: list[Entry] = []
    for round_number in range(40):
        term = 1 + round_number // 10
        lo = len(written) + 1
        batch = make_entries(lo, lo + rng.randint(1, 8), term=term, size=rng.randint(1, 700))
        wal.append(batch)
        written += batch
        if rng.random() < 0.5:
            synced = list(written)
            # The runtime's order: the hard state after the entries, then the one fsync covering both.
            wal.save_hard_state(HardState(current_term=term, voted_for="n1", acked_watermark=len(synced)))
            wal.sync()
    return written, synced


@pytest.mark.parametrize("mode", POWER_CUT_MODES)
@pytest.mark.parametrize("seed", range(5))
def test_power_cut_keeps_every_synced_entry(tmp_path: Path, mode: str, seed: int) -> None:
    root = str(tmp_path / "node")
    wal, _ = Wal.open(OsDisk(root, shadow=True).sub("meta"), segment_bytes=32768)
    written, synced = _run_until_cut(wal, random.Random(seed))
    wal.close()  # closing syncs nothing: unsynced bytes are still only in the page cache
    power_cut(root, mode, seed)
    _, recovered = Wal.open(OsDisk(root).sub("meta"), segment_bytes=32768)
    good = {entry.index: entry for entry in recovered.entries}
    for entry in synced:
        assert good.get(entry.index) == entry, (entry.index, recovered.reasons)
    assert not recovered.faulty & {entry.index for entry in synced}
    assert recovered.entries == written[: len(recovered.entries)] or mode == "pages"
    if mode != "pages":
        assert not recovered.repairing and not recovered.faulty, recovered.reasons


# --- Random histories on SimDisk ------------------------------------------------------------------

_APPEND = st.tuples(st.just("append"), st.integers(1, 6), st.integers(0, 120), st.booleans())
# Appends are listed three times so that histories are long enough to roll segments between the rarer ops.
OPS = st.lists(
    st.one_of(
        _APPEND,
        _APPEND,
        _APPEND,
        st.tuples(st.just("sync")),
        st.tuples(st.just("truncate"), st.floats(0, 1)),
        st.tuples(st.just("snapshot"), st.floats(0, 1)),
        st.tuples(st.just("crash"), st.booleans()),
    ),
    min_size=20,
    max_size=80,
)


class Model:
    """What the log must hold: `written` (indexes 1..), the synced prefix length a saved hard state's acked
    watermark vouches for, the snapshot index."""

    def __init__(self) -> None:
        self.written: list[Entry] = []
        self.synced = 0
        self.snap = 0
        self.term = 1


def _apply(op: tuple[Any, ...], wal: Wal, model: Model) -> None:
    kind = op[0]
    if kind == "append":
        model.term += int(op[3])
        lo = len(model.written) + 1
        batch = make_entries(lo, lo + op[1], term=model.term, size=op[2])
        wal.append(batch)
        model.written += batch
    elif kind == "sync":
        model.synced = len(model.written)
        wal.save_hard_state(HardState(current_term=model.term, acked_watermark=model.synced))
        wal.sync()
    elif kind == "truncate" and len(model.written) > model.snap:
        index = model.snap + 1 + int(op[1] * (len(model.written) - model.snap - 1))
        wal.truncate_from(index)  # syncs first, then cuts durably
        model.written = model.written[: index - 1]
        model.synced = min(model.synced, index - 1)  # the watermark goes down with the cut, never up
    elif kind == "snapshot" and model.synced > model.snap:
        index = model.snap + 1 + int(op[1] * (model.synced - model.snap - 1))
        wal.save_snapshot(SnapshotMeta(index=index, term=model.written[index - 1].term, conf=CONF), b"s")
        wal.compact(index)  # syncs first, but saves no hard state: what it syncs above the watermark is not vouched
        model.snap = index


def _crash_and_check(disk: SimDisk, torn: bool, model: Model) -> Wal:
    disk.crash(torn=torn)
    wal, recovered = Wal.open(disk.sub("g"), segment_bytes=300)
    assert not recovered.faulty and not recovered.repairing, recovered.reasons
    live = model.written[model.snap :]
    assert recovered.entries == live[: len(recovered.entries)], "recovered log is not a prefix of the written"
    assert model.snap + len(recovered.entries) >= model.synced, "a synced entry was lost"
    assert (recovered.snapshot[0].index if recovered.snapshot else 0) == model.snap
    model.written = model.written[: model.snap] + recovered.entries
    # `synced` stays the saved watermark: what recovery kept above it is durable but vouched for by no hard
    # state, and a later reopen may cut it (R7); the Raft core raises the watermark before acknowledging it.
    return wal


@settings(max_examples=300, derandomize=True, deadline=None, database=None)
@given(ops=OPS, seed=st.integers(0, 2**32 - 1))
def test_random_histories_never_lose_a_synced_entry(ops: list[tuple[object, ...]], seed: int) -> None:
    disk = SimDisk(random.Random(seed), corruption_allowed=False)
    wal, _ = Wal.open(disk.sub("g"), segment_bytes=300)
    model = Model()
    for op in ops + [("crash", True)]:
        if op[0] == "crash":
            wal = _crash_and_check(disk, op[1], model)
        else:
            _apply(op, wal, model)
