"""One WAL segment in memory, and the rewrite that puts repaired entries into it (layer L2).

Owns: `Segment`, the per-index map from a Raft index to where its record lies in a segment file;
`decode_span()`, which re-verifies records read back while running; and `rebuild()`, which produces a
segment's new content when faulty entries are replaced.

`Segment` covers indexes `first .. last` with three parallel arrays: `offsets` (where the record starts,
or for a faulty index where the junk that hides it starts), `lengths` (0 for a faulty index whose bytes
are unusable) and `terms` (0 when unknown). A segment with `name None` is the *head*: indexes after the
snapshot whose segment is missing; it has no file.

Why a rewrite, not superseding records: a replaced entry must sit where a reader expects it. Writing the
repaired entry as a new record later in the file would make an index repeat, and repeated indexes are how
stale or misdirected writes look (rule R4 in `scan`). So `replace` rewrites the whole segment with
`Disk.write_atomic` (temp file, fsync, rename, directory fsync): after a crash the file is either the old
one (the entry is still faulty, to be repaired again) or the new one, never a mix. Repair is rare and
segments are small, so the copy is cheap enough.

Invariants:
  1. `len(offsets) == len(lengths) == len(terms)`; `last == first + len(offsets) - 1`.
  2. A rebuilt segment keeps every accepted record byte for byte, puts each replacement at its index, drops
     junk in the middle (a gap left by a still-faulty index is found again from its neighbours, R2), and
     keeps junk at the very end of the log, so a still-faulty last index is not mistaken for a torn tail.

Imports: L0, L1. Reference: DESIGN.md §4 (repair from a peer).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable

from jsraft.codec.records import HEADER_BYTES, record_crc
from jsraft.errors import invariant
from jsraft.raft.types import Entry
from jsraft.wal.format import (
    decode_entry_body,
    encode_entry,
    parse_segment_name,
    segment_name,
    segment_preamble,
)


class Segment:
    __slots__ = ("first", "name", "offsets", "lengths", "terms", "size", "junk_at", "header_ok", "version")

    def __init__(self, first: int, name: str | None) -> None:
        self.first = first
        self.name = name
        self.offsets = array("Q")
        self.lengths = array("I")
        self.terms = array("Q")
        self.size = 0  # bytes in the file
        self.junk_at = 0  # end of the last accepted record: junk, if any, lies from here to `size`
        self.header_ok = name is None
        self.version = 0  # the file's format version (`format`); appends go only to a current one

    @property
    def last(self) -> int:
        return self.first + len(self.offsets) - 1

    def add(self, offset: int, length: int, term: int) -> None:
        self.offsets.append(offset)
        self.lengths.append(length)
        self.terms.append(term)

    def span(self, lo: int, hi: int) -> tuple[int, int]:
        """File offsets `[start, end)` holding the records of indexes `[lo, hi)` (all good)."""
        last = hi - 1 - self.first
        return self.offsets[lo - self.first], self.offsets[last] + self.lengths[last]

    def cut_from(self, index: int) -> int:
        """Forget indexes >= `index`; return the file offset where they began."""
        position = index - self.first
        invariant(0 <= position <= len(self.offsets), "cut point must lie within the segment")
        offset = self.offsets[position] if position < len(self.offsets) else self.size
        del self.offsets[position:]
        del self.lengths[position:]
        del self.terms[position:]
        return offset


def decode_span(segment: Segment, buffer: bytes, start: int, lo: int, hi: int) -> list[Entry] | int:
    """Entries `[lo, hi)` from `buffer` (read at file offset `start`), each CRC re-checked after the read;
    or the first index whose record no longer verifies."""
    out = []
    for index in range(lo, hi):
        position = index - segment.first
        offset, length = segment.offsets[position] - start, segment.lengths[position]
        crc = int.from_bytes(buffer[offset + 4 : offset + 8], "little")
        if len(buffer) < offset + length or record_crc(buffer, offset, length) != crc:
            return index
        body = buffer[offset + HEADER_BYTES : offset + length]
        out.append(decode_entry_body(index, segment.terms[position], body)[0])
    return out


def rebuild(
    segment: Segment,
    buffer: bytes,
    replacements: dict[int, Entry],
    trusted_term: Callable[[int], int],
    keep_tail_junk: bool,
) -> bytes:
    """New content for `segment` with `replacements` in place (see invariant 2).

    `trusted_term(i)` is the term of index `i` if it is known good (0 if not); it gives each replacement its
    `prev_term`. `keep_tail_junk` is true for the last segment of the log.
    """
    invariant(segment.name is not None, "the head has no file to rebuild")
    first_by_name = parse_segment_name(segment.name or "")
    invariant(first_by_name is not None, "segment names are parsed before they are rebuilt")
    parts = [segment_preamble(first_by_name or 0)]
    for position in range(len(segment.offsets)):
        index = segment.first + position
        replacement = replacements.get(index)
        if replacement is not None:
            previous = replacements.get(index - 1)
            prev_term = previous.term if previous is not None else trusted_term(index - 1)
            parts.append(encode_entry(replacement, prev_term))
        elif segment.lengths[position]:
            offset = segment.offsets[position]
            parts.append(buffer[offset : offset + segment.lengths[position]])
    last_position = len(segment.offsets) - 1
    if (
        keep_tail_junk
        and last_position >= 0
        and segment.last not in replacements
        and segment.lengths[last_position] == 0
    ):
        parts.append(buffer[segment.offsets[last_position] :])
    return b"".join(parts)


def new_segment_content(entries: list[Entry], trusted_term: Callable[[int], int]) -> tuple[str, bytes]:
    """Name and content of a new segment holding `entries` (sorted; gaps allowed), for a missing head."""
    by_index = {entry.index: entry for entry in entries}
    parts = [segment_preamble(entries[0].index)]
    for entry in entries:
        previous = by_index.get(entry.index - 1)
        prev_term = previous.term if previous is not None else trusted_term(entry.index - 1)
        parts.append(encode_entry(entry, prev_term))
    return segment_name(entries[0].index), b"".join(parts)
