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
  1. A group is on the record, durably (write-temp, fsync, rename, fsync directory), before it sends any
     message after its first durable cycle (decisions 4, 5), so before any vote or acknowledgement.
  2. The file is `FILE_HEADER` + one CRC'd record (DESIGN §3); a file that does not verify is never
     trusted and never silently replaced by an empty record: it counts as lost (decision 2).
  3. Names leave the record only when their group's data is deleted on purpose (`discard`).
  4. Safe to call from several threads (`open_storage` runs on a worker thread per opening group, and
     `started` on the cycle's worker thread): one lock serialises every change and its write.
  5. The record's body is the JSON `json.dumps(..., sort_keys=True)` makes of it, byte for byte; it is
     written from the names' and ceilings' JSON kept sorted as they change (`_SortedJson`), not encoded
     and sorted whole on every write (O(groups) Python work on each new stream's first cycle).

Imports: stdlib, L0, L1 (`codec`, `disk`), L2 (`wal.format` headers).
"""

from __future__ import annotations

import bisect
import json
import logging
import threading

from jsraft.codec.records import FILE_HEADER_BYTES, HEADER_BYTES, Kind, encode_record, read_record
from jsraft.disk.base import Disk
from jsraft.errors import BadFileFormat, CorruptRecord
from jsraft.wal.format import file_header, file_header_ok

log = logging.getLogger(__name__)

GROUP_RECORD_FILE = "groups.rec"
GROUP_RECORD_FILE_TYPE = 24
_VERSION = 2  # 2: vote-term ceilings (decision 6); version 1 is still read (decision 8)
_VERSIONS_READ = (1, 2)
VOTE_CEILING_STEP = 8


class GroupRecord:
    """The durable set of groups this storage started (invariant 4: thread-safe)."""

    def __init__(self, disk: Disk, names: set[str], *, unknown_through_meta_index: int | None,
                 generation: int, ceilings: dict[str, int] | None = None) -> None:
        self._disk = disk
        self._names = names
        self._ceilings: dict[str, int] = dict(ceilings or {})
        # The record's two lists as JSON text, kept sorted as they change: a write joins them (invariant 5).
        self._groups_json = _SortedJson({name: json.dumps(name) for name in names})
        self._ceilings_json = _SortedJson({name: f"{json.dumps(name)}: {term}" for name, term in self._ceilings.items()})
        self.unknown_through_meta_index = unknown_through_meta_index
        self._generation = generation
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
            record._write()
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
        if not file_header_ok(data, GROUP_RECORD_FILE_TYPE):
            raise CorruptRecord("bad file header")
        view = read_record(data, FILE_HEADER_BYTES)
        if view.kind != Kind.GROUP_RECORD or view.offset + view.length != len(data):
            raise CorruptRecord("not exactly one group record")
        body = json.loads(bytes(data[view.offset + HEADER_BYTES: view.offset + view.length]))
        if body.get("version") not in _VERSIONS_READ:
            raise BadFileFormat(f"{GROUP_RECORD_FILE}: unknown version {body.get('version')!r}")
        floor = body["unknown_through_meta_index"]
        ceilings = {str(name): int(term) for name, term in body.get("vote_ceilings", {}).items()}
        return cls(disk, {str(name) for name in body["groups"]},
                   unknown_through_meta_index=None if floor is None else int(floor), generation=view.ident_a,
                   ceilings=ceilings)

    def _write(self) -> None:
        self._generation += 1
        body = _body(self._groups_json.joined(), self.unknown_through_meta_index, self._ceilings_json.joined())
        self._disk.write_atomic(GROUP_RECORD_FILE, file_header(GROUP_RECORD_FILE_TYPE)
                                + encode_record(Kind.GROUP_RECORD, self._generation, 0, body.encode()))

    @property
    def lost(self) -> bool:
        return self.unknown_through_meta_index is not None

    def set_lost_floor(self, meta_last_index: int) -> None:
        """After a lost record: the meta log's last index at this start is the floor of decision 2."""
        with self._lock:
            if self.unknown_through_meta_index == 2**63:
                self.unknown_through_meta_index = meta_last_index
                self._write()

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
        nothing since: record it, and cover `term` (decision 6), in one write before it does (decision 5,
        invariant 1). Called on the cycle's worker thread."""
        with self._lock:
            changed = self._raise_ceiling(name, term)
            if name not in self._names:
                self._add_name(name)
                changed = True
            if changed:
                self._write()

    def vote_ceiling(self, name: str) -> int:
        """Group `name`'s ceiling: above every term its durable hard states held (0: none recorded)."""
        with self._lock:
            return self._ceilings.get(name, 0)

    def cover_term(self, name: str, term: int) -> None:
        """Decision 6: a hard state of group `name` with `term` (or fence) is durable and its cycle has not
        sent yet; raise the ceiling durably when `term` is above it. Cheap when it is not."""
        with self._lock:
            if self._raise_ceiling(name, term):
                self._write()

    def _raise_ceiling(self, name: str, term: int) -> bool:
        if term <= self._ceilings.get(name, 0):
            return False
        self._ceilings[name] = term + VOTE_CEILING_STEP
        self._ceilings_json.put(name, f"{json.dumps(name)}: {term + VOTE_CEILING_STEP}")
        return True

    def _add_name(self, name: str) -> None:
        self._names.add(name)
        self._groups_json.put(name, json.dumps(name))

    def add(self, name: str) -> None:
        """Record `name` durably (invariant 1); a no-op when it is there."""
        with self._lock:
            if name not in self._names:
                self._add_name(name)
                self._write()

    def discard(self, name: str) -> None:
        """Forget `name` after its group's data was deleted on purpose (invariant 3)."""
        with self._lock:
            if name in self._names or name in self._ceilings:
                self._names.discard(name)
                self._ceilings.pop(name, None)
                self._groups_json.discard(name)
                self._ceilings_json.discard(name)
                self._write()

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._names)


def _body(groups: str, floor: int | None, ceilings: str) -> str:
    """The record's JSON: the bytes `json.dumps({"version", "groups": sorted names, "unknown_through_meta_index",
    "vote_ceilings"}, sort_keys=True)` makes (invariant 5), from the two lists' joined text."""
    return (f'{{"groups": [{groups}], "unknown_through_meta_index": {json.dumps(floor)}, '
            f'"version": {_VERSION}, "vote_ceilings": {{{ceilings}}}}}')


class _SortedJson:
    """JSON fragments (a list item, or an object's `"key": value`) by key, joined in key order — the order
    `sort_keys` gives — without sorting or encoding every key again on each write."""

    def __init__(self, fragments: dict[str, str]) -> None:
        self._keys = sorted(fragments)
        self._fragments = fragments

    def put(self, key: str, fragment: str) -> None:
        if key not in self._fragments:
            bisect.insort(self._keys, key)
        self._fragments[key] = fragment

    def discard(self, key: str) -> None:
        if self._fragments.pop(key, None) is not None:
            del self._keys[bisect.bisect_left(self._keys, key)]

    def joined(self) -> str:
        return ", ".join(map(self._fragments.__getitem__, self._keys))
