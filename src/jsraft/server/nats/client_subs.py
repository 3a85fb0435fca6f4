"""A client's subscriptions and the subject rules of the client port (layer L5).

Owns: `ClientSubscription` (`SUB <subject> [queue] <sid>` of one connection, delivered through it, with
the subscribe deny filters of its user), `is_valid_subject` (literal, or a filter with `wildcards`) and
`is_published_subject` (what a client may publish on: literal, or with wildcard tokens, which nats-server
routes to the subscriptions with a wildcard at each such token).

Imports: stdlib, L0, L1 (`subjects`), L4 (`protocol.wire`). `ClientConn` (which delivers) is not
imported: a subscription only calls its `conn.deliver` and reads `conn.echo`.
"""

from __future__ import annotations

import re
from typing import Any

from jsraft import limits, subjects
from jsraft.errors import InvalidSubject
from jsraft.protocol.wire import wire_text


class ClientSubscription:
    """`SUB <subject> [queue] <sid>` of one connection; delivered through it."""

    __slots__ = ("conn", "sid", "subject", "queue", "sid_bytes", "max_msgs", "delivered", "deny")

    def __init__(self, conn: Any, sid: str, subject: str, queue: str | None) -> None:
        self.conn = conn
        self.sid = sid
        self.subject = subject
        self.queue = queue
        self.sid_bytes = wire_text(sid)
        self.max_msgs = 0  # 0: no limit (UNSUB <sid> <max> sets it)
        self.delivered = 0
        self.deny: Any = None  # the user's subscribe deny filters this subscription overlaps (invariant 8)

    def deliver(self, origin: Any, subject: bytes, reply: bytes | None, headers: bytes | None,
                payload: bytes) -> bool:
        if origin is self.conn and not self.conn.echo or \
                self.deny is not None and self.deny.matches(subject.decode("utf-8", "surrogateescape")):
            return False
        return self.conn.deliver(self, subject, reply, headers, payload)


# An ASCII literal subject that `subjects.validate` accepts: non-empty tokens without whitespace, none of
# them a wildcard. Checked first because reply subjects (`_INBOX.<id>.<n>`) are new on every message, so
# the validation cache never holds them; anything this does not match gets the full validation.
_LITERAL = re.compile(r"(?![*>](?:\.|$))[^ \t\r\n\f\v.]+(?:\.(?![*>](?:\.|$))[^ \t\r\n\f\v.]+)*")


def is_valid_subject(subject: str, *, wildcards: bool = False) -> bool:
    """A valid subject (a filter when `wildcards`). Bytes that are not UTF-8 arrive surrogate-escaped
    (protocol events invariant 1); jsraft's subjects are text, so such a subject is not valid here."""
    if not wildcards and len(subject) <= limits.subject_bytes_max and subject.isascii() \
            and _LITERAL.fullmatch(subject) is not None:
        return True
    try:
        if wildcards:
            subjects.validate(subject, wildcards=True)
        else:
            subjects.validate_literal_cached(subject)
    except (InvalidSubject, UnicodeEncodeError):
        return False
    return True


def is_published_subject(subject: str) -> bool:
    """A subject a client may publish on: literal, or with wildcard tokens (nats-server routes those to
    the subscriptions with a wildcard at each such token)."""
    return is_valid_subject(subject) or is_valid_subject(subject, wildcards=True)
