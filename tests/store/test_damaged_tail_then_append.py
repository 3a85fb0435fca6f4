"""A store reopened with its newest synced message damaged keeps taking appends, and its block maps stay whole.

Method: write a small store on real files, sync, close without the index, flip a bit inside the body of the
newest message (a `STORE_SYNC` after it proves it was synced: corruption at the tail, not a torn write),
reopen, then do what a replica does next: append the following sequences, repair the damaged one from a
"peer" (before or after the appends), delete, expire the head, and reopen again with and without the
index. Every message written must be served, counted and digested; every sequence the store covers must
have its slot in a block (an append used to run one sequence past its block's offsets: the simulator's
stream app crashed with an `IndexError` on seed 746). A truncation below the damaged message (a replica
whose stream is cut back) must take the damaged bytes with it: left before the next append, a full scan
read them as a damaged region that hides no sequence, i.e. the delete state of everything before unknown.
The same false "unknown" came from a repair of the damaged message before any append (session 10's walroll
note): its record follows the damage as a natural one would, so a full scan took the damage for a lost
TOMBSTONE; the `STORE_SYNC` written between them (it already reached the damaged sequence) now tells them
apart. A TOMBSTONE that really is damaged must still make the delete state before it unknown.
"""

from __future__ import annotations

import os

import pytest

from jsraft.codec.records import FILE_HEADER_BYTES, Kind, scan_records
from jsraft.disk import OsDisk
from jsraft.errors import DamagedSequence
from jsraft.store import FaultKind, StoreConfig
from jsraft.store.blocks import block_name
from jsraft.store.filestore import FileStore
from store_helpers import assert_consistent

COUNT = 40
EXTRA = 5


def _payload(seq: int) -> bytes:
    return f"payload-{seq}-".encode() * 8


def _msg(seq: int) -> tuple[int, str, bytes, bytes, int]:
    return (seq, f"orders.{seq % 3}", b"", _payload(seq), 1_000 + seq)


def _damaged_tail(root: str) -> tuple[FileStore, StoreConfig]:
    """A store of COUNT messages whose last (synced) record does not verify, reopened from a full scan."""
    config = StoreConfig(name="S")
    store = FileStore.open(OsDisk(root), config)
    store.append_batch([_msg(seq) for seq in range(1, COUNT + 1)])
    store.sync()
    block, offset, length, _ = store.locate(COUNT)
    store.close()
    os.remove(os.path.join(root, "index"))
    with open(os.path.join(root, block_name(block.number)), "r+b") as handle:
        handle.seek(offset + length - 3)
        byte = handle.read(1)[0]
        handle.seek(offset + length - 3)
        handle.write(bytes([byte ^ 0x10]))
    reopened = FileStore.open(OsDisk(root), config)
    assert [(f.first, f.last, f.kind) for f in reopened.faults()] == [(COUNT, COUNT, FaultKind.corrupt)]
    assert reopened.recovery_report["torn_bytes_cut"] == 0
    return reopened, config


def _assert_slots_whole(store: FileStore) -> None:
    """Each block has exactly one slot per sequence it covers; the newest one reaches the store's last."""
    for block in store.blocks:
        assert len(block.offsets) == max(block.last_seq - block.first_seq + 1, 0), block.number
    assert store.newest().last_seq == store.last_seq


def _assert_serves(store: FileStore, seqs, damaged: frozenset[int] = frozenset()) -> None:
    for seq in seqs:
        if seq in damaged:
            with pytest.raises(DamagedSequence):
                store.load(seq)
            continue
        msg = store.load(seq)
        assert (msg.subject, msg.payload, msg.timestamp_ns) == _msg(seq)[1:2] + _msg(seq)[3:]


def test_reopen_with_a_damaged_newest_message_covers_it_in_the_newest_block(tmp_path):
    store, _ = _damaged_tail(str(tmp_path / "s"))
    assert store.state().last_seq == COUNT
    _assert_slots_whole(store)


@pytest.mark.parametrize("repair_first", [True, False], ids=["repair-then-append", "append-then-repair"])
def test_appends_after_a_damaged_tail_are_served_repaired_and_survive_reopen(tmp_path, repair_first):
    root = str(tmp_path / "s")
    store, config = _damaged_tail(root)
    if repair_first:
        store.repair(*_msg(COUNT))
    store.append_batch([_msg(seq) for seq in range(COUNT + 1, COUNT + EXTRA + 1)])
    _assert_slots_whole(store)
    _assert_serves(store, range(1, COUNT + EXTRA + 1), frozenset() if repair_first else frozenset({COUNT}))
    if not repair_first:
        store.repair(*_msg(COUNT))
    assert store.faults() == []
    _assert_serves(store, range(1, COUNT + EXTRA + 1))
    state = assert_consistent(store)
    assert state.msgs == COUNT + EXTRA
    store.close()
    # Repaired first, the record of COUNT follows the damage where the next natural record would; the
    # STORE_SYNC between them already reached COUNT, so the full scan knows the damage hid COUNT (not a
    # TOMBSTONE) and the repair record fills it. Repaired after the appends, it fills the gap the damage left.
    for remove_index in (False, True):
        if remove_index:
            os.remove(os.path.join(root, "index"))
        again = FileStore.open(OsDisk(root), config)
        assert [(f.first, f.last, f.kind) for f in again.faults()] == [], remove_index
        _assert_slots_whole(again)
        _assert_serves(again, range(1, COUNT + EXTRA + 1))
        assert again.state() == state
        again.close()


