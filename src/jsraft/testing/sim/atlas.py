"""The fault atlas: which nodes' disks may be corrupted, and the corruption done to them while they are down.

Owns: `FaultAtlas` (the fixed minority of nodes, chosen per seed, whose `SimDisk` allows corruption) and
`corrupt_at_rest`, which damages a stopped node's files the way CHAOS.md's S09/S10 do: flip a bit in a
segment, a snapshot or the hard-state file; cut a segment's tail; lose a segment, a snapshot or the
hard-state file; roll a 4 KiB chunk of a segment back to an earlier synced version (a lost write). And
`lose_last_hard_state` (`lose-last-vote`, applied by the fault scheduler to a node crashed right after it
voted): the newest hard-state write lost outright, its witness slot flipped and its segment record cut off
with the tail — the one damage wal recovery cannot cover from the log, what the raft vote fence is for.

What is deliberately not done: rolling back the hard-state file's chunk. Its two slots are written
alternately, each fsynced; a rolled-back chunk restores an older pair of valid slots, indistinguishable from
a replica that never saved the newer state, so it would silently forget a vote. No single-node checksum can
detect that; DESIGN.md §4 assumes an fsynced hard-state write stays durable (a lost one is not in its fault
model), so the simulator does not inject it. Nor does it flip the format-version byte of a file header:
a version that reads as newer than the build makes the WAL refuse to open at all (`BadFileFormat`, DESIGN.md
§9: a newer format is never read as damage) — a known trade-off, reported, not a silent loss: the node stays
down, which the liveness phase would report on every such seed (seed 925 of the first 1000 showed it).
The group marker (`replica.GROUP_MARKER`) is likewise never damaged: it is what tells a formatted
directory from a new one.

Invariants:
  1. The atlas holds at most `(nodes - 1) // 2` initial voters for the whole run (config invariant 2), so
     a majority of every configuration the run can reach keeps intact durable copies.
  2. Corruption is applied only through `SimDisk`'s fault methods, which refuse (and log) on a disk outside
     the atlas: the atlas is enforced twice.

Imports: stdlib, `jsraft.testing.simdisk`, `jsraft.wal` (file layout names).
"""

from __future__ import annotations

import random

from jsraft.codec.records import HEADER_BYTES, Kind, scan_records
from jsraft.testing.simdisk import CHUNK_BYTES, SimDisk
from jsraft.wal.format import (
    HARD_STATE_FILE, HARD_STATE_SLOT_OFFSETS, SEGMENT_DATA_START, SNAPSHOT_DIR, WAL_DIR, parse_segment_name,
)
from jsraft.wal.hardstate import read_slots

# Every jsraft file starts with magic (4 bytes) then the format version byte (codec FILE_HEADER).
_VERSION_BYTE_OFFSET = 4
# A hard-state slot's record is about this long (header, term, vote, watermark...); flips aim inside it.
_SLOT_RECORD_BYTES = 64
# (what, weight): relative frequency of each kind of damage.
_DAMAGE = (
    ("flip-segment", 30), ("flip-snapshot", 8), ("flip-hardstate", 8), ("truncate-segment", 15),
    ("lose-segment", 10), ("lose-snapshot", 5), ("lose-hardstate", 4), ("rollback-segment", 20),
)


def _files(disk: SimDisk, directory: str) -> list[str]:
    if not disk.is_dir(directory):
        return []
    return [f"{directory}/{name}" for name in disk.listdir(directory) if not disk.is_dir(f"{directory}/{name}")]


def corrupt_at_rest(disk: SimDisk, rng: random.Random) -> str:
    """Damage one file of a stopped node's disk; returns what was done ("" if nothing applied)."""
    kinds, weights = zip(*_DAMAGE)
    kind = rng.choices(kinds, weights)[0]
    segments, snapshots = _files(disk, WAL_DIR), _files(disk, SNAPSHOT_DIR)
    hard_state = [HARD_STATE_FILE] if disk.exists(HARD_STATE_FILE) else []
    pool = {"segment": segments, "snapshot": snapshots, "hardstate": hard_state}[kind.partition("-")[2]]
    if not pool:
        return ""
    path = rng.choice(pool)
    action = kind.partition("-")[0]
    if action == "flip":
        done = disk.flip_bit(path, _flip_offset(disk, path, rng))
    elif action == "truncate":
        done = disk.truncate_tail(path, min(disk.file_size(path), int(rng.paretovariate(1.0) * 8)))
    elif action == "lose":
        done = disk.lose_file(path)
    else:
        size = disk.file_size(path)
        done = size > 0 and disk.rollback_chunk(path, rng.randrange(0, size, CHUNK_BYTES) if size else 0)
    return f"{kind} {path}" if done else ""


def lose_last_hard_state(disk: SimDisk, rng: random.Random) -> str:
    """Lose the newest hard-state write: cut the newest segment from its record of that write on (the
    entries before it stay) and flip a header bit of the witness slot holding its copy. "" if the newest
    segment's last hard-state record is not the one that slot copies (nothing applied then)."""
    if not disk.exists(HARD_STATE_FILE):
        return ""
    slots = read_slots(disk)[:2]
    newest = max((0, 1), key=lambda i: slots[i].sequence)
    sequence, older = slots[newest].sequence, slots[1 - newest].sequence
    names = sorted((n for n in (disk.listdir(WAL_DIR) if disk.is_dir(WAL_DIR) else [])
                    if parse_segment_name(n) is not None), key=lambda n: parse_segment_name(n) or 0)
    if sequence < 0 or not names:
        return ""
    path = f"{WAL_DIR}/{names[-1]}"
    buffer = disk.read_file(path)
    # The witness copy takes the next sequence of its slot's parity after the record it checkpoints.
    found = [r for r in scan_records(buffer, SEGMENT_DATA_START).records if r.kind == Kind.WAL_HARD_STATE]
    if not found or not older < found[-1].ident_a < sequence:
        return ""
    if not disk.truncate_tail(path, len(buffer) - found[-1].offset):
        return ""
    disk.flip_bit(HARD_STATE_FILE, HARD_STATE_SLOT_OFFSETS[newest] + rng.randrange(HEADER_BYTES))
    return f"lose-last-vote {path} + {HARD_STATE_FILE} slot {newest} (sequence {sequence})"


def _flip_offset(disk: SimDisk, path: str, rng: random.Random) -> int:
    """Where to flip a bit: anywhere but the version byte; in the hard-state file, inside a slot's record
    (the slots are 4 KiB apart and mostly padding, so a uniform offset would almost never hit data)."""
    size = disk.file_size(path)
    if path == HARD_STATE_FILE and size >= HARD_STATE_SLOT_OFFSETS[-1] + _SLOT_RECORD_BYTES:
        return rng.choice(HARD_STATE_SLOT_OFFSETS) + rng.randrange(_SLOT_RECORD_BYTES)
    offset = rng.randrange(size - 1) if size > 1 else 0
    return offset + (offset >= _VERSION_BYTE_OFFSET and size > _VERSION_BYTE_OFFSET + 1)


class FaultAtlas:
    def __init__(self, corruptible: frozenset[str]) -> None:
        self.corruptible = corruptible

    def allows(self, node_id: str) -> bool:
        return node_id in self.corruptible

    def describe(self) -> str:
        return ",".join(sorted(self.corruptible)) or "none"
