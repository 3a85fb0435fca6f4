"""The safety checkers: every invariant the simulator checks while a seed runs, fed by node drivers.

Owns: `SafetyChecker`, the global memory of one run — which node led which term, every `(index, term)`
written to any log with its data and predecessor term, every entry any register applied, the digest at
each index, every vote granted, every acknowledged client write — and the checks over it. Drivers call the
`on_*` hooks as things happen (so a violation is caught at the step that causes it); the simulator calls
`after_step()` once per step for what is a property of the whole cluster at an instant.

Checks (names from `violation.INVARIANTS`):
  election-safety       `after_step`: at most one live leader per term, over the whole run.
  log-matching          `on_persist`, `on_restart`: an `(index, term)` always has the same type, data and
                        predecessor term, whichever node writes or recovers it. Log Matching follows by
                        induction: two logs sharing an entry share every entry before it.
  state-machine-safety  `on_apply`: the entry and the replica's digest at an index are the same on every
                        replica (a replica that cannot vouch for its state there passes no digest);
                        `on_install`: a snapshot's digest equals the digest replicas had there.
  leader-completeness   `after_step` (a new leader) and `on_ack` (a new ack): every leader of a term at or
                        above an acknowledged entry's term holds it (or a snapshot covering it) — at an
                        ack, every leader of a term at or above the one the entry was committed in (the
                        current term of the first replica that applied it, which is the committing
                        leader's or later): a deposed leader elected before an older term's entry was
                        committed need not hold it (Raft's Leader Completeness is about the terms after
                        the commit; simulator stream seed 55626: 75/6, on n2 only, was committed in
                        term 9 while n3, cut off, still led term 8 without it).
  double-vote           `on_message`: a node grants at most one candidate per term, across restarts; a
                        candidate's own RequestVote is its vote for itself in that term.
  repairing-vote        `on_message`: a vote or pre-vote granted by a repairing node (by its own flag in
                        the message or its status) — it would count data the node no longer has.
  durability            `on_restart`: a node outside the fault atlas (its disk is never corrupted) never
                        recovers as repairing nor with any finding but a torn-tail cut: crashes only lose
                        what was never fsynced, hence never acknowledged.
Term inflation lives in `availability`, end-of-run checks in `liveness`.

Invariants:
  1. Memory is bounded by what the run wrote (one record per distinct (index, term) and per applied
     index), and every check is incremental: no step rescans whole logs.
  2. Checkers never change the cluster; they only read and raise `Violation`.

Imports: stdlib, `jsraft.raft`, `jsraft.wal` (types only), siblings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jsraft.raft import Entry, EntryType, RaftNode, Ready, RequestVote, RequestVoteResponse, SnapshotMeta
from jsraft.testing.sim.violation import Violation

if TYPE_CHECKING:
    from jsraft.wal import Recovered


class SafetyChecker:
    def __init__(self) -> None:
        self.leader_of_term: dict[int, str] = {}
        # (index, term) -> (type, data, predecessor term or None when the writer did not know it)
        self.written: dict[tuple[int, int], tuple[EntryType, bytes, int | None]] = {}
        self.applied: dict[int, tuple[int, EntryType, bytes]] = {}
        self.digests: dict[int, int] = {}
        self.votes: dict[tuple[str, int], str] = {}
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.commit_term: dict[int, int] = {}  # index -> the current term of the first replica that applied it
        self._seen_leaders: dict[str, int] = {}  # node -> term we last checked it as leader in
        self.checks = 0

    # --- Hooks from node drivers --------------------------------------------------------------------

    def on_persist(self, node_id: str, node: RaftNode, rd: Ready) -> None:
        if rd.snapshot is not None:
            self._check_snapshot_identity(node_id, rd.snapshot.meta)
        log = node.log
        for entry in rd.entries + rd.repaired_entries:
            self._record_entry(node_id, entry, log.term_at(entry.index - 1))

    def on_restart(self, node_id: str, recovered: Recovered, corruptible: bool) -> None:
        damage = recovered.damage_findings()  # not a torn tail, nor a bad witness slot the log covers
        if (recovered.repairing or damage) and not corruptible:
            raise Violation("durability", f"{node_id} was never corrupted but recovered damaged: "
                                          f"{'; '.join(recovered.reasons)}")
        previous_term = recovered.snapshot[0].term if recovered.snapshot is not None else None
        previous_index = recovered.snapshot[0].index if recovered.snapshot is not None else 0
        for entry in recovered.entries:
            if entry.index in recovered.faulty:
                previous_term = None
                continue
            known = previous_term if entry.index == previous_index + 1 else None
            self._record_entry(node_id, entry, known, recovered_from_disk=True)
            previous_term, previous_index = entry.term, entry.index

    def on_message(self, node_id: str, node: RaftNode, message: object) -> None:
        if isinstance(message, RequestVote) and not message.pre_vote:
            self._vote(node_id, message.term, node_id)  # a candidate votes for itself
            return
        if not isinstance(message, RequestVoteResponse) or not message.vote_granted:
            return
        kind = "pre-vote" if message.pre_vote else "vote"
        if message.repairing or node.repairing:
            raise Violation("repairing-vote", f"{node_id} granted a {kind} to {message.to_id} in term "
                                              f"{message.term} while repairing ({node.repair_reason})")
        if message.pre_vote:
            return
        self._vote(node_id, message.term, message.to_id)

    def _vote(self, node_id: str, term: int, candidate: str) -> None:
        granted = self.votes.setdefault((node_id, term), candidate)
        if granted != candidate:
            raise Violation("double-vote", f"{node_id} voted for {granted} and then for {candidate} "
                                           f"in term {term}")

    def on_apply(self, node_id: str, entry: Entry, digest: int | None, *, current_term: int = 0) -> None:
        self.checks += 1
        mine = (entry.term, entry.type, entry.data)
        self.commit_term.setdefault(entry.index, max(current_term, entry.term))
        known = self.applied.setdefault(entry.index, mine)
        if known != mine:
            raise Violation("state-machine-safety", f"{node_id} applied {_show(entry.index, mine)}, another "
                                                    f"replica applied {_show(entry.index, known)}")
        if digest is not None:
            self.on_digest(node_id, entry.index, digest)

    def on_digest(self, node_id: str, index: int, digest: int) -> None:
        """A replica's digest at `index` (also called later for entries a replica applied late)."""
        known_digest = self.digests.setdefault(index, digest)
        if known_digest != digest:
            raise Violation("state-machine-safety", f"{node_id} replica digest at {index} is "
                                                    f"{digest:#x}, other replicas had {known_digest:#x}")

    def on_install(self, node_id: str, meta: SnapshotMeta, digest: int | None) -> None:
        if digest is None:
            return  # the replica cannot vouch for its state there (it was already further along)
        known = self.digests.setdefault(meta.index, digest)
        if known != digest:
            raise Violation("state-machine-safety", f"{node_id} installed snapshot {meta.index}/{meta.term} "
                                                    f"with digest {digest:#x}, replicas had {known:#x}")
        applied = self.applied.get(meta.index)
        if applied is not None and applied[0] != meta.term:
            raise Violation("state-machine-safety", f"{node_id} installed snapshot {meta.index}/{meta.term}, "
                                                    f"but term {applied[0]} was applied at {meta.index}")

    def on_ack(self, index: int, term: int, value: bytes, leaders: list[tuple[str, RaftNode]]) -> None:
        """A client write was acknowledged: it must be applied, and every current leader of a term at or
        above its commit must hold it (a deposed one elected before the commit need not)."""
        applied = self.applied.get(index)
        if applied is None or applied[0] != term or applied[2] != value:
            raise Violation("state-machine-safety", f"ack of {value!r} at {index}/{term}, but "
                                                    f"{_show(index, applied)} was applied there")
        if value in self.acked:
            raise Violation("acked-lost", f"{value!r} acknowledged twice ({self.acked[value]} and {index})")
        self.acked[value] = (index, term)
        committed_in = self.commit_term.get(index, term)
        for node_id, node in leaders:
            if node.current_term >= committed_in:
                self._check_holds(node_id, node, [(value, (index, term))])

    # --- Whole-cluster checks -----------------------------------------------------------------------

    def after_step(self, live: list[tuple[str, RaftNode]]) -> None:
        for node_id, node in live:
            if node.role != "leader":
                continue
            term = node.current_term
            holder = self.leader_of_term.setdefault(term, node_id)
            if holder != node_id:
                raise Violation("election-safety", f"{holder} and {node_id} both led term {term}")
            if self._seen_leaders.get(node_id) != term:
                self._seen_leaders[node_id] = term
                self._check_holds(node_id, node, list(self.acked.items()))

    def leaders(self, live: list[tuple[str, RaftNode]]) -> list[tuple[str, RaftNode]]:
        return [(node_id, node) for node_id, node in live if node.role == "leader"]

    # --- Helpers ------------------------------------------------------------------------------------

    def _record_entry(self, node_id: str, entry: Entry, previous_term: int | None, *,
                      recovered_from_disk: bool = False) -> None:
        key = (entry.index, entry.term)
        known = self.written.get(key)
        where = "recovered" if recovered_from_disk else "wrote"
        if known is None:
            self.written[key] = (entry.type, entry.data, previous_term)
            return
        if known[0] != entry.type or known[1] != entry.data:
            raise Violation("log-matching", f"{node_id} {where} {entry.index}/{entry.term} = "
                                            f"{entry.data[:40]!r}, elsewhere it is {known[1][:40]!r}")
        if previous_term is not None and known[2] is not None and previous_term != known[2]:
            raise Violation("log-matching", f"{node_id} {where} {entry.index}/{entry.term} after term "
                                            f"{previous_term}, elsewhere it follows term {known[2]}")
        if known[2] is None and previous_term is not None:
            self.written[key] = (known[0], known[1], previous_term)

    def _check_snapshot_identity(self, node_id: str, meta: SnapshotMeta) -> None:
        applied = self.applied.get(meta.index)
        if applied is not None and applied[0] != meta.term:
            raise Violation("log-matching", f"{node_id} received snapshot {meta.index}/{meta.term}, but term "
                                            f"{applied[0]} was applied at {meta.index}")

    def _check_holds(self, node_id: str, node: RaftNode, acked: list[tuple[bytes, tuple[int, int]]]) -> None:
        log = node.log
        for value, (index, term) in acked:
            if node.current_term < term or index <= log.snapshot_index:
                continue  # an older leader need not hold it; a snapshot covers it (digests checked)
            held = log.term_at(index) == term and log.entry_at(index).data == value
            if not held:
                raise Violation("leader-completeness", f"{node_id} leads term {node.current_term} without "
                                                       f"acknowledged {value!r} at {index}/{term} (log ends "
                                                       f"at {log.last_index})")


def _show(index: int, applied: tuple[int, EntryType, bytes] | None) -> str:
    if applied is None:
        return f"nothing at {index}"
    term, entry_type, data = applied
    return f"{index}/{term} {entry_type.name.lower()} {data[:40]!r}"
