"""`MetaState`: the committed meta state every replica holds, and the read-only questions asked of it.

Owns: the peers placement may use, the stream assignments, each stream's consumer assignments, the
storage UUIDs of servers (the last one seen of each member; the one each removed server had when it was
removed, "" if never seen), and the index of the last applied entry. Only `apply` (module `apply`) and
`snapshot.decode_state` change it.

Invariants:
  1. `consumers` has a key for exactly the streams in `streams`.
  2. Stream names are unique, and no two streams' guarded subjects overlap (offline ones included):
     apply refuses an entry that would break this, whatever the leader checked.
  3. Queries return values sorted by name, so callers (API listings, the digest) are deterministic.
  4. `storage_uuids` and `removed_servers` have no key in common: a server is either a member whose disk
     was seen, or removed (until `SERVER_READMIT` with another UUID).
  5. `streams.by_head` maps each first token of a stream's guarded subjects to the streams that have it,
     exactly (kept by `StreamTable` on every assignment and delete), so the subject-overlap check of a
     create or update (`claims_meeting`) visits only the streams that share a first token with it or
     start with a wildcard, not every stream: with thousands of streams the check made at the proposal
     and again at the apply was a scan per create.
  6. `streams.journal` names every stream assigned, replaced or deleted, in order, since position
     `journal_start` (the oldest are dropped beyond `JOURNAL_KEPT`: `changed_since` then answers None,
     "look at everything"). What is kept beside the state per stream — the client port's subscriptions
     for stream subjects and direct gets — is brought up to date from it after each apply
     (`MetaStateMachine.stream_changes`), instead of being rebuilt from every stream: with hundreds of
     streams that rebuild was the largest O(streams) cost of each create.

Imports: L0, L1, `meta.assignment`, `meta.placement`. Reference: DESIGN.md §5, §9.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

from jsraft.errors import StreamNotFound, invariant
from jsraft.jsapi import API_LEVEL
from jsraft.meta.assignment import ConsumerAssignment, StreamAssignment
from jsraft.meta.errors import ConsumerNotFound
from jsraft.meta.placement import PeerInfo, count_assets


_WILD_HEADS = frozenset(("*", ">"))
# Journal entries `StreamTable` keeps (invariant 6): a reader further behind looks at every stream.
JOURNAL_KEPT = 4096


def _heads(subjects: Iterable[str]) -> set[str]:
    return {subject.partition(".")[0] for subject in subjects}


class StreamTable(dict):
    """`MetaState.streams`: a dict of assignments by name that also keeps which streams have a subject
    with each first token (`by_head`, invariant 5). Every way of changing it goes through the methods
    below; the others a dict has are refused."""

    def __init__(self) -> None:
        super().__init__()
        self.by_head: dict[str, set[str]] = {}
        self.journal: list[str] = []  # invariant 6: the names changed, oldest first
        self.journal_start = 0  # the position of journal[0]: how many changes were dropped before it

    def __setitem__(self, name: str, assignment: StreamAssignment) -> None:
        if name in self:
            self._forget(name, self[name])
        super().__setitem__(name, assignment)
        for head in _heads(assignment.subjects):
            self.by_head.setdefault(head, set()).add(name)
        self._note(name)

    def __delitem__(self, name: str) -> None:
        self._forget(name, self[name])
        super().__delitem__(name)
        self._note(name)

    @property
    def position(self) -> int:
        """The number of changes made to this table so far (`changed_since`'s argument)."""
        return self.journal_start + len(self.journal)

    def changed_since(self, position: int) -> set[str] | None:
        """The names assigned, replaced or deleted since `position` (an earlier `self.position`); None
        when the journal no longer reaches back that far (invariant 6)."""
        if position < self.journal_start:
            return None
        return set(self.journal[position - self.journal_start:])

    def _note(self, name: str) -> None:
        journal = self.journal
        journal.append(name)
        if len(journal) > 2 * JOURNAL_KEPT:
            dropped = len(journal) - JOURNAL_KEPT
            del journal[:dropped]
            self.journal_start += dropped

    def _forget(self, name: str, assignment: StreamAssignment) -> None:
        for head in _heads(assignment.subjects):
            names = self.by_head[head]
            names.discard(name)
            if not names:
                del self.by_head[head]

    def _refused(self, *args: object, **kwargs: object) -> None:
        raise TypeError("StreamTable changes only by item assignment and del (invariant 5)")

    pop = popitem = clear = update = setdefault = __ior__ = _refused  # type: ignore[assignment]


class MetaState:
    def __init__(self, api_level: int = API_LEVEL) -> None:
        self.api_level = api_level  # this node's level: decides which loaded assets are offline
        self.applied_index = 0
        self.peers: dict[str, PeerInfo] = {}
        self.streams: StreamTable = StreamTable()
        self.consumers: dict[str, dict[str, ConsumerAssignment]] = {}
        self.storage_uuids: dict[str, str] = {}  # member -> storage UUID last seen (PEER_SEEN)
        self.removed_servers: dict[str, str] = {}  # removed server -> its storage UUID then ("" unknown)

    def check(self) -> None:
        """Invariant 1 (cheap; run after restore and in tests)."""
        invariant(set(self.consumers) == set(self.streams), "every stream has a consumer map, and only they")
        invariant(not set(self.storage_uuids) & set(self.removed_servers), "a server is seen or removed (4)")

    # --- Streams -------------------------------------------------------------------------------

    def stream(self, name: str) -> StreamAssignment:
        """The assignment, offline ones included; `StreamNotFound` (10059) if there is none."""
        assignment = self.streams.get(name)
        if assignment is None:
            raise StreamNotFound()
        return assignment

    def all_streams(self) -> list[StreamAssignment]:
        return [self.streams[name] for name in sorted(self.streams)]

    def names(self) -> list[str]:
        """Every assigned stream name, offline ones included (they are visible in `NAMES`)."""
        return sorted(self.streams)

    def has_stream(self, name: str) -> bool:
        """Whether `name` is assigned (offline included): `name in names()` without sorting every name."""
        return name in self.streams

    def subject_claims(self) -> Iterator[tuple[str, tuple[str, ...]]]:
        """`(stream, guarded subjects)` for every stream, offline ones included (invariant 2)."""
        for name in sorted(self.streams):
            yield name, self.streams[name].subjects

    def claims_meeting(self, subjects: Iterable[str]) -> Iterator[tuple[str, tuple[str, ...]]]:
        """`subject_claims` limited to the streams that may overlap `subjects` by first token (a subject
        of theirs whose first token is one of ours, `*` or `>`; every stream if one of ours starts with a
        wildcard), in name order: what `rules.find_overlap` would not pass over (invariant 5)."""
        heads = _heads(subjects)
        if heads & _WILD_HEADS:
            yield from self.subject_claims()
            return
        by_head = self.streams.by_head
        names: set[str] = set()
        for head in heads | _WILD_HEADS:
            names |= by_head.get(head, set())
        for name in sorted(names):
            yield name, self.streams[name].subjects

    def offline(self) -> dict[str, str]:
        """Stream name -> why it is offline. An offline consumer stops its whole stream (DESIGN §9)."""
        reasons: dict[str, str] = {}
        for name in sorted(self.streams):
            assignment = self.streams[name]
            if assignment.offline_reason is not None:
                reasons[name] = assignment.offline_reason
                continue
            for consumer in sorted(self.consumers[name]):
                reason = self.consumers[name][consumer].offline_reason
                if reason is not None:
                    reasons[name] = f"consumer {consumer!r} is offline: {reason}"
                    break
        return reasons

    def missing(self) -> list[str]:
        """The names `STREAM.LIST` reports under `missing`: assigned but not started here."""
        return sorted(self.offline())

    def assignments_for(self, node_id: str) -> list[StreamAssignment]:
        """The streams whose group `node_id` is a member of (the groups that node must run)."""
        return [a for a in self.all_streams() if node_id in a.peers]

    def assets(self) -> Counter[str]:
        return count_assets(a.peers for a in self.streams.values())

    # --- Consumers -----------------------------------------------------------------------------

    def consumer(self, stream: str, name: str) -> ConsumerAssignment:
        consumer = self.consumers.get(stream, {}).get(name)
        if consumer is None:
            if stream not in self.streams:
                raise StreamNotFound()
            raise ConsumerNotFound()
        return consumer

    def stream_consumers(self, stream: str) -> list[ConsumerAssignment]:
        self.stream(stream)
        return [self.consumers[stream][name] for name in sorted(self.consumers[stream])]
