"""Per-user publish and subscribe permissions, as one connection enforces them (layer L5).

Owns: `ConnPermissions`, built from a user's `Permissions`: whether a publish subject or a subscription
(subject, queue) is allowed, which deny filters a wildcard subscription must still apply to each message,
and the reply subjects a user with `allow_responses` may publish to (`Responses`). The `-ERR` texts are
nats-server's (`permission_error_text`).

Invariants:
  1. Deny wins over allow; an absent allow list allows everything, an empty one nothing (auth_config
     invariant 3). `allow_responses` without a publish allow list makes that list empty (nats-server: a
     responder publishes only responses).
  2. A subscription is allowed only when every subject it could receive is inside some allow filter (a
     subset match) and it is not wholly inside a deny filter; one that merely overlaps a deny filter is
     allowed, and each message matching that deny filter is withheld from it at delivery
     (`delivery_deny`), so a wildcard cannot read a denied subject.
  3. A response permission admits a publish to a reply subject the connection was sent, at most `max`
     times and before `expires_ms`; at most `RESPONSES_MAX` are remembered (the oldest go first).
  4. The publish decision for a subject is cached; the cache is bounded (`PUBLISH_CACHE_MAX`).

Imports: stdlib, L1 (`subjects`), server siblings (`auth_config`).
Reference: nats-server `server/client.go` (`pubAllowed`, `canSubscribe`, `checkDenySub`,
`addResponseServiceImport`-style response permissions `replies`), `server/errors.go`.
"""

from __future__ import annotations

from collections.abc import Iterable

from jsraft import subjects
from jsraft.server.settings.auth_config import Permissions, ResponsePermission, SubjectPermission

PUBLISH_CACHE_MAX = 1024
RESPONSES_MAX = 4096


def permission_error_text(kind: str, subject: str, queue: str | None = None) -> str:
    """nats-server's `-ERR` text: `Permissions Violation for Publish to "x"` (kind "Publish" or
    "Subscription"; a queue subscription adds `using queue "q"`)."""
    text = f'Permissions Violation for {kind} to "{subject}"'
    return text + f' using queue "{queue}"' if queue else text


def _split(entries: Iterable[str]) -> list[tuple[str, str | None]]:
    """Permission entries `subject` or `subject queue` -> (subject, queue or None)."""
    out = []
    for entry in entries:
        subject, _, queue = entry.partition(" ")
        out.append((subject, queue.strip() or None))
    return out


def _covers(entries: list[tuple[str, str | None]], subject: str, queue: str | None) -> bool:
    return any(subjects.is_subset(subject, pattern) and (pattern_queue is None or pattern_queue == queue)
               for pattern, pattern_queue in entries)


class Responses:
    """Reply subjects this connection may answer (invariant 3)."""

    def __init__(self, permission: ResponsePermission) -> None:
        self.max = permission.max
        self.expires_s = permission.expires_ms / 1000 if permission.expires_ms else None
        self.pending: dict[str, list[float]] = {}  # reply -> [remaining, deadline (0: none)]

    def received(self, reply: str, now_s: float) -> None:
        if len(self.pending) >= RESPONSES_MAX and reply not in self.pending:
            del self.pending[next(iter(self.pending))]
        self.pending[reply] = [self.max, now_s + self.expires_s if self.expires_s else 0.0]

    def take(self, subject: str, now_s: float) -> bool:
        entry = self.pending.get(subject)
        if entry is None:
            return False
        if entry[1] and now_s > entry[1]:
            del self.pending[subject]
            return False
        entry[0] -= 1
        if entry[0] <= 0:
            del self.pending[subject]
        return True


class ConnPermissions:
    """What one authenticated connection may publish and subscribe to (module docstring)."""

    def __init__(self, permissions: Permissions) -> None:
        publish = permissions.publish or SubjectPermission()
        if permissions.allow_responses is not None and publish.allow is None:
            publish = SubjectPermission(allow=(), deny=publish.deny)  # invariant 1
        subscribe = permissions.subscribe or SubjectPermission()
        self.pub_allow = None if publish.allow is None else subjects.FilterSet(publish.allow)
        self.pub_deny = subjects.FilterSet(publish.deny) if publish.deny else None
        self.sub_allow = None if subscribe.allow is None else _split(subscribe.allow)
        self.sub_deny = _split(subscribe.deny)
        self.response_permission = permissions.allow_responses
        self._pub_cache: dict[str, bool] = {}

    def new_responses(self) -> Responses | None:
        return Responses(self.response_permission) if self.response_permission is not None else None

    def can_publish(self, subject: str) -> bool:
        """By the allow and deny lists alone (invariants 1, 4); responses are the caller's second chance."""
        cached = self._pub_cache.get(subject)
        if cached is not None:
            return cached
        allowed = (self.pub_allow is None or self.pub_allow.matches(subject)) and \
            not (self.pub_deny is not None and self.pub_deny.matches(subject))
        if len(self._pub_cache) >= PUBLISH_CACHE_MAX:
            self._pub_cache.clear()
        self._pub_cache[subject] = allowed
        return allowed

    def can_subscribe(self, subject: str, queue: str | None) -> bool:
        """Invariant 2's first half."""
        if self.sub_allow is not None and not _covers(self.sub_allow, subject, queue):
            return False
        return not _covers(self.sub_deny, subject, queue)

    def delivery_deny(self, subject: str) -> subjects.FilterSet | None:
        """The deny filters a subscription on `subject` overlaps (invariant 2's second half), or None."""
        overlapping = [pattern for pattern, _ in self.sub_deny if subjects.overlaps(subject, pattern)]
        return subjects.FilterSet(overlapping) if overlapping else None
