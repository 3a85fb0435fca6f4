"""FileStore after a power cut: every message synced before the cut survives intact.

Method: run the store on `OsDisk(shadow=True)`, which records what each fsync made durable. Append
batches, sync some of them, append more without syncing, drop the store without closing (a crash),
then `power_cut(root, mode, seed)` rolls the directory back to what a machine losing power would show:
`drop` (nothing unsynced), `torn` (a random prefix of each unsynced change), `pages` (each unsynced 4 KiB
page kept or lost independently). Reopen and check: every synced message is present and byte-identical;
every later sequence is either intact, reported as a fault, or absent — never served with wrong bytes.
Repeated over many seeds, and twice in a row (a cut during recovery's own writes).
"""

from __future__ import annotations

import random

import pytest

from jsraft.disk import OsDisk, power_cut
from jsraft.errors import DamagedSequence, NoMessageFound
from jsraft.store import StoreConfig
from jsraft.store.filestore import FileStore

CONFIG = StoreConfig(block_size=64 * 1024)


def _payload(seq: int, rng_seed: int) -> bytes:
    return random.Random(seq * 7919 + rng_seed).randbytes(40 + seq % 300)


def _run_until_cut(root: str, seed: int, compression: str = "none") -> int:
    """Write with random syncs; return the last sequence made durable by a completed sync."""
    rng = random.Random(seed)
    config = StoreConfig(block_size=64 * 1024, compression=compression)
    store = FileStore.open(OsDisk(root, shadow=True), config)
    seq = synced = 0
    for _ in range(rng.randint(5, 40)):
        batch = []
        for _ in range(rng.randint(1, 60)):
            seq += 1
            batch.append((seq, f"s.{seq % 4}", b"", _payload(seq, seed), 10 + seq))
        store.append_batch(batch)
        if rng.random() < 0.2:
            store.delete(rng.randint(1, seq))
        if rng.random() < 0.5:
            store.sync()
            synced = store.last_seq
    store.files.abandon()  # crash: no close, no index
    return synced


def _check(root: str, synced: int, seed: int) -> FileStore:
    store = FileStore.open(OsDisk(root, shadow=True), CONFIG)
    faulted = {s for f in store.faults() for s in range(f.first, f.last + 1)}
    assert not any(s <= synced for s in faulted), f"synced sequences reported damaged: {sorted(faulted)[:5]}"
    state = store.state()
    assert state.last_seq >= synced
    for seq in range(1, state.last_seq + 1):
        try:
            msg = store.load(seq)
        except NoMessageFound:
            continue  # deleted before the cut (deletes may be synced or not)
        except DamagedSequence:
            assert seq > synced
            continue
        assert msg.payload == _payload(seq, seed), f"seq {seq} served with wrong bytes"
    return store


def _loads(store: FileStore, seq: int) -> bool:
    try:
        store.load(seq)
    except NoMessageFound:
        return False
    return True


@pytest.mark.parametrize("mode", ["drop", "torn", "pages"])
@pytest.mark.parametrize("seed", range(8))
def test_synced_messages_survive_a_power_cut(tmp_path, mode, seed):
    root = str(tmp_path / f"store-{mode}-{seed}")
    synced = _run_until_cut(root, seed, compression="zstd" if seed % 2 else "none")
    power_cut(root, mode, seed)
    store = _check(root, synced, seed)
    # The run deletes at most one message per batch, so most synced messages must be readable.
    present = sum(1 for seq in range(1, synced + 1) if _loads(store, seq))
    assert synced == 0 or present >= synced * 0.5


@pytest.mark.parametrize("mode", ["drop", "torn", "pages"])
def test_second_cut_during_reopen_and_continued_writes(tmp_path, mode):
    root = str(tmp_path / "store")
    synced = _run_until_cut(root, 11)
    power_cut(root, mode, 11)
    store = _check(root, synced, 11)
    # Keep writing after recovery, sync, write more, crash again.
    if store.faults():
        store.truncate(synced)
    next_seq = store.state().last_seq + 1
    store.append_batch([(next_seq + i, "s.x", b"", _payload(next_seq + i, 11), 1) for i in range(50)])
    store.sync()
    synced_again = store.last_seq
    store.append_batch([(synced_again + 1, "s.x", b"", _payload(synced_again + 1, 11), 1)])
    store.files.abandon()
    power_cut(root, mode, 12)
    _check(root, synced_again, 11)


