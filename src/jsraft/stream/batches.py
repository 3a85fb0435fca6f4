"""Atomic batch publish (ADR-50 at nats-server 2.12, JetStream API level 2): stage, then commit whole (layer L3).

Owns: the checks a batch message passes on arrival (`BatchStager.take`), in nats-server's order
(`processJetStreamBatchMsg`), and the staging of a stream leader's open batches until their commit.

A client publishes a batch's messages with `Nats-Batch-Id: <id>` and `Nats-Batch-Sequence: 1, 2, ...`; the
last also carries `Nats-Batch-Commit: 1`. Each message before the commit is staged on the stream leader and
answered with an empty message; the commit runs every staged message, then the commit's own, through the
leader's ordinary checks as one decision (`StreamLeader` counts the earlier ones in flight for the later),
and either all of them go into **one** MSGS entry — stored on every replica together, with consecutive
sequences, or not at all — answered with a PubAck carrying `"batch"` and `"count"`, or none of them is,
answered with the first refusal.

Invariants:
  1. A batch is all or nothing: its messages are proposed in one MSGS entry (one Raft entry applies
     whole), only after every one passed the checks in order; a refusal leaves no sequence used.
  2. Staging is the leader's, in memory, bounded: at most `PER_STREAM_MAX` open batches of at most
     `SIZE_MAX` messages and `BYTES_MAX` bytes each; a batch idle for `TIMEOUT_NS` is abandoned. A leader
     change abandons every open batch (the new leader does not know it: its next message is answered
     10176 "incomplete"), as do a gap in the sequence and a refused commit.
  3. Within a batch, a `Nats-Msg-Id` seen before (in the batch, in flight, or in the stream's duplicate
     window) refuses the batch (10201), and `Nats-Expected-Last-Msg-Id` is not supported (10177), as in
     nats-server 2.12.1 and later; only the first message may expect a last sequence, and none may expect
     the last sequence of a subject the batch wrote before it (10164, `expected_conflict`).
  4. A node bounds the open batches of all its stream leaders together (`NodeBudget`): at most `TOTAL_MAX`
     (nats-server's per-server limit) holding at most `NODE_BYTES_MAX` staged bytes; a batch that would
     pass either is refused 10176 "incomplete", as nats-server refuses one past its server limit. The
     budget counts the stagers' own state (a weak set of stagers, idle batches abandoned as it counts),
     so a dropped leadership can hold its share for at most `TIMEOUT_NS`.

Imports: L0 (`errors`), stdlib, `stream.headers`, `stream.outcomes`. No clock (`now_ns` is an argument).
Reference: ADR-50; nats-server v2.12 `server/stream.go` (`processJetStreamBatchMsg`),
`server/jetstream_batching.go`.
"""

from __future__ import annotations

import weakref

from jsraft.stream import headers as hdr
from jsraft.stream.outcomes import ApiError

BATCH_ID = "Nats-Batch-Id"
BATCH_SEQUENCE = "Nats-Batch-Sequence"
BATCH_COMMIT = "Nats-Batch-Commit"
ID_BYTES_MAX = 64
PER_STREAM_MAX = 50  # nats-server: streamDefaultMaxBatchInflightPerStream
SIZE_MAX = 1000  # nats-server: streamDefaultMaxBatchSize
TIMEOUT_NS = 10_000_000_000  # nats-server: streamDefaultMaxBatchTimeout
BYTES_MAX = 16 << 20  # one batch is one Raft entry: jsraft bounds its staged bytes (nats-server stages on disk)
TOTAL_MAX = 1000  # nats-server: streamDefaultMaxBatchInflightTotal (per server)
NODE_BYTES_MAX = 256 << 20  # jsraft stages in memory: every open batch of a node together (invariant 4)


def disabled() -> ApiError:
    return ApiError(400, 10174, "atomic publish is disabled")


def missing_sequence() -> ApiError:
    return ApiError(400, 10175, "atomic publish sequence is missing")


def incomplete() -> ApiError:
    return ApiError(400, 10176, "atomic publish batch is incomplete")


def unsupported_header(header: str) -> ApiError:
    return ApiError(400, 10177, f"atomic publish unsupported header used: {header}")


def invalid_id() -> ApiError:
    return ApiError(400, 10179, "atomic publish batch ID is invalid")


def too_large() -> ApiError:
    return ApiError(400, 10199, f"atomic publish batch is too large: {SIZE_MAX}")


def invalid_commit() -> ApiError:
    return ApiError(400, 10200, "atomic publish batch commit is invalid")


def wrong_last_sequence() -> ApiError:  # JSStreamWrongLastSequenceConstantErr: the batch rules below
    return ApiError(400, 10164, "wrong last sequence")


def expected_conflict(found: dict[str, str], subject: str, position: int, written: set[str]) -> ApiError | None:
    """nats-server's batch-only rules on expected sequences (`checkMsgHeadersPreClusteredProposal`): only
    the first message may expect a last sequence, and no message may expect a subject's last sequence
    when an earlier message of the batch wrote that subject."""
    if position > 0 and hdr.EXPECTED_LAST_SEQ in found:
        return wrong_last_sequence()
    if hdr.EXPECTED_LAST_SUBJECT_SEQ in found and (found.get(hdr.EXPECTED_LAST_SUBJECT_SEQ_SUBJECT) or subject) in written:
        return wrong_last_sequence()
    return None


