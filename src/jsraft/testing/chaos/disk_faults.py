"""At-rest corruption of a STOPPED node's files, as CHAOS.md's "bit flips, truncation, lost writes": flip
bits in an older record of a sealed store block, truncate the tail of the newest block or of the WAL by a
Zipf-sized amount, write back old 4 KiB chunks of a file (a rolled-back or misdirected write), delete a
sealed block. Each returns a JSON-ready description for `faults.jsonl` saying exactly what changed.

Layouts (DESIGN.md §3, `store/blocks.py`, `codec/records.py`, `wal/format.py`):
  - a store block `streams/<S>/msgs/<8 digits>.blk` is `FILE_HEADER` (8 bytes) | `BLOCK_HEADER` record |
    message records; a record is `length u32 | crc u32 | kind u8 | ident_a u64 | ident_b u64 | body`
    (25-byte header; the CRC covers all but itself), a message's `ident_a` is its seq. A `MSG` body is
    `subject length u16 | headers length u32 | subject | headers | payload`; a `MSG_ZSTD` body (sealed
    blocks, compressed) is `content crc u32 | zstd frame`. The newest block (highest number) is the one
    being appended to; every other block is sealed.
  - a WAL segment `streams/<S>/raft/wal/<20 digits>.log` (and `meta/wal/`): `FILE_HEADER` | segment header
    record | `WAL_ENTRY` records.

Invariants:
  1. `flip_bits` changes only bytes inside one message record's payload (for `MSG_ZSTD`, inside its zstd
     frame), never the record header or the framing of any other record, so the store's CRC check finds
     exactly that one seq damaged and can resync on the next record.
  2. `truncate_tail` never cuts into a file's preamble (file header and first record): a whole lost file
     is `delete_block`'s fault, not this one.
  3. Everything here runs only on a stopped node's files (the caller's job); nothing is fsynced — the
     node reads the files through the page cache on restart, as it would after the fault.

Imports: anything (test kit). Reference: ../shared/CHAOS.md; Jepsen "NATS 2.12.1" (bit flips, truncation).
"""

from __future__ import annotations

import os
import random
import struct
from typing import Any

from jsraft.codec.records import FILE_HEADER_BYTES, HEADER_BYTES, Kind, scan_records
from jsraft.store.blocks import parse_block_name

CHUNK_BYTES = 4096
_MSG_PREFIX = struct.Struct("<HI")


def store_blocks(store_dir: str) -> list[str]:
    """Block files of one store, oldest (lowest number) first."""
    names = [(parse_block_name(name), name) for name in os.listdir(store_dir)]
    return [os.path.join(store_dir, name) for number, name in sorted(n for n in names if n[0] is not None)]


def wal_segments(group_dir: str) -> list[str]:
    """WAL segment files of one Raft group directory (`.../raft` or `meta`), oldest first."""
    wal = os.path.join(group_dir, "wal")
    return sorted(os.path.join(wal, name) for name in os.listdir(wal) if name.endswith(".log"))


def records_of(path: str) -> list[Any]:
    """The verified records of a framed file (store block or WAL segment), after its file header."""
    with open(path, "rb") as handle:
        data = handle.read()
    return scan_records(data, FILE_HEADER_BYTES).records


def _payload_span(data: bytes, record: Any) -> tuple[int, int]:
    """`[start, end)` file offsets of a message record's payload (invariant 1)."""
    body = record.offset + HEADER_BYTES
    end = record.offset + record.length
    if record.kind == Kind.MSG_ZSTD:
        return body + 4, end
    subject_len, headers_len = _MSG_PREFIX.unpack_from(data, body)
    return body + _MSG_PREFIX.size + subject_len + headers_len, end


