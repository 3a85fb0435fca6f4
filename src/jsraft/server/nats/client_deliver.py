"""`deliver_as`: the node's JetStream deliveries to one subject, shown on each message's own subject (L5).

Owns: the body of `ClientServer.deliver_as` — a run of messages the node sends to one subject (a pull
request's reply subject: a fetch's batch) that its subscribers see as messages on each message's stream
subject, each with its own reply (the `$JS.ACK...` subject), as nats-server's `deliverMsg` sends them.

Invariants:
  1. Each message of a run reaches exactly whom `ClientServer.route`'s rules would send it to, in run
     order for each recipient: every matching plain subscription here, one member of each matching queue
     group, then the peers through `forward` with the queue groups served here (client_server
     invariants 1 and 5). An invalid subject reaches nobody.
  2. The subject is validated and matched once per run. When every match is a plain client subscription
     with nothing to do per message (no deny filter, no `UNSUB <sid> <max>`, no response tracking), the
     run is queued on each subscriber's connection at once (`ConnOutbound.deliver_run`: one write for a
     fetch's batch), then offered to the peers message by message — the first refusal (no peer interest,
     which cannot change while this runs) ends that. Anything else goes message by message, matched
     again for each: a delivery can end a subscription (`UNSUB <sid> <max>`).

Imports: stdlib, L4 (`protocol.wire`), server siblings (`client_subs`).
Reference: nats-server `server/consumer.go` (`deliverMsg`), `server/client.go` (`processMsgResults`).
"""

from __future__ import annotations

from typing import Any

from jsraft.protocol.wire import wire_text
from jsraft.server.nats.client_subs import ClientSubscription, is_valid_subject

# One message of a run: (shown subject, reply subject or None, header block or None, payload).
Delivery = tuple[str, str | None, bytes | None, bytes]


def deliver_as(server: Any, subject: str, run: list[Delivery], now: bool = False) -> bool:
    """Deliver `run` to `subject`'s subscribers here and at the peers (module invariants); True when any
    message reached anyone. `now`: a run queued on a connection goes to its socket at once."""
    if not run or not is_valid_subject(subject):
        return False
    result = server.sublist.match(subject)
    forward = server.forward
    if len(run) > 1 and not result.queues and all(_takes_runs(sub) for sub in result.plain):
        delivered = bool(result.plain)
        for sub in result.plain:
            sub.conn.deliver_run(sub, run, now)  # encodes and frames each message in one pass
        if forward is not None:
            for shown, reply, headers, payload in run:
                if not forward(subject, reply, headers, payload, (), shown=shown):
                    break  # invariant 2: no peer wants this subject
                delivered = True
        return delivered
    delivered = False
    for position, (shown, reply, headers, payload) in enumerate(run):
        if position:
            result = server.sublist.match(subject)  # a delivery may have ended a subscription (`UNSUB` max)
        here, served = server._deliver_matches(result, None, wire_text(shown), wire_text(reply) if reply else None,
                                               headers, payload)
        delivered = delivered or here
        if forward is not None:
            delivered = forward(subject, reply, headers, payload, served, shown=shown) or delivered
    return delivered


def _takes_runs(sub: Any) -> bool:
    """A plain client subscription with nothing `ClientSubscription.deliver` / `ConnOutbound.deliver` does
    per message (invariant 2)."""
    return type(sub) is ClientSubscription and sub.deny is None and not sub.max_msgs and sub.conn.responses is None
