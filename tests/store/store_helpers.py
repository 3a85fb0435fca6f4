"""Helpers for the store suite: appending tersely and recomputing what a store should report.

Method: everything here is computed from what the store serves (`load_next` over every live message)
and from the codec, never from a store's internals, so a check built on it holds for every store.
"""

from __future__ import annotations

from collections.abc import Iterator

from jsraft.codec.records import encode_message, message_digest
from jsraft.errors import NoMessageFound
from jsraft.store.base import DIGEST_RANGE_SEQS, StoredMsg, StoreState, StreamStore, msg_size

U64_MASK = (1 << 64) - 1
HEADERS = b"NATS/1.0\r\nA: b\r\n\r\n"  # 18 bytes


def size_of(subject: str, payload: bytes = b"", headers: bytes = b"") -> int:
    return msg_size(len(subject.encode()), len(headers), len(payload))


def put(
    store: StreamStore, subject: str, payload: bytes = b"x", headers: bytes = b"", ts: int | None = None
) -> int:
    """Append at `last_seq + 1` (timestamp `seq * 10` unless given); return the seq."""
    seq = store.state().last_seq + 1
    store.append(seq, subject, headers, payload, seq * 10 if ts is None else ts)
    return seq


def put_many(store: StreamStore, subjects: list[str], payload: bytes = b"x") -> list[int]:
    return [put(store, subject, payload) for subject in subjects]


def live_messages(store: StreamStore) -> Iterator[StoredMsg]:
    """Every live message, ascending, through `load_next` (cheap across large skipped ranges)."""
    start = 0
    while True:
        try:
            msg = store.load_next(None, start)
        except NoMessageFound:
            return
        yield msg
        start = msg.seq + 1


def live_seqs(store: StreamStore) -> list[int]:
    return [msg.seq for msg in live_messages(store)]


def digest_term(msg: StoredMsg) -> int:
    _, crc = encode_message(msg.seq, msg.timestamp_ns, msg.subject.encode(), msg.headers, msg.payload)
    return message_digest(msg.seq, crc)


def expected_digest(store: StreamStore) -> int:
    """The digest recomputed from scratch: load every live message and encode its canonical record."""
    return sum(digest_term(msg) for msg in live_messages(store)) & U64_MASK


def expected_ranges(store: StreamStore) -> dict[int, int]:
    ranges: dict[int, int] = {}
    for msg in live_messages(store):
        number = (msg.seq - 1) // DIGEST_RANGE_SEQS
        ranges[number] = (ranges.get(number, 0) + digest_term(msg)) & U64_MASK
    return ranges


def assert_consistent(store: StreamStore) -> StoreState:
    """The state's counts, bytes, subjects and digests equal a recomputation from the live messages."""
    state = store.state()
    msgs = list(live_messages(store))
    assert state.msgs == len(msgs)
    assert state.bytes == sum(size_of(m.subject, m.payload, m.headers) for m in msgs)
    assert state.num_subjects == len({m.subject for m in msgs})
    assert state.digest == expected_digest(store)
    assert store.digest_ranges() == expected_ranges(store)
    assert sum(store.digest_ranges().values()) & U64_MASK == state.digest
    if msgs:
        assert (state.first_seq, state.first_timestamp_ns) == (msgs[0].seq, msgs[0].timestamp_ns)
        assert state.last_timestamp_ns == msgs[-1].timestamp_ns
        assert state.num_deleted == state.last_seq - state.first_seq + 1 - len(msgs)
    else:
        assert state.num_deleted == 0 and state.digest == 0
    return state


def snapshot(store: StreamStore) -> tuple[StoreState, list[StoredMsg]]:
    """State plus every live message: what must survive a reopen unchanged."""
    return store.state(), list(live_messages(store))