def flip_bits(store_dir: str, rng: random.Random, n_bits: int = 1, *, include_newest: bool = False) -> dict[str, Any]:
    """Flip `n_bits` distinct bits inside the payload of one message record, picked at random among the
    records of the sealed blocks (not the newest block unless `include_newest`) whose payload is at least
    one byte. Returns `{"fault": "flip_bits", "file", "seq", "record_offset", "record_length",
    "bits": [[file offset, bit], ...]}`."""
    blocks = store_blocks(store_dir)
    candidates = blocks if include_newest else blocks[:-1]
    choices: list[tuple[str, Any, tuple[int, int]]] = []
    for path in candidates:
        with open(path, "rb") as handle:
            data = handle.read()
        for record in scan_records(data, FILE_HEADER_BYTES).records:
            if record.kind in (Kind.MSG, Kind.MSG_ZSTD):
                span = _payload_span(data, record)
                if span[1] > span[0]:
                    choices.append((path, record, span))
    if not choices:
        raise ValueError(f"no message record with a payload in a sealed block of {store_dir}")
    path, record, (start, end) = choices[rng.randrange(len(choices))]
    positions = rng.sample(range((end - start) * 8), min(n_bits, (end - start) * 8))
    bits = sorted([start + position // 8, position % 8] for position in positions)
    with open(path, "r+b") as handle:
        for offset, bit in bits:
            handle.seek(offset)
            byte = handle.read(1)[0]
            handle.seek(offset)
            handle.write(bytes([byte ^ (1 << bit)]))
    return {"fault": "flip_bits", "file": path, "seq": record.ident_a, "record_offset": record.offset,
            "record_length": record.length, "bits": bits}


def zipf_bytes(rng: random.Random, zipf: float, limit: int, unit: int = 16) -> int:
    """A Zipf/Pareto-sized amount in 1..`limit`: mostly small, sometimes large (`zipf` is the exponent,
    > 1; smaller means heavier tail)."""
    if limit < 1:
        return 0
    return max(1, min(limit, round(unit * (rng.paretovariate(max(zipf - 1.0, 0.05)) - 1.0)) + 1))


def truncate_tail(path: str, rng: random.Random, zipf: float = 1.5) -> dict[str, Any]:
    """Cut a Zipf-sized tail off `path` (a store block or WAL segment), never into its preamble
    (invariant 2). Returns `{"fault": "truncate_tail", "file", "old_size", "new_size", "cut_bytes",
    "records_cut": [[kind, ident_a, ident_b], ...]}` — for a store message `ident_a` is a seq, for a WAL entry
    `(index, term)`."""
    records = records_of(path)
    size = os.path.getsize(path)
    floor = records[0].offset + records[0].length if records else FILE_HEADER_BYTES
    cut = zipf_bytes(rng, zipf, size - floor)
    new_size = size - cut
    with open(path, "r+b") as handle:
        handle.truncate(new_size)
    damaged = [[int(r.kind), r.ident_a, r.ident_b] for r in records if r.offset + r.length > new_size]
    return {"fault": "truncate_tail", "file": path, "old_size": size, "new_size": new_size, "cut_bytes": cut,
            "records_cut": damaged}


def read_copy(path: str) -> bytes:
    """An earlier copy of a file, to roll chunks of it back later (`rollback_chunks`)."""
    with open(path, "rb") as handle:
        return handle.read()


def rollback_chunks(path: str, old_copy: bytes | str, rng: random.Random, n_chunks: int = 1) -> dict[str, Any]:
    """Write back `n_chunks` 4 KiB chunks of `old_copy` (bytes, or the path of a saved copy) over `path`:
    a rolled-back or misdirected write. Chunks whose old bytes differ from the current ones are picked
    first (a rollback that changes nothing is no fault). Returns `{"fault": "rollback_chunks", "file",
    "chunks": [[offset, length], ...], "changed": n}`."""
    old = read_copy(old_copy) if isinstance(old_copy, str) else old_copy
    current = read_copy(path)
    common = min(len(old), len(current))
    offsets = list(range(0, common, CHUNK_BYTES))
    end = {o: min(o + CHUNK_BYTES, common) for o in offsets}
    differing = [o for o in offsets if old[o:end[o]] != current[o:end[o]]]
    rng.shuffle(differing)
    rest = [o for o in offsets if o not in set(differing)]
    rng.shuffle(rest)
    chosen = sorted((differing + rest)[:n_chunks])
    chunks = []
    with open(path, "r+b") as handle:
        for offset in chosen:
            data = old[offset:end[offset]]
            handle.seek(offset)
            handle.write(data)
            chunks.append([offset, len(data)])
    return {"fault": "rollback_chunks", "file": path, "chunks": chunks,
            "changed": sum(1 for offset in chosen if offset in set(differing))}


def delete_block(store_dir: str, rng: random.Random, *, include_newest: bool = False) -> dict[str, Any]:
    """Delete one block file (a sealed one unless `include_newest`). Returns `{"fault": "delete_block",
    "file", "first_seq", "last_seq"}` — the seqs of the message records it held (None if none)."""
    blocks = store_blocks(store_dir)
    candidates = blocks if include_newest else blocks[:-1]
    if not candidates:
        raise ValueError(f"no sealed block in {store_dir}")
    path = candidates[rng.randrange(len(candidates))]
    seqs = [r.ident_a for r in records_of(path) if r.kind in (Kind.MSG, Kind.MSG_ZSTD)]
    os.remove(path)
    return {"fault": "delete_block", "file": path, "first_seq": min(seqs) if seqs else None,
            "last_seq": max(seqs) if seqs else None}


# --- Per-stream helpers (what the scenarios call) ---------------------------------------------------------


def truncate_newest_block(store_dir: str, rng: random.Random, zipf: float = 1.5) -> dict[str, Any]:
    """`truncate_tail` of the store's newest block."""
    return truncate_tail(store_blocks(store_dir)[-1], rng, zipf)


def truncate_wal_tail(group_dir: str, rng: random.Random, zipf: float = 1.5) -> dict[str, Any]:
    """`truncate_tail` of the newest WAL segment of a Raft group directory (`.../raft`, `meta`)."""
    segments = wal_segments(group_dir)
    if not segments:
        raise ValueError(f"no WAL segment in {group_dir}")
    return truncate_tail(segments[-1], rng, zipf)


def rollback_consumer_state(stream_dir: str, old_stream_dir: str, rng: random.Random,
                            n_chunks: int = 1) -> dict[str, Any]:
    """Write back old 4 KiB chunks of the files that hold the stream's consumer state — its Raft snapshots
    (consumers are replicated in the stream group and snapshotted with it, DESIGN §7) and hard state —
    from an earlier copy of the stream directory (`old_stream_dir`, e.g. `shutil.copytree` while the node
    was stopped). Picks one file present in both copies whose contents differ (any common one if none
    differs). Returns `rollback_chunks`'s description (or `{"skipped": why}`)."""
    candidates = []
    for rel in ("raft/snapshots", "raft"):
        directory = os.path.join(stream_dir, rel)
        if not os.path.isdir(directory):
            continue
        for name in sorted(os.listdir(directory)):
            path, old = os.path.join(directory, name), os.path.join(old_stream_dir, rel, name)
            if os.path.isfile(path) and os.path.isfile(old) and (name.endswith(".snap") or name == "hardstate"):
                candidates.append((read_copy(path) != read_copy(old), path, old))
    if not candidates:
        return {"fault": "rollback_chunks", "skipped": f"no snapshot or hard state file in both copies of {stream_dir}"}
    differing = [c for c in candidates if c[0]] or candidates
    _, path, old = differing[rng.randrange(len(differing))]
    return rollback_chunks(path, old, rng, n_chunks)