def duplicate_message() -> ApiError:
    return ApiError(400, 10201, "atomic publish batch contains duplicate message id")


class _Open:
    __slots__ = ("msgs", "bytes", "last_ns")

    def __init__(self, now_ns: int) -> None:
        self.msgs: list[tuple[str, bytes, bytes]] = []
        self.bytes = 0
        self.last_ns = now_ns


def _sequence(value: str | None) -> int | None:
    """`Nats-Batch-Sequence` as nats-server's `getBatchSequence` reads it: an unsigned decimal."""
    if value is None or not value.isascii() or not value.isdigit() or len(value) > 20 or int(value) >= 1 << 64:
        return None  # a uint64 or nothing (Go's strconv.ParseUint), and no 4,300-digit int conversion
    return int(value)


class NodeBudget:
    """What every stream leader of one node stages together (invariant 4)."""

    def __init__(self, open_max: int = TOTAL_MAX, bytes_max: int = NODE_BYTES_MAX) -> None:
        self.open_max = open_max
        self.bytes_max = bytes_max
        self._stagers: weakref.WeakSet[BatchStager] = weakref.WeakSet()

    def register(self, stager: BatchStager) -> None:
        self._stagers.add(stager)

    def usage(self, now_ns: int) -> tuple[int, int]:
        """(open batches, staged bytes) across the node, after abandoning the idle ones."""
        opened = staged = 0
        for stager in list(self._stagers):
            stager._abandon_idle(now_ns)
            opened += len(stager._open)
            staged += stager.staged_bytes
        return opened, staged

    def room(self, now_ns: int, opening: bool, adding: int) -> bool:
        opened, staged = self.usage(now_ns)
        return opened + opening <= self.open_max and staged + adding <= self.bytes_max


_NODE_BUDGETS: weakref.WeakKeyDictionary[object, NodeBudget] = weakref.WeakKeyDictionary()


def node_budget(node: object) -> NodeBudget:
    """The one budget of `node` (the server passes its node runtime), made on first use."""
    budget = _NODE_BUDGETS.get(node)
    if budget is None:
        budget = _NODE_BUDGETS[node] = NodeBudget()
    return budget


class BatchStager:
    """The open batches of one stream leader (invariant 2), within its node's `NodeBudget` (invariant 4)."""

    def __init__(self, budget: NodeBudget | None = None) -> None:
        self._open: dict[str, _Open] = {}
        self.staged_bytes = 0
        self._budget = budget if budget is not None else NodeBudget()
        self._budget.register(self)

    def __len__(self) -> int:
        return len(self._open)

    def take(self, found: dict[str, str], publish: tuple[str, bytes, bytes], allowed: bool,
             now_ns: int) -> ApiError | None | tuple[str, list[tuple[str, bytes, bytes]]]:
        """One batch message, checked in nats-server's order: a refusal, None (staged: answer it with an
        empty message), or `(batch id, every message of the batch)` to commit."""
        if not allowed:
            return disabled()
        batch_id = found[BATCH_ID]
        if len(batch_id) > ID_BYTES_MAX:
            return invalid_id()
        sequence = _sequence(found.get(BATCH_SEQUENCE))
        if sequence is None:
            return missing_sequence()
        self._abandon_idle(now_ns)
        staged = self._open.get(batch_id)
        if staged is None:
            if sequence != 1:
                return too_large() if sequence > SIZE_MAX else incomplete()
            if len(self._open) >= PER_STREAM_MAX or not self._budget.room(now_ns, True, 0):
                return incomplete()
            staged = self._open[batch_id] = _Open(now_ns)
        commit = found.get(BATCH_COMMIT)
        if commit is not None and commit != "1":
            self._drop(batch_id)
            return invalid_commit()
        if sequence != len(staged.msgs) + 1:
            self._drop(batch_id)
            return incomplete()
        if sequence > SIZE_MAX:
            self._drop(batch_id)
            return too_large()
        subject, headers, payload = publish
        size = len(subject) + len(headers) + len(payload)
        if staged.bytes + size > BYTES_MAX or not self._budget.room(now_ns, False, size):
            self._drop(batch_id)
            return incomplete()
        staged.bytes += size
        self.staged_bytes += size
        staged.msgs.append(publish)
        staged.last_ns = now_ns
        if commit is None:
            return None
        self._drop(batch_id)
        return batch_id, staged.msgs

    def close(self) -> None:
        """The leadership ended: every open batch is abandoned (invariant 2), its share of the node freed."""
        self._open.clear()
        self.staged_bytes = 0

    def _drop(self, batch_id: str) -> None:
        self.staged_bytes -= self._open.pop(batch_id).bytes

    def _abandon_idle(self, now_ns: int) -> None:
        idle = [batch_id for batch_id, staged in self._open.items() if now_ns - staged.last_ns > TIMEOUT_NS]
        for batch_id in idle:
            self._drop(batch_id)
