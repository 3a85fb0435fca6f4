"""The snapshot byte stream (`jsraft.server.api.snapshot_format`): what the restore side accepts and refuses.

Method: build snapshots with the writer, feed them to `SnapshotReader` in slices of every size from 1
byte up (chunk boundaries carry no meaning), and check the messages and end tuple come back exactly; then
damage one thing at a time — a frame's bytes, a message record inside a frame whose own CRC is made
right again, the end tuple, the order of sequences, the length — and require `BadSnapshot` (10062) each
time. The tuple is checked against a real `MemStore` holding the same messages.
"""

from __future__ import annotations

import pytest

from jsraft.server.api.snapshot_format import (
    BadSnapshot, SnapshotReader, TupleSum, encode_consumer, encode_end, encode_header, encode_msgs, message_record,
)
from jsraft.store import StoreConfig
from jsraft.store.memstore import MemStore

MSGS = [(seq, 1_700_000_000_000_000_000 + seq, f"orders.{seq % 3}", b"NATS/1.0\r\nA: b\r\n\r\n" if seq % 4 == 0 else b"",
         f"payload {seq}".encode() * (seq % 5 + 1)) for seq in (3, 4, 5, 7, 8, 11)]


def build(msgs=MSGS, last_seq: int = 12, end_override: dict | None = None) -> bytes:
    total = TupleSum()
    records = [message_record(seq, ts, subject, headers, payload, total) for seq, ts, subject, headers, payload in msgs]
    end = end_override or total.to_json(last_seq)
    return (encode_header("ORDERS", {"name": "ORDERS"}, {"messages": len(msgs)}) + encode_msgs(records[:3])
            + encode_msgs(records[3:]) + encode_consumer({"name": "C", "config": {}}) + encode_end(end))


def read(data: bytes, step: int) -> tuple[list, dict, SnapshotReader]:
    reader = SnapshotReader()
    got = []
    for start in range(0, len(data), step):
        reader.feed(data[start:start + step])
        got.extend(reader.messages())
    return got, reader.finish(), reader


@pytest.mark.parametrize("step", [1, 7, 64, 1 << 20])
def test_round_trip_in_any_slices(step):
    got, end, reader = read(build(), step)
    assert got == MSGS
    assert reader.consumers == [{"name": "C", "config": {}}]
    store = MemStore(StoreConfig())
    store.skip(1, 2)
    previous = 2
    for seq, ts, subject, headers, payload in MSGS:
        if seq > previous + 1:
            store.skip(previous + 1, seq - previous - 1)
        store.append(seq, subject, headers, payload, ts)
        previous = seq
    store.skip(12)
    state = store.state()
    assert end == {"first_seq": state.first_seq, "last_seq": state.last_seq, "messages": state.msgs,
                   "bytes": state.bytes, "digest": f"{state.digest:016x}"}


def test_a_flipped_byte_anywhere_is_refused():
    data = build()
    for offset in range(8, len(data), 13):
        damaged = bytearray(data)
        damaged[offset] ^= 0x01
        with pytest.raises(BadSnapshot) as refused:
            read(bytes(damaged), 4096)
        assert refused.value.err_code == 10062


def test_a_damaged_record_inside_a_well_framed_body_is_refused():
    total = TupleSum()
    records = [bytearray(message_record(seq, ts, subject, headers, payload, total))
               for seq, ts, subject, headers, payload in MSGS]
    records[2][-1] ^= 0x01  # the record's own CRC no longer holds; the frame's is computed over it
    data = encode_header("S", {}, {}) + encode_msgs([bytes(r) for r in records]) + encode_end(total.to_json(12))
    with pytest.raises(BadSnapshot, match="message record is damaged"):
        read(data, 4096)


def test_end_tuple_order_truncation_and_trailing_data_are_refused():
    with pytest.raises(BadSnapshot, match="do not match"):
        read(build(end_override={"first_seq": 3, "last_seq": 12, "messages": 6, "bytes": 1, "digest": "0"}), 4096)
    with pytest.raises(BadSnapshot, match="out of order"):
        read(build(msgs=[MSGS[1], MSGS[0]]), 4096)
    data = build()
    with pytest.raises(BadSnapshot, match="truncated"):
        read(data[:-5], 4096)
    with pytest.raises(BadSnapshot, match="after the end"):
        read(data + encode_consumer({"name": "late"}), 4096)
    with pytest.raises(BadSnapshot, match="bad magic"):
        read(b"NOTASNAP" + data[8:], 4096)
