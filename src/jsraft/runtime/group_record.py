"""The node's record of every Raft group its storage has started (layer L4).

Owns: `<store_dir>/groups.rec`, the durable list of group names (the meta group and every stream group)
this storage has opened as a member, and the rule that turns it into `open_group`'s decision between
"bootstrap (or start blank)" and "a member that lost its storage".

Why: a group's own marker (`group.json`, runtime `persist`) lives inside the group's directory. When an
operator's slip or a disk fault removes `streams/<S>/` (or only `raft/`, or `meta/`), the marker goes with
it, the WAL comes back empty, and the replica used to bootstrap a brand-new log at term 1 that could vote
for a stale candidate — which then led without acknowledged messages (issue 14, hole 1). This record lives
outside every group directory, so losing a group's directory no longer looks like "never started".

Decisions (`lost_storage`):
  1. The group is on the record: this storage started it, so a missing WAL/marker is lost storage.
  2. The record was lost (missing while the node's `node.json` existed, or damaged): a group that was
     assigned at or before `unknown_through_meta_index` — the meta log's last index when the record was
     found lost — is treated as lost storage, since nothing proves this storage never started it; the
     meta group too. That floor is written into the new record, so the rule survives a restart.
  3. Otherwise the group was never started here: it may bootstrap (or start blank).

When a group goes on the record (`on_open`, `started`) — "started" means "a peer may have counted on it":
  4. A group that opens with durable state of its own (its marker, or a WAL that holds anything) is
     recorded at once, before the open returns: its log may already back a vote or an acknowledgement.
  5. A group that opens with nothing durable (an empty WAL, no marker) and is not lost (1, 2) is NOT
     recorded at open: it is recorded by `started`, which the Ready cycle calls after the group's first
     durable cycle (its first fsync of entries or hard state, `replica.persist.sync_work`) and before any
     message of that cycle leaves. Every vote and every acknowledgement needs such a cycle first (Raft's
     persist-before-send, DESIGN §4), and the messages a member sends before it (a refused append, a
     pre-vote answer) back nothing. So a power cut before the first durable cycle, with or without the
     group's directory, leaves a group that no peer ever counted on: it bootstraps again, a fresh member
     of its group (issue 14: the 2-of-3 halt after a power cut right after a create, sim seed 424). A
     group that DID complete a durable cycle and then lost its directory is on the record: never a fresh
     bootstrap (issue 14, hole 1).

The vote-term ceiling (issue 14, hole 1's fence for a lost group directory). A group's vote fence lives in
its hard state, inside the group's directory; when the whole directory is lost, nothing there says which
terms this member may have voted in, and a fence of "restored term + 1 = 1" let a node that voted for X in
term T be repaired by an old leader of a lower term, or vote again in T (simulator `lost-vote` seeds 134,
137). So the record also keeps, per group, a ceiling above every term a durable hard state of that group
has held (`cover_term`):
  6. Before any message leaves a cycle whose durable hard state has a term (or fence) above the group's
     ceiling, the record is rewritten with ceiling = that term + `VOTE_CEILING_STEP` (the step amortises
     the record's fsyncs over elections). `replica.persist.sync_work` calls it after the WAL's fsync,
     before the cycle sends, in both drivers; with the group's first durable cycle it rides on `started`
     (one write). A crash between the WAL's fsync and the record's write sent nothing from that term, and
     `open_storage` covers the recovered hard state's term before the group opens, so a restart (or a
     record of version 1, which has no ceilings) is covered before it sends anything.
  7. A group on the record that lost its storage restores fenced through its ceiling (`vote_ceiling`,
     `replica.restore.restored_state`) and, by `raft.vote_fence` invariant 4, in that term.
  8. Version 1 records (before the ceiling) are read: no ceiling for a group lost before its first cycle
     on the new version; the record itself lost (decision 2) has no ceilings either — two independent
     losses. Such a group restores "term unknown" (`replica.restore` decision 3): before it acknowledges,
     votes or campaigns, it learns the term from every voter of the group and fences one above the highest
     (`raft.term_query`). The cost is liveness: it waits while a voter does not answer (the group runs on
     the others). The ceiling keeps that wait off the common case of a lost directory alone.

Invariants:
  1. A group is on the record, durably, before it sends any message after its first durable cycle
     (decisions 4, 5), so before any vote or acknowledgement: the call that records it returns only after
     the change's fsync and its mark's (invariant 2).
  2. The file is a journal (format 2 of the file type; DESIGN §3's CRC'd records): the file header, two
     mark slots, then one record of the whole state (its `snapshot`) and one record per change since, in
     order. A change is appended and fsynced, then a mark (`Kind.GROUP_RECORD_MARK`: a sequence number and
     the journal's end) is written to the slot its sequence picks and fsynced: the mark vouches for every
     byte before that end. So a change costs two fsyncs and a few dozen bytes whatever the number of
     groups (the whole record rewritten at each change cost O(groups): 14% of the node's trio thread
     during creates at 3,000 streams, `bench/README.md` "Create cost as streams accumulate").
  3. Read back: the newest valid mark's end is where the durable journal ends. A record that does not
     verify before that end (a flipped bit, a cut tail), no valid mark at all, or a bad file header is
     damage: the record is never trusted and never silently replaced by an empty one — it counts as lost
     (decision 2). A record that does not verify after that end is a change whose append a crash tore: its
     call never returned, so its group sent nothing on it, and it is dropped (the next append cuts the
     file there). A record after that end that does verify (a crash between a change's fsync and its
     mark's) is kept: it can only name more groups, or higher ceilings, than the marked state — the safe
     side — or forget one whose data was already deleted on purpose (`discard`).
  4. When the changes since the snapshot outgrow `max(COMPACT_BYTES_MIN, snapshot size)`, the next change
     rewrites the file whole instead (write-temp, fsync, rename, fsync directory): a new snapshot with
     that change, its first mark and no changes — amortised O(1) bytes per change. A record read from an
     older build (format 1: one record of the whole state), a lost record and a fresh node's are rewritten
     this way at their first change, and after any write that failed, since the journal's end is then not
     known.
  5. Names leave the record only when their group's data is deleted on purpose (`discard`).
  6. Safe to call from several threads (`open_storage` runs on a worker thread per opening group, and
     `started` on the cycle's worker thread): one lock serialises every change and its writes.

Imports: stdlib, L0, L1 (`codec`, `disk`), L2 (`wal.format` headers).
Reference: DESIGN §3 (CRC'd records; file replacement), §4 (a witness made durable after what it vouches for).
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from jsraft.codec.records import FILE_HEADER_BYTES, HEADER_BYTES, Kind, encode_record, read_record
from jsraft.disk.base import Disk
from jsraft.errors import BadFileFormat, CorruptRecord
from jsraft.wal.format import GROUP_RECORD_FILE_TYPE, file_header, file_header_version

log = logging.getLogger(__name__)

GROUP_RECORD_FILE = "groups.rec"
_VERSION = 3  # the snapshot body: 2 added vote-term ceilings (decision 6), 3 is the journal's
_VERSIONS_READ = (1, 2, 3)
VOTE_CEILING_STEP = 8
MARK_SLOT_BYTES = 32  # a mark record (header only, 25 bytes) padded
JOURNAL_START = FILE_HEADER_BYTES + 2 * MARK_SLOT_BYTES  # where the snapshot record starts (invariant 2)
COMPACT_BYTES_MIN = 64 << 10  # invariant 4
_SNAPSHOT, _CHANGE = 0, 1  # `ident_b` of a journal's GROUP_RECORD records

__all__ = ["GROUP_RECORD_FILE", "GROUP_RECORD_FILE_TYPE", "GroupRecord", "VOTE_CEILING_STEP"]


class _Journal:
    """Where the file's journal stands (invariants 2–4): its end, its newest mark, the sizes that pace the
    next rewrite, and whether bytes after the end (a torn append) are still to be cut."""

    __slots__ = ("end", "mark", "snapshot_bytes", "changes_bytes", "cut")

    def __init__(self, end: int, mark: int, snapshot_bytes: int, changes_bytes: int = 0, cut: bool = False) -> None:
        self.end, self.mark, self.snapshot_bytes, self.changes_bytes, self.cut = (
            end, mark, snapshot_bytes, changes_bytes, cut)

    def outgrown(self) -> bool:
        return self.changes_bytes > max(COMPACT_BYTES_MIN, self.snapshot_bytes)


def _mark(sequence: int, end: int) -> bytes:
    return encode_record(Kind.GROUP_RECORD_MARK, sequence, end).ljust(MARK_SLOT_BYTES, b"\0")


def _slot(sequence: int) -> int:
    return FILE_HEADER_BYTES + (sequence % 2) * MARK_SLOT_BYTES


class GroupRecord:
    """The durable set of groups this storage started (invariant 6: thread-safe)."""

    def __init__(self, disk: Disk, names: set[str], *, unknown_through_meta_index: int | None,
                 generation: int, ceilings: dict[str, int] | None = None, journal: _Journal | None = None) -> None:
        self._disk = disk
        self._names = names
        self._ceilings: dict[str, int] = dict(ceilings or {})
        self.unknown_through_meta_index = unknown_through_meta_index
        self._generation = generation
        self._journal = journal  # None: the next change rewrites the file whole (invariant 4)
        self._lock = threading.Lock()

    @classmethod
    def open(cls, disk: Disk, *, node_existed: bool) -> GroupRecord:
        """Read the record of the node whose root is `disk`. `node_existed`: its `node.json` was there
        before this start (a freshly formatted node has started nothing, so no record is no loss)."""
        if not disk.exists(GROUP_RECORD_FILE):
            if node_existed:
                log.warning("%s is missing although this node has run before: every group it may have "
                            "started is treated as having lost its storage (repairs from peers)", GROUP_RECORD_FILE)
                return cls._lost(disk)
            record = cls(disk, set(), unknown_through_meta_index=None, generation=0)
            with record._lock:
                record._rewrite()
            return record
        data = disk.read_file(GROUP_RECORD_FILE)
        try:
            return cls._parse(disk, data)
        except (CorruptRecord, ValueError, KeyError, TypeError) as error:
            log.warning("%s is damaged (%s): every group it may have listed is treated as having lost its "
                        "storage (repairs from peers)", GROUP_RECORD_FILE, error)
            return cls._lost(disk)

    @classmethod
    def _lost(cls, disk: Disk) -> GroupRecord:
        # The floor is not known before the meta group opened (`set_lost_floor`); until then 2**63 keeps
        # every group's decision on the safe side. Not written yet: the floor comes first.
        return cls(disk, set(), unknown_through_meta_index=2**63, generation=0)

    @classmethod
    def _parse(cls, disk: Disk, data: bytes) -> GroupRecord:
        version = file_header_version(data, GROUP_RECORD_FILE_TYPE)  # a newer format raises BadFileFormat
        if version == 0:
            raise CorruptRecord("bad file header")
        if version == 1:  # an older build's: one record of the whole state (invariant 4: rewritten at once)
            view = read_record(data, FILE_HEADER_BYTES)
            if view.kind != Kind.GROUP_RECORD or view.offset + view.length != len(data):
                raise CorruptRecord("not exactly one group record")
            record = cls(disk, set(), unknown_through_meta_index=None, generation=view.ident_a)
            record._restore(_body_of(data, view))
            return record
        marks = []
        for sequence in range(2):
            try:
                view = read_record(data, _slot(sequence), _slot(sequence) + MARK_SLOT_BYTES)
            except CorruptRecord:
                continue
            if view.kind == Kind.GROUP_RECORD_MARK:
                marks.append((view.ident_a, view.ident_b))
        if not marks:
            raise CorruptRecord("no valid mark")
        mark, marked_end = max(marks)
        record = cls(disk, set(), unknown_through_meta_index=None, generation=0)
        offset, snapshot_bytes = JOURNAL_START, 0
        while offset < len(data):  # invariant 3
            try:
                view = read_record(data, offset)
            except CorruptRecord:
                break
            if view.kind != Kind.GROUP_RECORD or view.ident_b != (_CHANGE if snapshot_bytes else _SNAPSHOT):
                raise CorruptRecord(f"unexpected record at offset {offset}")
            body = _body_of(data, view)
            if snapshot_bytes:
                record._apply(body)
            else:
                record._restore(body)
                snapshot_bytes = view.length
            record._generation = view.ident_a
            offset += view.length
        if not snapshot_bytes or offset < marked_end:
            raise CorruptRecord(f"the journal verifies to offset {offset}, its mark vouches for {marked_end}")
        record._journal = _Journal(offset, mark, snapshot_bytes, offset - JOURNAL_START - snapshot_bytes,
                                   cut=offset < len(data))
        return record

    def _restore(self, body: dict[str, Any]) -> None:
        """A snapshot body (or a format-1 record's)."""
        if body.get("version") not in _VERSIONS_READ:
            raise BadFileFormat(f"{GROUP_RECORD_FILE}: unknown version {body.get('version')!r}")
        floor = body["unknown_through_meta_index"]
        self.unknown_through_meta_index = None if floor is None else int(floor)
        self._names = {str(name) for name in body["groups"]}
        self._ceilings = {str(name): int(term) for name, term in body.get("vote_ceilings", {}).items()}

    def _apply(self, change: dict[str, Any]) -> None:
        """One change record's body: what `_change` wrote."""
        if "add" in change:
            self._names.add(str(change["add"]))
        if "ceiling" in change:
            name, term = change["ceiling"]
            self._ceilings[str(name)] = int(term)
        if "discard" in change:
            self._names.discard(str(change["discard"]))
            self._ceilings.pop(str(change["discard"]), None)

    # --- Writing (under the lock) ----------------------------------------------------------------------

    def _change(self, change: dict[str, Any]) -> None:
        """Make `change` (already applied in memory) durable: appended with its mark (invariant 2), or the
        whole record rewritten (invariant 4)."""
        self._generation += 1
        journal = self._journal
        if journal is None or journal.outgrown():
            self._rewrite()
            return
        self._journal = None  # until this append and its mark are durable: a failure leaves it unknown
        record = encode_record(Kind.GROUP_RECORD, self._generation, _CHANGE,
                               json.dumps(change, separators=(",", ":")).encode())
        handle = self._disk.open(GROUP_RECORD_FILE)
        try:
            if journal.cut:  # a torn append's bytes (invariant 3)
                handle.truncate(journal.end)
            handle.pwrite(journal.end, record)
            handle.sync()
            end, mark = journal.end + len(record), journal.mark + 1
            handle.pwrite(_slot(mark), _mark(mark, end))
            handle.sync()
        finally:
            handle.close()
        self._journal = _Journal(end, mark, journal.snapshot_bytes, journal.changes_bytes + len(record))

    def _rewrite(self) -> None:
        """Invariant 4: the file whole — header, the first mark, the snapshot — replacing the old one."""
        self._journal = None
        body = json.dumps({"version": _VERSION, "groups": sorted(self._names),
                           "unknown_through_meta_index": self.unknown_through_meta_index,
                           "vote_ceilings": self._ceilings}, sort_keys=True).encode()
        snapshot = encode_record(Kind.GROUP_RECORD, self._generation, _SNAPSHOT, body)
        end, mark = JOURNAL_START + len(snapshot), 1
        slots = bytearray(2 * MARK_SLOT_BYTES)
        at = _slot(mark) - FILE_HEADER_BYTES
        slots[at: at + MARK_SLOT_BYTES] = _mark(mark, end)
        self._disk.write_atomic(GROUP_RECORD_FILE, file_header(GROUP_RECORD_FILE_TYPE) + bytes(slots) + snapshot)
        self._journal = _Journal(end, mark, len(snapshot))

    # --- Decisions and changes -------------------------------------------------------------------------

    @property
    def lost(self) -> bool:
        return self.unknown_through_meta_index is not None

    def set_lost_floor(self, meta_last_index: int) -> None:
        """After a lost record: the meta log's last index at this start is the floor of decision 2."""
        with self._lock:
            if self.unknown_through_meta_index == 2**63:
                self.unknown_through_meta_index = meta_last_index
                self._generation += 1
                self._rewrite()

    def recorded(self, name: str) -> bool:
        return name in self._names

    def lost_storage(self, name: str, *, assigned_index: int | None) -> bool:
        """True when group `name`, found with no WAL and no marker, must open as a member that lost its
        storage (decisions 1, 2). `assigned_index`: the meta index that assigned it here (None for the
        meta group itself, which every node that ran has started)."""
        if name in self._names:
            return True
        if self.unknown_through_meta_index is None:
            return False
        return assigned_index is None or assigned_index <= self.unknown_through_meta_index

    def on_open(self, name: str, *, formatted: bool, empty: bool, assigned_index: int | None) -> bool:
        """`open_group`'s `formatted` for group `name` whose marker is there (`formatted`) or not, and
        whose WAL recovered nothing (`empty`, `replica.restore.recovered_empty`): True also when this
        storage started it (or cannot prove it did not) — restore decision 3, a member that lost its
        storage, never a fresh bootstrap. Records the group now when it has durable state or is lost
        (decision 4); a group with nothing durable is recorded by `started` (decision 5)."""
        lost = not formatted and empty and self.lost_storage(name, assigned_index=assigned_index)
        if lost:
            log.warning("group %s: its group marker is gone although this storage started it: opening as a "
                        "member that lost its storage (repairs from peers, votes only after)", name)
            formatted = True
        if formatted or not empty:
            self.add(name)
        return formatted

    def started(self, name: str, term: int = 0) -> None:
        """Group `name` completed its first durable cycle, whose hard state holds `term`, and has sent
        nothing since: record it, and cover `term` (decision 6), in one change before it does (decision 5,
        invariant 1). Called on the cycle's worker thread."""
        with self._lock:
            change: dict[str, Any] = {}
            if name not in self._names:
                self._names.add(name)
                change["add"] = name
            ceiling = self._raise_ceiling(name, term)
            if ceiling is not None:
                change["ceiling"] = [name, ceiling]
            if change:
                self._change(change)

    def vote_ceiling(self, name: str) -> int:
        """Group `name`'s ceiling: above every term its durable hard states held (0: none recorded)."""
        with self._lock:
            return self._ceilings.get(name, 0)

    def cover_term(self, name: str, term: int) -> None:
        """Decision 6: a hard state of group `name` with `term` (or fence) is durable and its cycle has not
        sent yet; raise the ceiling durably when `term` is above it. Cheap when it is not."""
        with self._lock:
            ceiling = self._raise_ceiling(name, term)
            if ceiling is not None:
                self._change({"ceiling": [name, ceiling]})

    def _raise_ceiling(self, name: str, term: int) -> int | None:
        """The new ceiling when `term` passes the current one (set in memory), else None."""
        if term <= self._ceilings.get(name, 0):
            return None
        self._ceilings[name] = term + VOTE_CEILING_STEP
        return term + VOTE_CEILING_STEP

    def add(self, name: str) -> None:
        """Record `name` durably (invariant 1); a no-op when it is there."""
        with self._lock:
            if name not in self._names:
                self._names.add(name)
                self._change({"add": name})

    def discard(self, name: str) -> None:
        """Forget `name` after its group's data was deleted on purpose (invariant 5)."""
        with self._lock:
            if name in self._names or name in self._ceilings:
                self._names.discard(name)
                self._ceilings.pop(name, None)
                self._change({"discard": name})

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._names)


def _body_of(data: bytes, view: Any) -> dict[str, Any]:
    """A GROUP_RECORD record's JSON body, which must be an object."""
    body = json.loads(bytes(data[view.offset + HEADER_BYTES: view.offset + view.length]))
    if not isinstance(body, dict):
        raise CorruptRecord("a group record body that is not a JSON object")
    return body
