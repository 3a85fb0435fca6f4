"""FileStore's fast open: the index is trusted only when it checks, and what it vouches for is verified later.

Method: real files (`OsDisk` under tmp_path), 64 KiB blocks so a few thousand messages span many block
files. Each case writes a store, leaves its files the way a crash or a disk leaves them (an index older
than the blocks, one newer than them, one whose CRC fails, one whose totals contradict each other, a
flipped byte in a block the index covers), reopens it, and compares the state tuple (first, last, count,
bytes, digest) with what a full verifying scan (`use_index=False`) of the same files finds, and what the
report and the log say; and a close that cannot write its index for want of descriptors or space, which
still closes (any other error still fails it). The background verifier runs for real: `read_region` reads the block file,
`settle` checks it, and the async loop runs under trio with a worker thread.
"""

from __future__ import annotations

import errno
import logging
import os

import pytest
import trio

from jsraft.disk import OsDisk
from jsraft.errors import DamagedSequence
from jsraft.store import FaultKind, StoreConfig
from jsraft.store import fs_index, fs_verify
from jsraft.store.blocks import block_name
from jsraft.store.filestore import FileStore
from jsraft.store.memstore import MemStore

BLOCK_BYTES = 64 * 1024
COUNT = 3000


def _msg(seq: int) -> tuple[int, str, bytes, bytes, int]:
    return (seq, f"orders.{seq % 5}", b"", (f"payload-{seq}-".encode() * 12)[:150], 1_000 + seq)


def _append(store: FileStore, first: int, last: int) -> None:
    for start in range(first, last + 1, 50):
        store.append_batch([_msg(seq) for seq in range(start, min(start + 50, last + 1))])


def _written(root: str, count: int = COUNT) -> tuple[FileStore, StoreConfig]:
    config = StoreConfig(block_size=BLOCK_BYTES)
    store = FileStore.open(OsDisk(root), config)
    _append(store, 1, count)
    store.delete(17)
    store.delete(1234)
    return store, config


def _full_scan(root: str, config: StoreConfig):
    store = FileStore.open(OsDisk(root, read_only=True), config, read_only=True, use_index=False)
    try:
        return store.state(), store.faults()
    finally:
        store.close()


def _verify_all(store: FileStore) -> int:
    damaged = 0
    while (region := fs_verify.next_region(store)) is not None:
        number, limit = region
        damaged += fs_verify.settle(store, number, limit, fs_verify.read_region(store.disk, number, limit))
    return damaged


def test_clean_close_opens_from_the_index_and_verifies_every_block_later(tmp_path):
    root = str(tmp_path / "s")
    store, config = _written(root)
    state = store.state()
    store.close()
    reopened = FileStore.open(OsDisk(root), config)
    assert reopened.recovery_report["index"] == "used"
    assert sorted(reopened.unverified) == [block.number for block in reopened.blocks]
    assert reopened.state() == state == _full_scan(root, config)[0]
    assert _verify_all(reopened) == 0
    assert reopened.unverified == {} and reopened.faults() == [] and reopened.state() == state
    reopened.close()


def test_index_older_than_the_blocks_scans_the_tail_after_its_coverage(tmp_path, monkeypatch):
    """A crash after block writes and before the next index write: the index covers blocks 1..k and the
    newest block as it was; the bytes after that (new records in it, whole new blocks, a tombstone for an
    indexed message) are scanned on top, and only what the index vouched for waits for verification."""
    root = str(tmp_path / "s")
    store, config = _written(root)
    store.close()
    store = FileStore.open(OsDisk(root), config)
    indexed_blocks = {block.number: block.size for block in store.blocks}
    with monkeypatch.context() as patch:  # the crash comes after these block writes, before an index write
        patch.setattr(fs_index, "write_index", lambda store: None)
        _append(store, COUNT + 1, COUNT + 1500)  # several new blocks
        store.delete(5)
        store.sync()
    state = store.state()
    assert len(store.blocks) > len(indexed_blocks) + 1
    store.files.abandon()  # crash: nothing closed, the index on disk is the old one

    reopened = FileStore.open(OsDisk(root), config)
    assert reopened.recovery_report["index"] == "used"
    assert reopened.unverified == indexed_blocks
    assert reopened.state() == state == _full_scan(root, config)[0]
    with pytest.raises(Exception):
        reopened.load(5)
    assert _verify_all(reopened) == 0
    assert reopened.state() == state
    reopened.close()


def test_a_crash_opens_from_the_index_the_last_roll_wrote(tmp_path):
    """No close: the rolls kept the index within about its own size of the newest block."""
    root = str(tmp_path / "s")
    store, config = _written(root, count=20_000)
    store.sync()
    state = store.state()
    numbers = [block.number for block in store.blocks]
    store.files.abandon()
    reopened = FileStore.open(OsDisk(root), config)
    assert reopened.recovery_report["index"] == "used"
    assert len(numbers) - len(reopened.unverified) <= 6  # the tail scanned: a few blocks, not 50
    assert reopened.state() == state == _full_scan(root, config)[0]
    assert _verify_all(reopened) == 0 and reopened.state() == state
    reopened.close()


