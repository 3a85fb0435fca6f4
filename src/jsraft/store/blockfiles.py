"""The set of block files of one FileStore: naming, open handles, the read cache, lookups by sequence.

Owns: which block files exist and how they are reached. It knows nothing of messages beyond the
`Block` summaries it holds; the store decides what is written.

Invariants:
  1. `blocks` is sorted by block number, and natural sequence ranges increase with the number.
  2. At most `_HANDLES_MAX` files are open; the newest block's handle is never evicted.
  3. The cache holds at most `limits.block_cache_blocks_max` whole blocks, so bodies never pile up in
     memory; a cached buffer is dropped whenever its file changes.
  4. A block created by a deferred roll (`create_pending`) lives under its pending name (`pending_name`,
     which recovery removes as a leftover `.tmp`) until the roll's job has made the sealed block and it
     durable and renamed it; at most one such job is outstanding, and `settle()` waits for it. Every change
     to the set of files (`create`, `create_pending`, `remove`, `forget`) settles first, so a file is never
     removed, reopened by its name or rewritten while a job still works on it. A job that failed fails
     every later `settle()`: what the store holds on disk is then unknown.
  5. `make_new_store` writes, into an empty directory, the first block file `FileStore.open` would create
     there, byte for byte (`block_preamble(1, 1)`), and nothing else: not the index a `close()` adds, which
     only shortens a recovery and is written at the store's first close (`recovery` invariant 3: a store
     without one is scanned, here one header). For a stream directory built whole and synced as one tree
     (`server.groups.stream_format` invariant 4): no store opened, closed and opened again, one file less.
     Whoever opens the store later recovers it as any (tests/store/test_make_new_store.py).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from jsraft import limits
from jsraft.disk.base import Disk, DiskFile, append_pieces
from jsraft.errors import invariant
from jsraft.store.blocks import Block, block_name, block_preamble

_HANDLES_MAX = 16
PENDING_SUFFIX = ".new.tmp"  # ends in ".tmp": recovery removes a leftover (a crash before its rename)


def make_new_store(disk: Disk) -> None:
    """Invariant 5: a new, empty store's files under `disk` (its first block, header only)."""
    invariant(not disk.listdir(""), "a new store's files are written only into an empty directory")
    handle = disk.open(block_name(1), create=True)
    try:
        handle.append(block_preamble(1, 1))
        handle.sync()  # through an `unsynced()` view (the tree's format) a no-op: its `sync_tree` syncs it
    finally:
        handle.close()
    disk.sync_dir("")


def pending_name(number: int) -> str:
    return block_name(number) + PENDING_SUFFIX


class BlockFiles:
    def __init__(self, disk: Disk) -> None:
        self.disk = disk
        self.blocks: list[Block] = []
        self.by_number: dict[int, Block] = {}
        self._handles: OrderedDict[int, DiskFile] = OrderedDict()
        self._cache: OrderedDict[int, bytes] = OrderedDict()
        self._pending: Callable[[], None] | None = None  # wait for the outstanding roll job (invariant 4)
        self._failed: BaseException | None = None

    def settle(self) -> None:
        """Wait for the outstanding deferred roll's job, if any; raise what it (or an earlier one) raised."""
        if self._failed is not None:
            raise self._failed
        wait, self._pending = self._pending, None
        if wait is None:
            return
        try:
            wait()
        except BaseException as error:
            self._failed = error
            raise

    def defer(self, wait: Callable[[], None]) -> None:
        """Record the job a deferred roll handed over (`settle()` waits for it)."""
        invariant(self._pending is None, "at most one deferred roll is outstanding")
        self._pending = wait

    def add(self, block: Block) -> None:
        self.blocks.append(block)
        self.by_number[block.number] = block

    def newest(self) -> Block:
        return self.blocks[-1]

    def handle(self, number: int) -> DiskFile:
        handle = self._handles.get(number)
        if handle is not None:
            self._handles.move_to_end(number)
            return handle
        handle = self.disk.open(block_name(number))
        self._handles[number] = handle
        if len(self._handles) > _HANDLES_MAX:
            old_number = next(iter(self._handles))
            if not self.blocks or old_number != self.newest().number:
                self._handles.pop(old_number).close()
        return handle

    def forget(self, number: int) -> None:
        """Close the file's handle and drop its cached buffer (it was rewritten or removed)."""
        self.settle()
        handle = self._handles.pop(number, None)
        if handle is not None:
            handle.close()
        self._cache.pop(number, None)

    def drop_cached(self, number: int) -> None:
        """Forget one block's cached buffer: the next read goes to the file."""
        self._cache.pop(number, None)

    def drop_cache(self) -> None:
        self._cache.clear()

    def abandon(self) -> None:
        """Drop every handle without closing cleanly: what a crash leaves (tests use it)."""
        self._handles.clear()
        self._cache.clear()

    def close(self) -> None:
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()
        self._cache.clear()

    def create(self, number: int, first_seq: int) -> Block:
        """Create block file `number`, durable (file and directory entry), and make it the newest."""
        self.settle()
        block = Block(number, first_seq)
        handle = self.disk.open(block_name(number), create=True)
        handle.truncate(0)
        handle.append(block_preamble(number, first_seq))
        handle.sync()
        self.disk.sync_dir("")
        block.size = handle.size()
        self._handles[number] = handle
        self.add(block)
        return block

    def create_pending(self, number: int, first_seq: int) -> Block:
        """Create block `number` under its pending name, nothing synced, and make it the newest (invariant
        4): the caller hands a job that syncs it and renames it to `defer`."""
        self.settle()
        block = Block(number, first_seq)
        handle = self.disk.open(pending_name(number), create=True)
        handle.truncate(0)
        handle.append(block_preamble(number, first_seq))
        block.size = handle.size()
        self._handles[number] = handle
        self.add(block)
        return block

    def remove(self, block: Block) -> None:
        """Remove a block file (the caller syncs the directory once for a group of removals)."""
        self.forget(block.number)
        self.disk.remove(block_name(block.number))
        self.blocks.remove(block)
        del self.by_number[block.number]

    def append(self, data: bytes | list, length: int = 0) -> int:
        """Append bytes (or a list of pieces: their join) to the newest block; return the offset they start
        at (`length`: the pieces' total). Large pieces are written unjoined (`disk.base.append_pieces`)."""
        block = self.newest()
        handle = self.handle(block.number)
        if type(data) is list:
            offset = append_pieces(handle, data, length)
        else:
            length = len(data)
            offset = handle.append(data)
        block.size = offset + length
        self._cache.pop(block.number, None)
        return offset

    def buffer(self, block: Block) -> bytes:
        """The whole block file, through the bounded cache."""
        buffer = self._cache.get(block.number)
        if buffer is None or len(buffer) != block.size:
            handle = self.handle(block.number)
            buffer = handle.pread(0, handle.size())
            self._cache[block.number] = buffer
            while len(self._cache) > limits.block_cache_blocks_max:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(block.number)
        return buffer

    def read(self, block: Block, offset: int, length: int) -> bytes:
        buffer = self._cache.get(block.number)
        if buffer is not None and offset + length <= len(buffer):
            return buffer[offset : offset + length]
        return self.handle(block.number).pread(offset, length)

    def block_for(self, seq: int) -> Block | None:
        """The block whose natural range covers `seq` (binary search)."""
        blocks = self.blocks
        lo, hi = 0, len(blocks) - 1
        while lo <= hi:
            mid = (lo + hi) // 2
            block = blocks[mid]
            if seq < block.first_seq:
                hi = mid - 1
            elif seq > block.last_seq:
                lo = mid + 1
            else:
                return block
        return None