def test_removals_across_a_damaged_tail_after_appends(tmp_path):
    """The seed-746 sequence: appends after the damaged tail, a delete, then a head expiry and a purge that
    walk every block's slots (they used to index past the offsets of the block the appends went to)."""
    root = str(tmp_path / "s")
    store, config = _damaged_tail(root)
    store.append_batch([_msg(seq) for seq in range(COUNT + 1, COUNT + EXTRA + 1)])
    assert store.delete(COUNT + 2)
    # Expiry stops at the fault (a damaged message's timestamp is unknown), whatever the cut-off.
    assert store.expire(cutoff_ns=10**18) == COUNT - 1
    assert store.state().first_seq == COUNT + 1
    assert [(f.first, f.last) for f in store.faults()] == [(COUNT, COUNT)]
    _assert_serves(store, [s for s in range(COUNT + 1, COUNT + EXTRA + 1) if s != COUNT + 2])
    store.repair(*_msg(COUNT))
    assert store.state().first_seq == COUNT
    assert store.purge(keep=2) == EXTRA - 2
    assert [m for m in range(COUNT, COUNT + EXTRA + 1) if store.locate(m)] == [COUNT + EXTRA - 1, COUNT + EXTRA]
    state = assert_consistent(store)
    _assert_slots_whole(store)
    store.close()
    again = FileStore.open(OsDisk(root), config)
    assert again.state() == state
    _assert_slots_whole(again)


def test_a_truncation_below_the_damaged_tail_cuts_the_damage_too(tmp_path):
    root = str(tmp_path / "s")
    store, config = _damaged_tail(root)
    store.truncate(COUNT - 1)
    assert store.faults() == [] and store.state().last_seq == COUNT - 1
    store.append_batch([_msg(seq) for seq in range(COUNT, COUNT + EXTRA + 1)])
    state = assert_consistent(store)
    store.close()
    for remove_index in (False, True):
        if remove_index:
            os.remove(os.path.join(root, "index"))
        again = FileStore.open(OsDisk(root), config)
        assert [(f.first, f.last, f.kind) for f in again.faults()] == [], remove_index
        _assert_slots_whole(again)
        _assert_serves(again, range(1, COUNT + EXTRA + 1))
        assert again.state() == state
        again.close()


def _reopened_both_ways(root: str, config: StoreConfig):
    """The store reopened from its index, then from a full scan of every record (no index)."""
    for use_index in (True, False):
        again = FileStore.open(OsDisk(root), config, use_index=use_index)
        yield use_index, again
        again.close()


def test_a_tail_repair_before_any_append_leaves_the_delete_state_known(tmp_path):
    root = str(tmp_path / "s")
    store, config = _damaged_tail(root)
    assert store.delete(7)
    store.repair(*_msg(COUNT))
    assert store.faults() == []
    state = assert_consistent(store)
    store.close()
    for use_index, again in _reopened_both_ways(root, config):
        assert [(f.first, f.last, f.kind) for f in again.faults()] == [], use_index
        assert again.deleted_ranges(1, COUNT) == [(7, 7)], use_index
        _assert_serves(again, [seq for seq in range(1, COUNT + 1) if seq != 7])
        _assert_slots_whole(again)
        assert again.state() == state
    # Appends after the reopen (the replica goes on) keep it that way.
    again = FileStore.open(OsDisk(root), config, use_index=False)
    again.append_batch([_msg(seq) for seq in range(COUNT + 1, COUNT + EXTRA + 1)])
    state = assert_consistent(again)
    again.close()
    for use_index, again in _reopened_both_ways(root, config):
        assert again.faults() == [] and again.state() == state, use_index
        assert again.deleted_ranges(1, COUNT + EXTRA) == [(7, 7)]


def test_a_damaged_tombstone_still_makes_the_delete_state_before_it_unknown(tmp_path):
    """The control: damage that hides no sequence before the next natural record may be a lost delete."""
    root = str(tmp_path / "s")
    config = StoreConfig(name="S")
    store = FileStore.open(OsDisk(root), config)
    store.append_batch([_msg(seq) for seq in range(1, COUNT + 1)])
    assert store.delete(7)
    store.sync()
    store.append_batch([_msg(COUNT + 1)])
    number = store.newest().number
    store.close()
    os.remove(os.path.join(root, "index"))
    path = os.path.join(root, block_name(number))
    with open(path, "rb") as handle:
        buffer = handle.read()
    tombstone = next(v for v in scan_records(buffer, FILE_HEADER_BYTES).records if v.kind == Kind.TOMBSTONE)
    with open(path, "r+b") as handle:
        handle.seek(tombstone.offset + tombstone.length - 3)
        handle.write(bytes([buffer[tombstone.offset + tombstone.length - 3] ^ 0x10]))
    again = FileStore.open(OsDisk(root), config, use_index=False)
    assert [(f.first, f.last, f.kind) for f in again.faults()] == [(1, COUNT, FaultKind.tombstone)]
    with pytest.raises(DamagedSequence):
        again.deleted_ranges(1, COUNT + 1)
    again.close()
