"""FileStore under read errors: a read that returns a flipped bit (the file itself intact) is never taken
for the record's content, and a repair record's removal leaves the block's subject hints right.

Method: a `FileStore` on `OsDisk` in tmp_path, wrapped by `FlakyDisk`, which flips one chosen bit of the
next read(s) covering a chosen byte of a chosen file — a read error, not damage at rest: the file keeps
its bytes. Each test arms it right before the operation under test and compares the store with a
`MemStore` fed the same operations (state tuple, subject counts, what `load_next` finds), or with what
the file held. Stream seeds 324, 389, 417, 469, 481, 491 (read flips on) found these.
"""

from __future__ import annotations

import pytest

from jsraft.codec.records import HEADER_BYTES
from jsraft.disk import OsDisk
from jsraft.errors import DamagedSequence
from jsraft.store import StoreConfig
from jsraft.store.blocks import block_name
from jsraft.store.filestore import FileStore
from jsraft.store.memstore import MemStore

CONFIG = StoreConfig(name="S", block_size=64 * 1024)


class _FlakyFile:
    def __init__(self, disk: "FlakyDisk", path: str, inner) -> None:  # type: ignore[no-untyped-def]
        self._disk, self._path, self._inner = disk, path, inner

    def pread(self, offset: int, length: int) -> bytes:
        data = self._inner.pread(offset, length)
        target = self._disk.target
        if target is not None and target[0] == self._path and offset <= target[1] < offset + len(data):
            self._disk.reads_left -= 1
            if self._disk.reads_left <= 0:
                self._disk.target = None
            flipped = bytearray(data)
            flipped[target[1] - offset] ^= 0x10
            return bytes(flipped)
        return data

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._inner, name)


class FlakyDisk:
    """An `OsDisk` whose next `reads` reads covering byte `offset` of file `path` come back flipped."""

    def __init__(self, inner: OsDisk) -> None:
        self._inner = inner
        self.target: tuple[str, int] | None = None
        self.reads_left = 0

    def arm(self, path: str, offset: int, reads: int = 1) -> None:
        self.target, self.reads_left = (path, offset), reads

    def open(self, path: str, *, create: bool = False):  # type: ignore[no-untyped-def]
        return _FlakyFile(self, path, self._inner.open(path, create=create))

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._inner, name)


def _stores(tmp_path, config: StoreConfig = CONFIG) -> tuple[FileStore, MemStore, FlakyDisk]:
    disk = FlakyDisk(OsDisk(str(tmp_path / "msgs")))
    return FileStore.open(disk, config), MemStore(config), disk


def _both(stores, name: str, *args):  # type: ignore[no-untyped-def]
    return [getattr(store, name)(*args) for store in stores]


def _agree(store: FileStore, mirror: MemStore) -> None:
    assert store.state().agreement_key() == mirror.state().agreement_key()
    assert store.subject_counts() == mirror.subject_counts()


def test_a_read_error_while_a_message_is_deleted_does_not_change_the_accounting(tmp_path):
    store, mirror, disk = _stores(tmp_path)
    for seq in range(1, 6):
        _both((store, mirror), "append", seq, "s.a" if seq % 2 else "s.b", b"", b"payload-%d" % seq, seq)
    store.files.drop_cache()
    block, offset, _, _ = store.locate(3)
    disk.arm(block_name(block.number), offset + HEADER_BYTES)  # the subject length: another size, subject
    _both((store, mirror), "delete", 3)
    _agree(store, mirror)
    assert store.faults() == []  # the file was intact all along


def test_a_read_error_at_open_is_neither_cut_as_a_torn_tail_nor_reported_as_damage(tmp_path):
    store, mirror, disk = _stores(tmp_path)
    for seq in range(1, 6):
        _both((store, mirror), "append", seq, "s.a", b"", b"payload-%d" % seq, seq)
    store.close()  # synced: the newest block ends with a STORE_SYNC record
    path = str(tmp_path / "msgs")
    size = OsDisk(path).file_size(block_name(1))
    disk = FlakyDisk(OsDisk(path))
    disk.arm(block_name(1), size - 1)  # the last byte of the last record
    reopened = FileStore.open(disk, CONFIG, use_index=False)
    assert reopened.recovery_report["torn_bytes_cut"] == 0 and reopened.faults() == []
    assert OsDisk(path).file_size(block_name(1)) == size
    _agree(reopened, mirror)


def test_removing_a_repair_record_keeps_the_subject_hint_of_its_block(tmp_path):
    # Seed 469: deleting a repaired message took its subject from the block holding the repair record,
    # so a scan by subject skipped that block's own live messages and a limit removed newer ones.
    store, mirror, disk = _stores(tmp_path)
    _both((store, mirror), "append", 1, "s.a", b"", b"one", 1)
    _both((store, mirror), "append", 2, "s.b", b"", b"two", 2)
    store.roll()  # the repair record and message 3 go to block 2
    store.files.drop_cache()
    block, offset, _, _ = store.locate(1)
    disk.arm(block_name(block.number), offset + HEADER_BYTES, reads=3)  # every read of it, this once
    with pytest.raises(DamagedSequence):
        store.load(1)
    store.repair(1, "s.a", b"", b"one", 1)
    _both((store, mirror), "append", 3, "s.a", b"", b"three", 3)
    _both((store, mirror), "delete", 1)
    assert store.load_next("s.a", 1).seq == 3
    _agree(store, mirror)


def test_expiry_does_not_cross_a_damaged_message(tmp_path):
    store, _, disk = _stores(tmp_path)
    for seq in range(1, 6):
        store.append(seq, "s.a", b"", b"payload-%d" % seq, seq * 10)
    store.files.drop_cache()
    block, offset, _, _ = store.locate(3)
    disk.arm(block_name(block.number), offset + HEADER_BYTES, reads=3)
    with pytest.raises(DamagedSequence):
        store.load(3)
    assert store.expire(45) == 2  # 1 and 2; 3's timestamp is unknown, so 4 stays although older
    assert [(f.first, f.last) for f in store.faults()] == [(3, 3)] and store.state().first_seq == 4
