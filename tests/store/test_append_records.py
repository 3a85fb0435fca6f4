"""The bytes a FileStore append writes: each MSG record is exactly `codec.records.encode_message`'s.

Method: a FileStore on real files (`OsDisk`) takes one batch of messages whose payloads straddle the size
from which `fs_append` leaves a payload out of its record until the run's single join (and CRCs the pieces),
with and without headers and subjects of several lengths. Each record is read back from the block file at
the offset the block's arrays give and compared byte for byte with the canonical encoding, CRC included;
the CRCs the block keeps and a reopen's full scan must agree with it.
"""

from __future__ import annotations

import os

from jsraft.codec.records import encode_message
from jsraft.disk.os_disk import OsDisk
from jsraft.store import fs_append
from jsraft.store.base import StoreConfig
from jsraft.store.blocks import block_name
from jsraft.store.filestore import FileStore

HEADERS = b"NATS/1.0\r\nNats-Msg-Id: 7\r\n\r\n"
EDGE = fs_append._PIECEWISE_PAYLOAD_BYTES


def _messages() -> list[tuple[int, str, bytes, bytes, int]]:
    sizes = [0, 1, 128, EDGE - 1, EDGE, EDGE + 1, 16384, 100_000]
    msgs = []
    for size in sizes:
        for subject, headers in (("a", b""), ("orders.eu.new", HEADERS)):
            seq = len(msgs) + 1
            msgs.append((seq, subject, headers, bytes([seq % 251]) * size, 1_000_000 + seq))
    return msgs


def test_every_record_is_the_canonical_encoding(tmp_path):
    msgs = _messages()
    store = FileStore.open(OsDisk(str(tmp_path)), StoreConfig(name="S"))
    store.append_batch(msgs)
    block = store.blocks[0]
    assert len(block.offsets) == len(msgs)
    with open(tmp_path / block_name(block.number), "rb") as file:
        data = file.read()
    for index, (seq, subject, headers, payload, timestamp_ns) in enumerate(msgs):
        record, crc = encode_message(seq, timestamp_ns, subject.encode(), headers, payload)
        at, length = block.offsets[index], block.lengths[index]
        assert (length, block.crcs[index]) == (len(record), crc), f"seq {seq}"
        assert data[at:at + length] == record, f"seq {seq}: {len(payload)} B payload"
    state = store.state()
    store.close()
    reopened = FileStore.open(OsDisk(str(tmp_path)), StoreConfig(name="S"), use_index=False)  # a full scan
    assert reopened.state() == state and not reopened.fault_map
    assert reopened.load(len(msgs)).payload == msgs[-1][3]
    reopened.close()


def test_a_large_run_is_written_from_its_pieces_even_when_the_write_comes_up_short(tmp_path, monkeypatch):
    """A run of `_GATHER_BYTES_MIN` or more goes to the block file as its pieces (`OsFile.append_parts`:
    one vectored write, payloads given as views of a larger buffer are not joined first); a short write
    is finished. The bytes are the canonical records, as above."""
    real, calls = os.pwritev, []

    def short(fd: int, parts, offset: int) -> int:  # the kernel may write less than asked
        calls.append(len(parts))
        data = b"".join(parts)
        return real(fd, [data[: len(data) // 2]], offset)
    monkeypatch.setattr(os, "pwritev", short)
    buffer = b"".join(bytes([i]) * 20_000 for i in range(1, 9))
    msgs = [(i + 1, "big", b"", memoryview(buffer)[i * 20_000:(i + 1) * 20_000], 7 + i) for i in range(8)]
    store = FileStore.open(OsDisk(str(tmp_path)), StoreConfig(name="S"))
    store.append_batch(msgs)
    assert calls and calls[0] > len(msgs)  # the run's pieces, not one joined buffer
    block = store.blocks[0]
    with open(tmp_path / block_name(block.number), "rb") as file:
        data = file.read()
    for index, (seq, subject, headers, payload, timestamp_ns) in enumerate(msgs):
        record, _ = encode_message(seq, timestamp_ns, subject.encode(), headers, bytes(payload))
        at = block.offsets[index]
        assert data[at:at + len(record)] == record, f"seq {seq}"
    assert len(data) == block.size
    store.close()
    reopened = FileStore.open(OsDisk(str(tmp_path)), StoreConfig(name="S"), use_index=False)
    assert [reopened.load(seq).payload for seq in (1, 8)] == [bytes(msgs[0][3]), bytes(msgs[7][3])]
    assert not reopened.fault_map
    reopened.close()