def test_truncate_back_to_synced_point_after_pages_cut_gives_a_clean_store(tmp_path):
    """What a replica does when its log says the store ran ahead: cut back, then it is clean."""
    root = str(tmp_path / "store")
    synced = _run_until_cut(root, 5)
    power_cut(root, "pages", 5)
    store = FileStore.open(OsDisk(root, shadow=True), CONFIG)
    store.truncate(synced)
    assert store.faults() == []
    assert store.state().last_seq == synced
    store.close()
    reopened = FileStore.open(OsDisk(root), CONFIG, use_index=False)
    assert reopened.faults() == [] and reopened.state().last_seq == synced


def test_open_keeps_the_content_and_update_config_applies_the_limits(tmp_path):
    """Opening applies no limits: which limits were in force when the content was written is the log's
    knowledge (a crash can keep messages and lose the tombstones that evicted older ones; the stream's
    replay applies them again at the right entry). `update_config` applies them, durably."""
    root = str(tmp_path / "store")
    store = FileStore.open(OsDisk(root), CONFIG)
    store.append_batch([(seq, "a", b"", b"x", seq) for seq in range(1, 5)] + [(5, "b", b"", b"y", 5)])
    store.close()
    tight = StoreConfig(block_size=64 * 1024, max_msgs_per_subject=2)
    reopened = FileStore.open(OsDisk(root), tight)
    assert reopened.subject_counts() == {"a": 4, "b": 1}
    reopened.update_config(tight)
    assert reopened.subject_counts() == {"a": 2, "b": 1}
    assert [m.seq for m in (reopened.load(3), reopened.load(4), reopened.load(5))] == [3, 4, 5]
    reopened.close()
    again = FileStore.open(OsDisk(root), tight, use_index=False)
    assert again.subject_counts() == {"a": 2, "b": 1} and again.state().first_seq == 3


@pytest.mark.parametrize("mode", ["drop", "torn", "pages"])
def test_a_power_cut_after_an_erase_keeps_what_came_before_it(tmp_path, mode):
    """Regression (stream seed 291): `erase` overwrites an older block in place and synced only that
    block, so a cut could keep the erase but lose an earlier, unsynced limit tombstone in the newest block:
    the message the limit had removed came back next to the erased one's absence — a state the store
    never passed through, which the WAL replay then settled differently from the group."""
    root = str(tmp_path / "store")
    limited = StoreConfig(block_size=64 * 1024, max_msgs_per_subject=2)
    store = FileStore.open(OsDisk(root, shadow=True), limited)
    store.append_batch([(1, "a", b"", b"one", 1), (2, "a", b"", b"two", 2), (3, "b", b"", b"three", 3)])
    store.roll()  # seal block 1 (synced): 1 and 2 now live in an older block
    store.append_batch([(4, "a", b"", b"four", 4)])  # the limit removes 1: a tombstone, not yet synced
    assert store.erase(2)  # in place, in block 1
    store.files.abandon()
    power_cut(root, mode, 291)
    reopened = FileStore.open(OsDisk(root, shadow=True), limited)
    # The erase returned, so it and everything before it are durable: only 3 and 4 are left.
    assert [seq for seq in range(1, 5) if _loads(reopened, seq)] == [3, 4]
    assert reopened.subject_counts() == {"a": 1, "b": 1}


def test_erasing_the_last_message_of_an_older_block_removes_the_block_and_returns(tmp_path):
    """Regression (simulator `--app stream` seed 249, once it drove production's StreamAdapter): the
    delete inside `erase` emptied an older block, which removed its file, and the overwrite then opened
    that file again: FileNotFoundError out of a DELETE entry's apply, which stops the group. The record
    went with its file; the erase is done, and durable once it returned."""
    root = str(tmp_path / "store")
    store = FileStore.open(OsDisk(root), CONFIG)
    store.append_batch([(1, "a", b"", b"one", 1)])
    store.roll()  # block 1 holds only seq 1
    store.append_batch([(2, "b", b"", b"two", 2)])
    assert store.erase(1)
    assert [seq for seq in range(1, 3) if _loads(store, seq)] == [2]
    store.close()
    reopened = FileStore.open(OsDisk(root), CONFIG)
    assert [seq for seq in range(1, 3) if _loads(reopened, seq)] == [2]
