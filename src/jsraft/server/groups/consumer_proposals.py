"""`ConsumerProposals`: how the consumer service's task proposes its ops and sends what they decided, and the
barrier readers wait on (layer L5).

Owns: the CONSUMER entries a pass proposes through the stream replica's proposal chain (`OPS_PER_ENTRY`
ops each), the send that follows a proposal (only statuses when it failed), the double-ack answers sent
once their op committed, and `settled()`, the barrier consumer info waits for. Mixed into
`ConsumerService`, which provides `replica`, `stream`, `active`, `acks`, `wake`, `_outbox`,
`_applied_ops`, `_passes_started`, `_passes_ended`, `_pass_ended` and `_publish_many`; the invariants
named here are `ConsumerService`'s.

Imports: stdlib, L0, L1 (`raft` errors), L3 (`consumer`, `stream`), trio, runtime, replica.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from jsraft.consumer import encode_ops
from jsraft.consumer.ops import Op
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

    async def _propose_and_send(self, ops: list[Op], sends: list[Send], confirm: list[str]) -> None:
        """Propose `ops`, then send `sends` (only the statuses if the proposal failed: invariant 2)."""
        if ops:
            try:
                await self.propose(ops, self._confirmer(confirm))
            except JsraftError as error:  # invariant 2
                log.info("stream %s: consumer ops not proposed: %s", self.stream, error)
                sends = [send for send in sends if send.reply is None]  # statuses still go out
        self._publish_many(sends)

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
        entries = [encode_consumer(encode_ops(ops[i:i + OPS_PER_ENTRY])) for i in range(0, len(ops), OPS_PER_ENTRY)]
        replica = self.replica
        async with replica._propose_lock:
            if not self.active:
                raise NotLeader(replica.leader_id())
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
            waiting = bool(self.acks.items or self._applied_ops)  # for the next pass to propose them
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
