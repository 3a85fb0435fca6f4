"""Formatting a new stream replica's directory in one durable step (layer L5).

Owns: `format_new_replica`, which builds `streams/<name>/` for a stream this node opens with no directory
for it yet, `prepare_format` (the same tree built ahead, invariant 5), `remove_format_leftovers`,
`open_replica_files` (a replica's identity files and store), `open_files` (those and the group's WAL) and
`format_and_open` (the format and `open_files` in the stream manager's one worker-thread call), and
`remove_replica_dir` (a deleted or departed replica's directory, `streams` invariant 2). A
create used to make every name durable as it made it — a directory fsync after each file written and
each directory created, 18 fsyncs for one stream directory (`bench/README.md`, "Stream create latency")
— which on a loaded disk was most of a create's time. Here the whole tree is written through an unsynced
view, made durable by one `sync_tree` (one fsync per file and per directory), and only then given its
name.

Invariants:
  1. A stream directory appears under its name only complete and durable: it is built under
     `.format-<name>` (a name no stream has: stream names cannot contain '.'), synced whole, renamed to
     `<name>`, and `streams/` is synced before this returns. A crash at any point leaves either no
     `<name>` (the meta log replays the create and this runs again) or the complete tree.
  2. A `.format-*` directory never had its rename, so no group ever ran from it and the node's group
     record never named its group (`group_record.add` runs when the group opens, after the rename):
     removing one loses nothing. One is removed before its name is formatted again, and at startup.
  3. An existing `<name>` directory is never touched: a replica that ran before recovers from it.
  4. The tree holds what the replica's own open would have made: `config.json` and `group`; for a
     file-backed stream its `msgs/` store's first block (`store.blockfiles.make_new_store`, the bytes
     `FileStore.open` writes in an empty directory; no index, which only shortens a recovery and comes
     with the store's first close) and its `raft/` WAL directory (`wal.files.make_new_wal`). A memory
     stream's `raft/` is left to its open: its presence means "this replica ran before" (memory_stream
     rule 2).
  5. A tree may be prepared ahead (`prepare_format`), while the create's meta entry is being made
     durable on the meta leader, so that its fsyncs overlap the entry's: it is built and synced under the
     temporary name only, so invariants 1 and 2 hold for it as for any other (a create that never
     commits leaves a `.format-*` directory, removed at the next start or the next format of the name).
     `format_new_replica` trusts a prepared tree only when told so by whoever awaited the preparation
     (the stream manager, for the same config bytes); it then adds the `group` file, syncs and renames.
  7. A tree prepared with a `group` file (the meta leader knew the entry's index, hence the group's name,
     once the entry was in its log) is renamed as it is when that file names the group being opened:
     it was synced with the tree, so the format's only step left is the rename and the sync of
     `streams/` — one fsync after the apply where there were two rounds. A tree whose `group` file
     names another group (the entry was replaced after a change of leader, and the name created again
     at another index) gets its `group` file rewritten and synced as in 5; `format_new_replica` reads
     the file to tell, so no caller's word decides it.

  8. A file-backed stream's tree holds its WAL's first segment, header only (`Wal.make_first_segment`'s,
     written with the rest of the WAL's files by `wal.files.make_new_wal`), synced with the tree: the group's first Ready cycle then appends to a file whose name is durable,
     and fsyncs it without the `raft/wal/` directory fsync a new segment needs — one serial fsync
     round less on a create's path. Recovery keeps an empty segment (`wal.log` invariant 5), so a crash
     before the first cycle leaves a valid empty log, as the tree without the segment did.

  9. A replica's files are opened in one worker-thread call (`open_files`): its store, then its group's
     WAL (`runtime.persist.open_storage`), after asking whether a memory stream's `raft/` was there before
     (`memory_stream` rule 2: the WAL's open makes it). A WAL that fails to open closes the store.
 10. `format_and_open` (the stream manager's one worker-thread call) runs the rename's `streams/` fsync
     (invariant 1's) beside `open_files` and returns only once it succeeded: the replica's group opens,
     and can make anything durable or send anything, only after the name is durable. Until then the
     opens only read, or write what no fsync made durable (a fresh WAL's first hard-state record): a
     crash leaves either no `<name>` or a tree no group ever ran from, as in invariant 1.

Imports: stdlib, L0, L1 (`disk`, `jsapi`), L2 (`store`, `wal`), L4 (`runtime.persist`), sibling `memory_stream`,
`stream_options`.
Reference: DESIGN §3 (file replacement is write-temp, fsync, rename, fsync directory — here for a tree).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

from jsraft.disk.base import Disk
from jsraft.errors import JsraftError
from jsraft.jsapi import StreamConfig
from jsraft.runtime import NodeRuntime
from jsraft.runtime.persist import open_storage, side_by_side
from jsraft.server.groups.memory_stream import STORE_DIR, is_memory, open_store
from jsraft.server.groups.stream_options import StreamOptions, replica_store_config
from jsraft.store.blockfiles import make_new_store
from jsraft.wal.files import make_new_wal

FORMAT_PREFIX = ".format-"
RAFT_DIR = "raft"


def format_new_replica(streams: Disk, *, name: str, group: str, config: StreamConfig, raw: bytes,
                       prepared: bool = False, sync_parent: bool = True) -> bool:
    """Run in a worker thread: format `streams/<name>` for group `group` unless it exists (invariant 3).
    `prepared`: `prepare_format` built this config's tree under the temporary name and returned True, and
    nothing touched it since (invariant 5). `sync_parent=False`: the caller syncs `streams/` (invariant
    10). True when it formatted."""
    if streams.exists(name):
        return False
    temp = f"{FORMAT_PREFIX}{name}"
    if not prepared:
        _build(streams, temp, config, raw)
    if not (prepared and _named(streams, temp, group)):
        streams.unsynced().sub(temp).write_atomic("group", group.encode())
        streams.sync_tree(temp)  # every file and directory of the tree, once each (a clean one costs little)
    streams.rename(temp, name)
    if sync_parent:
        streams.sync_dir("")
    return True


def _named(streams: Disk, temp: str, group: str) -> bool:
    """Invariant 7: the prepared tree already holds `group` as its (durable) `group` file."""
    return streams.exists(f"{temp}/group") and streams.read_file(f"{temp}/group") == group.encode()


def prepare_format(streams: Disk, *, name: str, config: StreamConfig, raw: bytes,
                   group: str | None = None) -> bool:
    """Run in a worker thread while the create's meta entry is being made durable: build and sync the
    tree for `config` under the temporary name, with its `group` file when the entry's index (the
    group's name) was known as it was proposed (`group`; invariant 7). False when `<name>` exists
    (invariant 3). Never renames (invariant 5)."""
    if streams.exists(name):
        return False
    temp = f"{FORMAT_PREFIX}{name}"
    _build(streams, temp, config, raw)
    if group is not None:
        streams.unsynced().sub(temp).write_atomic("group", group.encode())
    streams.sync_tree(temp)
    return True


def _build(streams: Disk, temp: str, config: StreamConfig, raw: bytes) -> None:
    """The tree under `temp` (invariant 4), unsynced, without its `group` file."""
    if streams.exists(temp):
        streams.remove_tree(temp)  # invariant 2: an earlier format that crashed before its rename
    tree = streams.unsynced().sub(temp)
    tree.write_atomic("config.json", raw)
    if not is_memory(config):
        # Invariant 4: the first block `FileStore.open` would make, without opening and closing a store (the
        # replica's open recovers it, and `replica_store_config` is checked there); no index (`store.blockfiles`
        # invariant 5).
        make_new_store(tree.sub(STORE_DIR))
        # Invariant 8: the first segment's name is made durable with the tree. The files `Wal.open` and
        # `make_first_segment` would make, without recovering an empty directory (`wal.files` invariant 4).
        make_new_wal(tree.sub(RAFT_DIR))


def open_replica_files(disk: Disk, group: str, config: StreamConfig, raw: bytes, options: StreamOptions) -> Any:
    """Run in a worker thread: a replica's identity files (unless its directory has them) and its store,
    recovered, for `StreamReplica.open`."""
    if not disk.exists("group"):
        disk.write_atomic("config.json", raw)
        disk.write_atomic("group", group.encode())
    # The index is trusted once it checks against the block tails (what it does not cover is scanned);
    # what it vouches for is CRC-checked in the background (`run`: `verify_in_background`).
    return open_store(disk, config, replica_store_config(config, options))


class ReplicaFiles(NamedTuple):
    """What `StreamReplica.open` needs from the disk (invariant 9)."""

    store: Any  # the stream's store, recovered
    storage: Any  # `open_storage`'s answer for the group's WAL: `NodeRuntime.open_group`'s `storage`
    memory_lost: bool  # a memory stream whose group ran here before: its messages are gone


def open_files(disk: Disk, config: StreamConfig, open_store_fn: Callable[[], Any], runtime: NodeRuntime,
               group: str, assigned_index: int) -> ReplicaFiles:
    """Run in a worker thread (invariant 9): `open_store_fn()` (the store), then group `group`'s WAL under
    `disk`'s `raft/` (`assigned_index`: `group_record`'s)."""
    memory_lost = is_memory(config) and disk.exists(RAFT_DIR)
    store = open_store_fn()
    try:
        storage = open_storage(disk.sub(RAFT_DIR), group, runtime.wal_segment_bytes, runtime.group_record,
                               assigned_index)
    except BaseException:
        store.close()
        raise
    return ReplicaFiles(store, storage, memory_lost)


def format_and_open(streams: Disk, *, name: str, group: str, config: StreamConfig, raw: bytes, prepared: bool, open_store_fn: Callable[[], Any], runtime: NodeRuntime,
                    assigned_index: int) -> tuple[bool, ReplicaFiles | JsraftError]:
    """Run in a worker thread (invariant 10): `format_new_replica`, then `open_files` while the rename's
    `streams/` fsync runs on a kept thread (`runtime.persist.side_by_side`); returns once both did. The
    format (True when it formatted) and the files, or the `JsraftError` that refused them."""
    formatted = format_new_replica(streams, name=name, group=group, config=config, raw=raw, prepared=prepared,
                                   sync_parent=False)
    opened: list[ReplicaFiles | JsraftError] = []

    def open_step() -> None:
        try:
            opened.append(open_files(streams.sub(name), config, open_store_fn, runtime, group, assigned_index))
        except JsraftError as error:
            opened.append(error)

    try:
        side_by_side((open_step, functools.partial(streams.sync_dir, "")) if formatted else (open_step,))
    except BaseException:
        files = opened[0] if opened else None
        if isinstance(files, ReplicaFiles):  # opened, but the directory is not durable: nothing stays open
            files.store.close()
            files.storage[0].close()
        raise
    return formatted, opened[0]


def remove_format_leftovers(streams: Disk) -> list[str]:
    """Remove every `.format-*` directory under `streams/` (invariant 2); the names removed."""
    if not streams.is_dir(""):
        return []
    leftovers = [entry for entry in streams.listdir("") if entry.startswith(FORMAT_PREFIX)]
    for entry in leftovers:
        streams.remove_tree(entry)
    if leftovers:
        streams.sync_dir("")
    return leftovers


def remove_replica_dir(streams: Disk, name: str, group: str, group_record: Any) -> None:
    """Run in a worker thread: remove `streams/<name>` if its `group` file names `group` (`streams`
    invariant 2: otherwise it belongs to another incarnation of the name), and forget the group in the
    node's `group_record`: deleted on purpose, it starts as a new member if this node is given it again."""
    if not streams.exists(f"{name}/group") or streams.read_file(f"{name}/group").decode() != group:
        return
    streams.remove_tree(name)
    streams.sync_dir("")
    if group_record is not None:
        group_record.discard(group)
