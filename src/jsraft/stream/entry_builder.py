"""`EntryBuilder`: the MSGS entries one stream leader decision builds (layer L3).

Owns: coalescing accepted publishes into MSGS entries with explicit sequences (DESIGN §2 step 3), moved
out of `stream.leader` to keep it one concept.

Invariants:
  1. Messages go into entries in the order added, with consecutive sequences from each entry's first.
  2. An entry is closed when the next message would pass `MSGS_PER_ENTRY_MAX` messages or
     `MSGS_ENTRY_BYTES_SOFT_MAX` bytes — except in an `atomic` builder (an atomic batch, `stream.batches`),
     whose messages all go into one entry, however large (the batch bounds itself).

Imports: `stream.entries`. Reference: DESIGN §2.
"""

from __future__ import annotations

from jsraft.stream import entries


class EntryBuilder:
    """The MSGS entries being built by one `decide` call (or one atomic batch)."""

    __slots__ = ("entries", "msgs", "first_seq", "entry_bytes", "timestamp_ns", "atomic")

    def __init__(self, timestamp_ns: int, *, atomic: bool = False) -> None:
        self.entries: list[bytes] = []
        self.msgs: list[tuple[bytes, bytes, bytes, int, bytes, int]] = []
        self.first_seq = 0
        self.entry_bytes = 0
        self.timestamp_ns = timestamp_ns
        self.atomic = atomic

    def add(self, seq: int, subject: str, headers: bytes, payload: bytes, msg_id: str, flags: int) -> None:
        size = len(subject) + len(headers) + len(payload) + len(msg_id) + 21
        if self.msgs and not self.atomic and (len(self.msgs) >= entries.MSGS_PER_ENTRY_MAX
                                              or self.entry_bytes + size > entries.MSGS_ENTRY_BYTES_SOFT_MAX):
            self.flush()
        if not self.msgs:
            self.first_seq = seq
        self.msgs.append((subject.encode(), headers, payload, self.timestamp_ns, msg_id.encode(), flags))
        self.entry_bytes += size

    def flush(self) -> None:
        if self.msgs:
            self.entries.append(entries.encode_msgs(self.first_seq, self.msgs))
            self.msgs, self.entry_bytes = [], 0
