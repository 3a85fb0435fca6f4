"""One pass of a stream's consumer service over its consumers, sent in steps (layer L5).

Owns: `serve_pass`, the body of `ConsumerService`'s pass once it knows it leads: the acks handed in are
taken (`consumer_acks`), each consumer is served — push consumers in one go, pull consumers plan by plan
(`consumer_pull.serve_steps`) — and an inactive ephemeral consumer's DELETE is added; what was decided is
proposed *before* what it lets out is sent (consumer_service's rule: an ack can only follow its message's
DELIVERED op in the log).

Invariants:
  1. Steps: once a pull plan holds deliveries, the ops decided so far (the acks' ops first, then the
     plans', in decision order) are proposed and then everything decided so far is sent, before the
     next plan is made: the client works on the first messages of a batch while the next ones are read
     and proposed. The first plan of a consumer is at most `FIRST_STEP_MAX` messages, so the first
     write leaves early; later plans are `consumer_pull.DELIVER_BATCH_MAX`.
  2. A failed proposal ends the pass: the deliveries it covered are not sent (statuses still are), and
     the replica has dropped its `StreamLeader` (consumer_service invariant 2), so nothing more is decided
     from the dropped bookkeeping. A consumer that stops being led here during a step's await (deleted,
     a new `StreamLeader`) is not served further in this pass.
  3. Double acks (`confirm`) ride on the first proposal, which carries their ops.

Imports: stdlib, L0, L3 (`consumer`), L3½ (`replica`), server siblings. No trio of its own: awaits the
service's `propose`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from jsraft.consumer import DeleteOp
from jsraft.consumer.ops import Op
from jsraft.errors import JsraftError
from jsraft.replica.consumer_pull import Leading, Send, serve_steps
from jsraft.replica.consumer_push import PushLeading, sends_before_proposal, serve_push
from jsraft.server.groups.consumer_acks import take_acks

if TYPE_CHECKING:
    from jsraft.server.groups.consumer_service import ConsumerService

log = logging.getLogger("jsraft.server.consumers")

FIRST_STEP_MAX = 64  # invariant 1: the first plan of a pull consumer in a pass


class _Out:
    """What a pass decided and has not proposed and sent yet."""

    def __init__(self, service: "ConsumerService", ops: list[Op], confirm: list[str]) -> None:
        self.service, self.ops, self.confirm = service, ops, confirm
        self.sends: list[Send] = []
        self.failed = False

    async def flush(self) -> bool:
        """Propose, then send (invariants 1–3); False when the proposal failed."""
        service, ops, sends = self.service, self.ops, self.sends
        self.ops, self.sends = [], []
        if ops:
            confirm, self.confirm = self.confirm, []
            try:
                await service.propose(ops, service._confirmer(confirm))
            except JsraftError as error:  # invariant 2
                log.info("stream %s: consumer ops not proposed: %s", service.stream, error)
                sends = [send for send in sends if send.reply is None]  # statuses still go out
                self.failed = True
        service.publish_all(sends)
        return not self.failed


async def serve_pass(service: "ConsumerService", now_ns: int) -> None:
    """Take the acks, serve every consumer, propose and send, in steps (module invariants)."""
    ops, service._applied_ops = service._applied_ops, []  # before this pass's: decided (and sent) earlier
    out = _Out(service, ops, [])
    acks, service._acks = service._acks, []
    store = service.replica.store
    take_acks(acks, service.stream, service.leading, store, service.events, now_ns, out.ops, out.sends, out.confirm)
    interested = getattr(service.port, "has_reply_interest", None)
    for leading in list(service.leading.values()):
        if leading.name in service._unanswered:
            continue  # consumer_service invariant 6
        try:
            if type(leading) is PushLeading:
                served_ops, served = serve_push(leading, store, now_ns, service._interest(leading.deliver_subject))
                if sends_before_proposal(leading):  # consumer_push invariant 5
                    service.publish_all(served)
                    served = []
                out.ops.extend(served_ops)
                out.sends.extend(served)
            elif not await _serve_pull(service, leading, out, now_ns, interested):
                return  # invariant 2
        except JsraftError as error:  # a damaged record met on the way: the repair worker sees it too
            log.warning("stream %s: consumer %s not served: %s", service.stream, leading.name, error)
            continue
        due = leading.inactive_due_ns()
        if due is not None and due <= now_ns:
            log.info("stream %s: consumer %s inactive: deleting it", service.stream, leading.name)
            leading.deleting = True
            out.ops.append(DeleteOp(name=leading.name))
    await out.flush()


async def _serve_pull(service: "ConsumerService", leading: Leading, out: _Out, now_ns: int, interested) -> bool:
    """One pull consumer, plan by plan (invariant 1); False when a proposal failed (invariant 2)."""
    store = service.replica.store
    for step_ops, step_sends in serve_steps(leading, store, now_ns, interested, FIRST_STEP_MAX):
        out.ops.extend(step_ops)
        out.sends.extend(step_sends)
        if any(send.shown is not None for send in step_sends):
            if not await out.flush():
                return False
            if not service.active or service.leading.get(leading.name) is not leading:
                return True  # invariant 2: no longer led here
    return True
