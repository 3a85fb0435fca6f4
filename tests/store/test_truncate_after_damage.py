"""Truncating a store back to what was durable after a power cut leaves no damage behind (fs_ops `_cut_point`).

Method: real files on `OsDisk(shadow=True)`. A store of ~3 KiB messages in 64 KiB blocks syncs a prefix
(`durable`, at and around block boundaries), appends 14 more without a sync (within a block: a roll would sync them), and the machine loses power
in `pages` mode (`power_cut`: unsynced pages kept, lost or torn at random, per seed), which leaves damaged
records among the unsynced ones. Reopened by a full scan, the store is cut back as a replica does
(`truncate` to `durable`, or to a sequence inside the damaged range), takes 30 appends and is closed. The
next open, by full scan and from the index, must report faults only for sequences the cut kept damaged
(never a `tombstone` fault over the durable prefix: damaged bytes left between the last kept record and the
next append read as damage that hid no sequence), serve every durable and every new message with its
bytes, and end at the last append. Before the fix 16 of 20 seeds left a false `tombstone` fault, and a cut
at a block boundary whose next block began with damage left a block ending above the store, which made the
next append raise `InvariantViolation`.
"""

from __future__ import annotations

import random

import pytest

from jsraft.disk import OsDisk, power_cut
from jsraft.errors import DamagedSequence, NoMessageFound
from jsraft.store import StoreConfig
from jsraft.store.filestore import FileStore

CONFIG = StoreConfig(block_size=64 * 1024)  # 21 messages a block


def _payload(seq: int) -> bytes:
    return bytes([seq % 251]) * 3000 + seq.to_bytes(4, "big")


def _append(store: FileStore, first: int, last: int) -> None:
    store.append_batch([(seq, f"s.{seq % 3}", b"", _payload(seq), 10 * seq) for seq in range(first, last + 1)])


def _damaged_store(root: str, durable: int, seed: int) -> FileStore | None:
    store = FileStore.open(OsDisk(root, shadow=True), CONFIG)
    _append(store, 1, durable)
    store.sync()
    _append(store, durable + 1, durable + 14)
    power_cut(root, "pages", seed)  # the store is dropped unclosed: the machine died
    store = FileStore.open(OsDisk(root, shadow=True), CONFIG, use_index=False)
    if not store.faults():
        store.close()
        return None
    return store


def _check_reopened(root: str, durable: int, cut: int) -> None:
    for use_index in (False, True):
        store = FileStore.open(OsDisk(root), CONFIG, use_index=use_index)
        faulted = {seq for fault in store.faults() for seq in range(fault.first, fault.last + 1)}
        assert all(durable < seq <= cut for seq in faulted), (use_index, store.faults())
        assert store.state().last_seq == cut + 30
        for seq in range(1, cut + 31):
            try:
                assert store.load(seq).payload == _payload(seq), f"seq {seq} served with wrong bytes"
            except (DamagedSequence, NoMessageFound):
                assert durable < seq <= cut and seq in faulted, f"seq {seq} unreadable and not listed"
        store.close()


@pytest.mark.parametrize("durable", [21, 42, 43, 46])
def test_truncate_to_the_durable_prefix_cuts_the_damage_after_it(tmp_path, durable):
    damaged = 0
    for seed in range(8):
        root = str(tmp_path / f"s{seed}")
        store = _damaged_store(root, durable, seed)
        if store is None:
            continue
        damaged += 1
        store.truncate(durable)
        assert store.faults() == []
        _append(store, durable + 1, durable + 30)
        store.close()
        _check_reopened(root, durable, durable)
    assert damaged >= 4  # the power cuts did leave damage to cut


@pytest.mark.parametrize("durable", [21, 43])
def test_truncate_inside_the_damaged_range_keeps_only_its_own_faults(tmp_path, durable):
    rng = random.Random(durable)
    damaged = 0
    for seed in range(8):
        root = str(tmp_path / f"s{seed}")
        store = _damaged_store(root, durable, seed)
        if store is None:
            continue
        damaged += 1
        cut = rng.randint(durable + 1, store.state().last_seq)
        store.truncate(cut)
        _append(store, cut + 1, cut + 30)
        store.close()
        _check_reopened(root, durable, cut)
    assert damaged >= 4