def _damage_index(root: str, how: str) -> None:
    path = os.path.join(root, "index")
    size = os.path.getsize(path)
    with open(path, "r+b") as handle:
        if how == "crc":
            handle.seek(size // 2)
            byte = handle.read(1)[0]
            handle.seek(size // 2)
            handle.write(bytes([byte ^ 0x01]))


@pytest.mark.parametrize("case", ["crc-bad index", "newer than a block", "block lost", "block grown"])
def test_an_index_that_does_not_check_falls_back_to_the_full_scan_and_says_so(tmp_path, caplog, case):
    root = str(tmp_path / "s")
    store, config = _written(root)
    numbers = [block.number for block in store.blocks]
    store.close()
    middle = os.path.join(root, block_name(numbers[len(numbers) // 2]))
    if case == "crc-bad index":
        _damage_index(root, "crc")
    elif case == "newer than a block":  # the block lost its last write after the index was written
        with open(middle, "r+b") as handle:
            handle.truncate(os.path.getsize(middle) - 40)
    elif case == "block lost":
        os.remove(middle)
    else:  # a sealed block longer than the index says
        with open(middle, "ab") as handle:
            handle.write(b"\0" * 32)
    expected = _full_scan(root, config)
    with caplog.at_level(logging.WARNING, logger="jsraft.store.index"):
        reopened = FileStore.open(OsDisk(root), config)
    assert reopened.recovery_report["index"] != "used"
    assert "rebuilt by a full scan" in reopened.recovery_report["index"]
    assert any("index not used" in record.getMessage() for record in caplog.records)
    assert reopened.unverified == {}  # everything was read at open
    assert (reopened.state(), reopened.faults()) == expected
    reopened.close()


@pytest.mark.parametrize("lie", ["msgs", "digest", "block msgs"])
def test_an_index_whose_totals_contradict_its_parts_is_not_trusted(tmp_path, caplog, lie):
    """A well-formed, CRC-valid index whose totals are not the sums of its parts (a bug that wrote it)."""
    root = str(tmp_path / "s")
    store, config = _written(root)
    state = store.state()
    store.sync()
    if lie == "msgs":
        store.msgs += 1
    elif lie == "digest":
        store.digest ^= 1
    else:
        store.blocks[0].msgs -= 1
    fs_index.write_index(store)
    store.files.abandon()
    with caplog.at_level(logging.WARNING, logger="jsraft.store.index"):
        reopened = FileStore.open(OsDisk(root), config)
    assert reopened.recovery_report["index"] == "inconsistent: rebuilt by a full scan"
    assert any("inconsistent" in record.getMessage() for record in caplog.records)
    assert reopened.state() == state and reopened.faults() == []
    reopened.close()


def _flip_payload_byte(root: str, store: FileStore, seq: int) -> int:
    block, offset, length, _ = store.locate(seq)
    path = os.path.join(root, block_name(block.number))
    with open(path, "r+b") as handle:
        handle.seek(offset + length - 7)
        byte = handle.read(1)[0]
        handle.seek(offset + length - 7)
        handle.write(bytes([byte ^ 0x20]))
    return block.number


def test_a_flipped_byte_the_fast_open_did_not_read_is_found_by_the_background_verifier(tmp_path):
    root = str(tmp_path / "s")
    store, config = _written(root)
    target = 1500
    state = store.state()
    store.close()
    probe = FileStore.open(OsDisk(root, read_only=True), config, read_only=True)
    number = _flip_payload_byte(root, probe, target)
    probe.close()

    reopened = FileStore.open(OsDisk(root), config)
    assert reopened.recovery_report["index"] == "used" and number in reopened.unverified
    assert reopened.faults() == []  # the open did not read it
    assert reopened.state() == state
    # A replay's comparison reads the bytes and trusts nothing: it stops at the damaged record.
    assert reopened.held_run(target - 2, [_msg(seq)[1:] for seq in range(target - 2, target + 3)]) == 2

    async def verify() -> list[int]:
        woken: list[int] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(fs_verify.verify_in_background, lambda: reopened, trio.to_thread.run_sync,
                               trio.sleep, lambda: woken.append(1), 0.01)
            with trio.fail_after(30):
                while reopened.unverified:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        return woken

    assert len(trio.run(verify)) == 1
    # The fault a startup scan records for the same damage, and the same accounting: the state leaves the
    # peers' (count and digest drop the record), which is what sends the replica to repair.
    assert [(f.first, f.last, f.kind) for f in reopened.faults()] == [(target, target, FaultKind.corrupt)]
    assert _full_scan(root, config)[1] == reopened.faults()
    after = reopened.state()
    assert after.msgs == state.msgs - 1 and after.digest != state.digest
    with pytest.raises(DamagedSequence):
        reopened.load(target)
    seq, subject, headers, payload, timestamp_ns = _msg(target)
    reopened.repair(seq, subject, headers, payload, timestamp_ns)
    assert reopened.faults() == [] and reopened.state() == state
    reopened.close()


def test_a_closed_store_stops_being_verified(tmp_path):
    root = str(tmp_path / "s")
    store, config = _written(root)
    store.close()
    reopened = FileStore.open(OsDisk(root), config)
    assert reopened.unverified
    reopened.close()
    assert fs_verify.next_region(reopened) is None


@pytest.mark.parametrize("kind", ["file", "mem"])
def test_held_run_stops_at_the_first_message_not_held_exactly(tmp_path, kind):
    store = FileStore.open(OsDisk(str(tmp_path / "s")), StoreConfig(block_size=BLOCK_BYTES)) if kind == "file" \
        else MemStore(StoreConfig())
    _append(store, 1, 1200)  # several blocks: a run crosses block boundaries
    store.delete(700)
    msgs = [_msg(seq)[1:] for seq in range(1, 1201)]
    assert store.held_run(1, msgs) == 699  # seq 700 was deleted
    assert store.held_run(1, msgs, 700) == 1200
    changed = list(msgs)
    subject, headers, payload, timestamp_ns = changed[1000]
    for index, other in ((1000, (subject, headers, payload + b"x", timestamp_ns)),
                         (1000, (subject, headers, payload, timestamp_ns + 1)),
                         (1000, ("orders.other", headers, payload, timestamp_ns))):
        changed[index] = other
        assert store.held_run(1, changed, 900) == index
    assert store.held_run(1150, msgs[1149:] + [_msg(1201)[1:]]) == 51  # past the store's last sequence
    store.close()


def test_a_store_of_large_messages_rewrites_its_index_every_few_rolls_and_a_crash_still_opens_from_it(tmp_path,
                                                                                                    monkeypatch):
    """Large messages make few slots, so the index's size alone would make it due at every roll and each
    roll would rebuild it for every block (O(blocks) a roll). Its per-block work counts too
    (`fs_append._index_due`): with 60 blocks it is rewritten every few rolls, and a crash opens from the
    last one written, scanning at most about a sixteenth of the blocks past it, to the same state."""
    root = str(tmp_path / "s")
    config = StoreConfig(block_size=BLOCK_BYTES)
    store = FileStore.open(OsDisk(root), config)
    writes: list[int] = []  # the number of blocks at each index write
    original = fs_index.index_bytes

    def counted(target: FileStore) -> bytes:
        writes.append(len(target.blocks))
        return original(target)

    payload = bytes(range(256)) * 12  # ~3 KiB: 21 messages a block
    with monkeypatch.context() as patch:
        patch.setattr(fs_index, "index_bytes", counted)
        for start in range(1, 1261, 10):
            store.append_batch([(seq, "big", b"", payload, seq) for seq in range(start, start + 10)])
    store.sync()
    state = store.state()
    blocks = len(store.blocks)
    assert blocks >= 60
    late = [count for count in writes if count > 32]
    assert late and len(late) <= (blocks - 32) // 2  # every roll would be one per block past the 32nd
    store.files.abandon()
    reopened = FileStore.open(OsDisk(root), config)
    assert reopened.recovery_report["index"] == "used"
    assert blocks - len(reopened.unverified) <= blocks // 16 + 2
    assert reopened.state() == state == _full_scan(root, config)[0]
    assert _verify_all(reopened) == 0 and reopened.state() == state
    reopened.close()


@pytest.mark.parametrize("code", ["EMFILE", "ENOSPC"])
def test_a_close_without_descriptors_or_space_for_its_index_still_closes(tmp_path, monkeypatch, caplog, code):
    """fs_index invariant 4: the close succeeds, the blocks are durable, the index is the older one, and the
    next open (checking that index against the tails, scanning the rest) holds every message."""
    root = str(tmp_path / "store")
    store, config = _written(root)
    before = store.state()
    disk = store.disk

    def no_room(path: str, data: bytes) -> None:
        raise OSError(getattr(errno, code), os.strerror(getattr(errno, code)), path)

    monkeypatch.setattr(disk, "write_atomic", no_room)
    with caplog.at_level(logging.WARNING, logger="jsraft.store.index"):
        store.close()
    assert "its index was not written at close" in caplog.text
    monkeypatch.undo()
    reopened = FileStore.open(OsDisk(root), config)
    try:
        assert reopened.state() == before and not reopened.faults()
        assert reopened.state() == _full_scan(root, config)[0]
    finally:
        reopened.close()


def test_any_other_error_writing_the_index_at_close_is_not_swallowed(tmp_path, monkeypatch):
    store, _ = _written(str(tmp_path / "store"))

    def broken(path: str, data: bytes) -> None:
        raise OSError(errno.EIO, "I/O error", path)

    monkeypatch.setattr(store.disk, "write_atomic", broken)
    with pytest.raises(OSError) as raised:
        store.close()
    assert raised.value.errno == errno.EIO
    monkeypatch.undo()
    store.files.close()
