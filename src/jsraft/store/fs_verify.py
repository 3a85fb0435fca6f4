"""Background verification of what a fast open took on trust from the index (layer L2).

Owns: `FileStore.unverified` (block number -> how many of its bytes the index vouched for and no scan has
read yet), reading one such region off the store's thread (`read_region`), settling it against the live
maps on the store's thread (`settle`), and the loop that does both until nothing is left
(`verify_in_background`). `scan_live` (a full verification of a running store) shares `check_live`.

A live record whose bytes do not verify is detached and becomes a `corrupt` fault: the fault a startup
scan would have recorded for it, so the same repair follows (a replica with store faults resyncs from its
leader, `server/stream_repair`).

Invariants:
  1. `read_region` touches no store state: it opens its own handle of the block file, so it may run in a
     worker thread while the store keeps serving on its own.
  2. `settle` runs on the store's thread. A record that does not match the region as read (rewritten,
     erased or moved since, or a read error) is read again through the store (`checked_record`) before it
     is called damaged; a record is damaged when no read of it verifies or its content CRC is not the one
     the store accounted for it (the digest's term).
  3. Reads of not yet verified records are CRC-checked like every read (FileStore invariant 4): the
     verifier only finds damage before a read trips over it.
  4. A region leaves `unverified` only in `settle`, so a store that is closed or replaced mid-way simply
     stops being verified; nothing is marked verified that was not read.

Imports: L0, L1 (codec, disk protocol), store siblings. Must not import trio: the caller passes its
worker-thread runner and its sleep.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from jsraft.codec.records import FILE_HEADER_BYTES, Kind, scan_records
from jsraft.disk.base import Disk
from jsraft.errors import BadFileFormat
from jsraft.store import fs_unreadable
from jsraft.store.base import FaultKind
from jsraft.store.blocks import Block, block_name, check_file_header, content_crc

if TYPE_CHECKING:
    from jsraft.store.filestore import FileStore

log = logging.getLogger("jsraft.store.verify")

_MESSAGE_KINDS = (Kind.MSG, Kind.MSG_ZSTD)
Region = dict[int, tuple[int, int, int]]  # offset -> (seq, length, content CRC) of each verifying message record


def read_region(disk: Disk, number: int, limit: int) -> Region | None:
    """The message records that verify in the first `limit` bytes of block `number` (invariant 1); None
    when the file cannot be read (gone since, or an I/O error: `settle` then re-reads record by record)."""
    try:
        handle = disk.open(block_name(number))
        try:
            data = handle.pread(0, min(limit, handle.size()))
        finally:
            handle.close()
        check_file_header(data, 1)
    except (OSError, BadFileFormat):
        return None
    return region_of(data)


def region_of(data: bytes) -> Region:
    """The message records of a block file's bytes that verify, by offset."""
    return {view.offset: (view.ident_a, view.length, content_crc(data[view.offset : view.offset + view.length],
                                                                   view.kind))
            for view in scan_records(data, FILE_HEADER_BYTES).records if view.kind in _MESSAGE_KINDS}


def check_live(store: "FileStore", seq: int, where: tuple[Block, int, int, int], region: Region | None) -> bool:
    """Whether `seq`'s live record at `where` is intact; one that is not is detached as a `corrupt`
    fault (invariant 2). `region` is the block as read in one go (None: read the record alone)."""
    block, offset, length, crc = where
    if region is not None and region.get(offset) == (seq, length, crc):
        return True
    try:
        record = store.checked_record(seq, where)
    except OSError:
        record = None
    if record is not None and content_crc(record, record[8]) == crc:
        return True  # the file holds it intact: the region was read before a rewrite, or had a read error
    store.detach(seq, where, readable=False)
    store.fault_map.add(seq, seq, FaultKind.corrupt)
    log.warning("store %s: seq %d in block %d does not verify: a corrupt fault, repaired from a peer",
                store.config.name, seq, block.number)
    return False


def settle(store: "FileStore", number: int, limit: int, region: Region | None) -> int:
    """Check every live record in the first `limit` bytes of block `number` against `region` (as read by
    `read_region`); return how many were damaged. The region is verified afterwards (invariant 4)."""
    damaged = 0
    block = store.files.by_number.get(number)
    if block is not None:
        for seq in range(block.first_seq, block.last_seq + 1):
            offset = block.offsets[seq - block.first_seq]
            if offset and offset < limit:
                index = seq - block.first_seq
                where = (block, offset, block.lengths[index], block.crcs[index])
                damaged += not check_live(store, seq, where, region)
        for seq, (moved_number, offset, length, crc) in list(store.moved.items()):
            if moved_number == number and offset < limit:
                damaged += not check_live(store, seq, (block, offset, length, crc), region)
    store.unverified.pop(number, None)
    if number in store.unaccounted:
        fs_unreadable.settle(store, number)  # kept owed by a read error that this pass read past
    return damaged


def next_region(store: "FileStore") -> tuple[int, int] | None:
    """The lowest block still to verify and its byte limit, or None (nothing left, or the store closed)."""
    if store._closed or not store.unverified:
        return None
    number = min(store.unverified)
    return number, store.unverified[number]


async def verify_in_background(get_store: Callable[[], Any], run_sync: Callable[..., Awaitable[Any]],
                               sleep: Callable[[float], Awaitable[None]], on_damage: Callable[[], None],
                               idle_s: float = 1.0) -> None:
    """Verify, block by block, what the current store (`get_store()`, which may be replaced) took on trust
    at open; read each block with `run_sync` (a worker thread) and settle it here. Returns once a store is
    there with nothing left to verify (a store that replaces it later is empty or fully scanned)."""
    blocks, damaged = 0, 0
    while True:
        store = get_store()
        region = next_region(store) if store is not None else None
        if region is None:
            if store is None:  # not yet (the log still replays) or for now (being replaced)
                await sleep(idle_s)
                continue
            if blocks:
                log.info("store %s: background verification of %d blocks done, %d damaged records",
                         store.config.name, blocks, damaged)
            return  # only an open from the index leaves anything unverified: an idle replica costs nothing
        number, limit = region
        found = await run_sync(read_region, store.disk, number, limit)
        if store is not get_store() or store._closed:
            continue
        found_damaged = settle(store, number, limit, found)
        blocks, damaged = blocks + 1, damaged + found_damaged
        if found_damaged:
            on_damage()
