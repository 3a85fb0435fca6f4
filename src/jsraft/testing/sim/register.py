"""`Register`: the small replicated state machine each simulated node applies committed entries to.

Owns: an append-only register — the list of `(index, value)` for every NORMAL entry applied — and a
digest chained over every applied entry (NORMAL, NOOP and CONF_CHANGE alike): `digest_i =
crc32(index, term, type, data; digest_{i-1})`. Its snapshot is its serialized state (applied index, digest,
values), so installing a leader's snapshot and replaying entries must give exactly the digest the
leader had. The checkers compare digests across replicas at each index.

Invariants:
  1. Entries are applied in index order without gaps: `apply(e)` requires `e.index == applied_index + 1`.
  2. `encode()` / `decode()` round-trip exactly; a snapshot that does not decode is a checker failure, not
     a crash of the simulator.
  3. No randomized hashing (`hash()` of bytes varies per process): digests use crc32, so they are the same
     in every run of a seed.

Imports: stdlib, `jsraft.raft` (types only).
"""

from __future__ import annotations

import zlib

from jsraft.errors import invariant
from jsraft.raft import Entry, EntryType

_MAGIC = b"jsraft-sim-register-1"


def chain_digest(previous: int, entry: Entry) -> int:
    head = f"{entry.index}:{entry.term}:{int(entry.type)}:".encode()
    return zlib.crc32(entry.data, zlib.crc32(head, previous))


class Register:
    def __init__(self) -> None:
        self.applied_index = 0
        self.digest = 0
        self.values: list[tuple[int, bytes]] = []

    def apply(self, entry: Entry) -> None:
        invariant(entry.index == self.applied_index + 1,
                  f"register applies {entry.index} right after {self.applied_index}")
        if entry.type is EntryType.NORMAL:
            self.values.append((entry.index, entry.data))
        self.digest = chain_digest(self.digest, entry)
        self.applied_index = entry.index

    def value_at(self, index: int) -> bytes | None:
        """The value applied at `index` (binary search: indexes are increasing), or None."""
        values = self.values
        low, high = 0, len(values)
        while low < high:
            middle = (low + high) // 2
            if values[middle][0] < index:
                low = middle + 1
            else:
                high = middle
        return values[low][1] if low < len(values) and values[low][0] == index else None

    def encode(self) -> bytes:
        lines = [_MAGIC, f"{self.applied_index} {self.digest}".encode()]
        lines += [b"%d %s" % (index, value) for index, value in self.values]
        return b"\n".join(lines)

    @classmethod
    def decode(cls, data: bytes) -> Register:
        lines = data.split(b"\n")
        if len(lines) < 2 or lines[0] != _MAGIC:
            raise ValueError("not a register snapshot")
        register = cls()
        applied, digest = lines[1].split(b" ")
        register.applied_index, register.digest = int(applied), int(digest)
        for line in lines[2:]:
            index, _, value = line.partition(b" ")
            register.values.append((int(index), value))
        return register
