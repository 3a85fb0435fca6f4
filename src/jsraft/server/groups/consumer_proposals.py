"""`ConsumerProposals`: how the consumer service's task proposes its ops and sends what they decided, and the
barrier readers wait on (layer L5).

Owns: the CONSUMER entries a pass proposes through the stream replica's proposal chain (`OPS_PER_ENTRY`
ops each), the send that follows a proposal (only statuses when it failed), the double-ack answers sent
once their op committed, `settled()`, the barrier consumer info waits for, and the deferral of the
DELIVERED ops of consumers with `ack_policy: none` (`ConsumerService` invariant 8). Mixed into
`ConsumerService`, which provides `replica`, `stream`, `active`, `acks`, `wake`, `_outbox`,
`_applied_ops`, `_passes_started`, `_passes_ended`, `_pass_ended`, `_publish_many` and `leading`; the
invariants named here are `ConsumerService`'s.

Imports: stdlib, L0, L1 (`raft` errors), L3 (`consumer`, `stream`), trio, runtime, replica.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from jsraft.consumer import encode_ops
from jsraft.consumer.ops import DeliveredOp, Op
from jsraft.jsapi.consumer_config import AckPolicy
from jsraft.errors import JsraftError
from jsraft.raft.errors import NotLeader
from jsraft.replica.consumer_pull import Send
from jsraft.runtime.proposals import Proposal
from jsraft.stream.entries import encode_consumer

if TYPE_CHECKING:
    from jsraft.server.groups.stream_replica import StreamReplica

log = logging.getLogger("jsraft.server.consumers")
OPS_PER_ENTRY = 1024  # below consumer.ops.OPS_PER_ENTRY_MAX: several entries for a very busy pass
BARRIER_TIMEOUT_S = 2.0
DEFER_DELIVERED_NS = 50_000_000  # invariant 8: how long an ack-none consumer's DELIVERED ops may wait


class ConsumerProposals:
    """Mixed into `ConsumerService` (module docstring)."""

    replica: "StreamReplica"
    stream: str
    acks: Any
    _outbox: list[Send]
    _applied_ops: list[Op]
    _last: Proposal | None
    _passes_started: int
    _passes_ended: int
    _pass_ended: trio.Event
    active: bool
    wake: Any
    _publish_many: Any
    leading: dict[str, Any]
    _deferred: list[Op]  # invariant 8, in the order they were decided
    _deferred_since_ns: int
    _flush_deferred: bool  # a reader waits (`settled`): the next pass proposes them whatever their age

    async def _propose_and_send(self, ops: list[Op], sends: list[Send], confirm: list[str]) -> None:
        """Propose `ops`, then send `sends` (only the statuses if the proposal failed: invariant 2)."""
        if ops:
            try:
                await self.propose(ops, self._confirmer(confirm))
            except JsraftError as error:  # invariant 2
                log.info("stream %s: consumer ops not proposed: %s", self.stream, error)
                sends = [send for send in sends if send.reply is None]  # statuses still go out
        self._publish_many(sends)

    def _deferrable(self, op: Op) -> bool:
        if type(op) is not DeliveredOp:
            return False
        leading = self.leading.get(op.name)
        config = leading.entry.config if leading is not None else None
        return config is not None and config.ack_policy is AckPolicy.none

    def _defer(self, ops: list[Op], now_ns: int) -> list[Op]:
        """Invariant 8: a pass's ops to propose now — [] while they are all an ack-none consumer's DELIVERED
        ops and those deferred are younger than `DEFER_DELIVERED_NS`; else the deferred ones first, then
        `ops` (`propose` takes any deferred first too, so the log keeps the order they were decided in)."""
        if not self._flush_deferred and all(self._deferrable(op) for op in ops):
            if not self._deferred:
                if not ops:
                    return []
                self._deferred_since_ns = now_ns
            if now_ns - self._deferred_since_ns < DEFER_DELIVERED_NS:
                for op in ops:  # one op per consumer: its latest record sets its cursors (delivery rule 8)
                    held = next((i for i, other in enumerate(self._deferred) if other.name == op.name), None)
                    if held is None:
                        self._deferred.append(op)
                    else:
                        self._deferred[held] = DeliveredOp(name=op.name, records=op.records[-1:])
                return []
        self._flush_deferred = False
        ops, self._deferred = self._deferred + ops, []
        return ops

    def deferred_due_ns(self) -> int | None:
        """When the deferred ops must be proposed (the service's timer wakes a pass then); None: none wait."""
        return self._deferred_since_ns + DEFER_DELIVERED_NS if self._deferred else None

    def _confirmer(self, replies: list[str]) -> Callable[[Proposal], None] | None:
        if not replies:
            return None

        def settled(proposal: Proposal) -> None:  # from the ready loop: record and wake (invariant 3)
            if proposal.error is None:
                self._outbox.extend(Send(reply, b"") for reply in replies)
                self.wake()

        return settled

    async def propose(self, ops: list[Op], on_settled: Callable[[Proposal], None] | None = None) -> Proposal:
        """Submit `ops` as CONSUMER entries through the replica's chain; the last entry's proposal.
        `NotLeader` when not leading; any failure drops the replica's `StreamLeader` (invariant 2)."""
        replica = self.replica
        async with replica._propose_lock:
            if not self.active:
                raise NotLeader(replica.leader_id())
            ops, self._deferred = self._deferred + ops, []  # invariant 8: the deferred ones go first
            entries = [encode_consumer(encode_ops(ops[i:i + OPS_PER_ENTRY])) for i in range(0, len(ops), OPS_PER_ENTRY)]
            proposal: Proposal | None = None
            for position, entry in enumerate(entries):
                last = position == len(entries) - 1
                try:
                    proposal = await replica._submit(entry, on_settled if last else None)
                except JsraftError:
                    replica.leader = None
                    raise
        assert proposal is not None
        self._last = proposal
        return proposal

    async def settled(self) -> None:
        """Wait (a bounded while) until the pass running now ended, and the next one too when acks wait for
        it (invariant 5), then until the last consumer proposal settled: a read after it sees it all."""
        with trio.move_on_after(BARRIER_TIMEOUT_S):
            waiting = bool(self.acks.items or self._applied_ops or self._deferred)  # for the next pass
            self._flush_deferred = self._flush_deferred or bool(self._deferred)  # invariant 8: not left to wait
            wanted = self._passes_started + (1 if waiting else 0)
            if waiting:
                self.wake()
            while self._passes_ended < wanted:
                await self._pass_ended.wait()
            await self._proposals_settled()

    async def _proposals_settled(self) -> None:
        last = self._last
        if last is None:
            return
        with trio.move_on_after(BARRIER_TIMEOUT_S):
            try:
                await self.replica.runtime.outcome(self.replica.group, last)
            except JsraftError:
                pass
