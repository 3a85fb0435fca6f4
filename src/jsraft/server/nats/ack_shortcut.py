"""The client port's ack shortcut: acks straight to the consumer hub while nothing else could take them (L5).

Owns: `AckShortcut`, the part of `ClientServer` that keeps the shortcut (its invariant 6): the hub's
`$JS.ACK.>` subscription and its two handlers — one ack (`route` asks it), a run of acks
(`ack_run_path`, for a connection's `AckRun`) — and `ack_rivals`, the count of the other subscriptions,
here or advertised by peers, that could match an ack; `could_match_ack` decides which those are.

Invariants:
  1. The shortcut is open only while the hub's subscription is the only one that could match an ack:
     `ack_rivals` is 0 (every other subscription that `could_match_ack` counted while it was in this port's
     sublist or the routes' `remote` one), the handlers are set, and the port is running. Else an ack is
     routed as any publish, so a client subscribed to `$JS.ACK.>` receives every ack.
  2. A run of acks takes the shortcut exactly when each of its acks, routed one by one, would: the
     `before_route` hooks run once, first — nothing between the acks of a run changes what they bring up
     to date (they follow the meta state, which no ack touches) — then invariant 1's conditions, once.
  3. Each handler checks the subject itself (one parse of an ack does both); what it refuses (not a valid
     subject) is routed as any publish, which reaches nobody.

Imports: stdlib. Reference: nats-server `server/client.go` (`processInboundClientMsg`: an ack is a publish).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ACK_PREFIX = "$JS.ACK."
# (subject, reply, payload) -> whether it was taken; (subjects) -> those it did not take, in order.
AckHandler = Callable[[str, str | None, bytes], bool]
AckRunHandler = Callable[[list[str]], list[str]]


def could_match_ack(subject: str) -> bool:
    """Whether a subscription on `subject` could match a `$JS.ACK.…` subject (never False when it can)."""
    tokens = subject.split(".", 2)
    return tokens[0] == ">" or tokens[0] in ("$JS", "*") and len(tokens) > 1 and tokens[1] in ("ACK", "*", ">")


class AckShortcut:
    """Mixed into `ClientServer`, which sets `sublist`, `before_route` and `_nursery` (module docstring)."""

    sublist: Any
    before_route: list[Callable[[], None]]
    _nursery: Any

    def init_ack_shortcut(self) -> None:
        self.ack_rivals = 0  # invariant 1
        self._ack_sub: Any = None
        self._ack_handler: AckHandler | None = None
        self._ack_run_handler: AckRunHandler | None = None
        self.sublist.observers.append(self.count_ack_rival)

    def set_ack_path(self, sub: Any, handler: AckHandler, run_handler: AckRunHandler) -> None:
        """`handler(subject, reply, payload)` takes the acks `sub` would while it has no rival (invariant
        1), `run_handler(subjects)` a run of them (invariant 2); each checks the subjects itself and
        refuses one that is not a valid subject (invariant 3)."""
        if self._ack_sub is None and could_match_ack(sub.subject):
            self.ack_rivals -= 1  # counted when it was inserted: it is the one allowed
        self._ack_sub, self._ack_handler, self._ack_run_handler = sub, handler, run_handler

    def count_ack_rival(self, sub: Any, added: bool) -> None:
        """Sublist observer (this port's, the routes' `remote`): count the shortcut's rivals (invariant 1)."""
        if sub is self._ack_sub:
            if not added:
                self._ack_sub = self._ack_handler = self._ack_run_handler = None  # gone: acks go through `route`
            return
        if could_match_ack(sub.subject):
            self.ack_rivals += 1 if added else -1

    def ack_run_path(self, origin: Any) -> AckRunHandler | None:
        """The hub's handler for a run of acks published by `origin` when the shortcut is open for it
        (invariant 2: the hooks run here, once); None when the caller is to route each ack as usual."""
        if origin.sublist is not self.sublist:
            return None  # an isolated account's acks never reach the hub (ClientServer invariant 8)
        for hook in self.before_route:
            hook()
        if self.ack_rivals or self._nursery is None:
            return None
        return self._ack_run_handler
