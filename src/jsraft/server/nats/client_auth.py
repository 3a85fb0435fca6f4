"""The security side of client connections: accepting, authenticating, enforcing permissions (layer L5).

Owns: `security_info` (INFO's `auth_required`, `nonce`, `tls_required`); `ConnSecurity`, the part of `ClientConn` that runs ClientConn invariants 7 and 8 — the CONNECT
check in a worker thread, the authorization-violation and authentication-timeout closes, the publish and
subscribe permission checks with nats-server's `-ERR` texts (the connection's `FilteredSubscription`s apply the subscribe
deny list to each message); the account a grant names (its sublist) and `route_isolated`, the routing of
an isolated account's publishes (ClientServer invariant 8).

Invariants: ClientConn's 7 and 8 (stated there, where the connection's life is described). The accept
path (TLS upgrade, nonce) is `client_accept`.

Imports: stdlib, trio, L4 (`protocol` errors texts, wire), server siblings (`auth`, `permissions`,
`client_subs`, `sublist`).
Reference: nats-server `server/client.go` (`authViolation`, `pubPermissionViolation`,
`subPermissionViolation`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import trio

from jsraft.protocol import errors as texts
from jsraft.server.nats.auth import AuthRefused, Grant
from jsraft.server.nats.permissions import ConnPermissions, permission_error_text
from jsraft.protocol.wire import OK, wire_text
from jsraft.server.nats.client_subs import is_published_subject
from jsraft.server.nats.sublist import Sublist

log = logging.getLogger("jsraft.server.clients")


def err_line(text: str) -> bytes:
    return b"-ERR '%s'\r\n" % text.encode()


def security_info(server: Any, conn: Any) -> dict[str, Any]:
    """INFO's security fields for `conn` on `server` (a `ClientServer`)."""
    info: dict[str, Any] = {}
    if server.authenticator is not None:
        info["auth_required"] = True
        if conn.nonce is not None:
            info["nonce"] = conn.nonce
    if server.tls is not None:
        info["tls_required"] = True
        info["tls_verify"] = server.tls.config.verify
    return info


class ConnSecurity:
    """Mixed into `ClientConn` (which provides `server`, `send`, `close`, `verbose` and the fields set in
    its constructor: `authed`, `nonce`, `identity`, `perms`, `responses`, `_pending_connect`)."""

    server: Any

    def init_security(self, auth_required: bool) -> None:
        self.authed = not auth_required  # once CONNECT's credentials passed
        self.nonce: str | None = None  # the nonce our INFO carried (NKeys sign it)
        self.identity = ""
        self.perms: ConnPermissions | None = None
        self.responses: Any = None  # `permissions.Responses` with allow_responses
        self._pending_connect: dict[str, Any] | None = None
        self._authenticated = trio.Event()
        self._expiry: tuple[float, str] | None = None  # a JWT's exp (unix seconds), the -ERR it closes with

    async def _authenticate(self, options: dict[str, Any]) -> None:
        authenticator = self.server.authenticator
        host = self.peer.rpartition(":")[0] or None  # type: ignore[attr-defined]
        try:
            grant: Grant = await trio.to_thread.run_sync(authenticator.authenticate, options, self.nonce, host)
        except AuthRefused as refused:
            self._pending_connect = None
            self._auth_violation(refused.reason)
            return
        self._pending_connect = None
        self.authed = True
        self.identity = grant.identity
        self._expiry = (grant.expires_s, grant.expired_text) if grant.expires_s is not None else None
        self._authenticated.set()
        if grant.account is not None:  # an isolated account: its own subjects (ClientServer invariant 8)
            self.sublist = self.server.account_sublists.setdefault(grant.account, Sublist())
        if grant.permissions is not None:
            self.perms = ConnPermissions(grant.permissions)
            self.responses = self.perms.new_responses()
        log.debug("client %r authenticated as %s", self, grant.identity)
        if self.verbose:
            self.send(OK)

    def _auth_violation(self, reason: str) -> None:
        log.warning("client %r: authorization violation: %s", self, reason)
        self.server.stats.auth_failures += 1
        self.close(f"authorization violation: {reason}", texts.ERR_AUTHORIZATION)

    async def _auth_timer(self) -> None:
        # Cancelled with the connection's nursery once it closes.
        await trio.sleep(self.server.authenticator.config.timeout_ms / 1000)
        if not self.authed and self._pending_connect is None and not self.closed:
            log.warning("client %r: no CONNECT within the authentication timeout", self)
            self.server.stats.auth_failures += 1
            self.close("authentication timeout", texts.ERR_AUTH_TIMEOUT)
            return
        await self._authenticated.wait()
        if self._expiry is not None:  # nats-server closes a user at its JWT's exp (`authExpired`)
            expires_s, text = self._expiry
            await trio.sleep(max(0.0, expires_s - time.time()))
            log.info("client %r (%s): %s", self, self.identity, text)
            self.close(text.lower(), text)

    def _may_publish(self, subject: str) -> bool:
        perms = self.perms
        if perms.can_publish(subject):  # type: ignore[union-attr]
            return True
        if self.responses is not None and self.responses.take(subject, trio.current_time()):
            return True
        log.info("client %r (%s): publish to %r refused by its permissions", self, self.identity, subject)
        self.send(err_line(permission_error_text("Publish", subject)))
        return False

    def _may_subscribe(self: Any, subject: str, queue: str | None) -> bool:
        """By the user's permissions; False after `-ERR 'Permissions Violation for Subscription to …'`."""
        if self.perms.can_subscribe(subject, queue):
            return True
        log.info("client %r (%s): subscription to %r refused by its permissions", self, self.identity, subject)
        self.send(err_line(permission_error_text("Subscription", subject, queue)))
        return False


def route_isolated(server: Any, origin: Any, subject: str, reply: str | None, headers: bytes | None,
                   payload: bytes) -> bool:
    """A publish from a client of an isolated account: to its account's subscriptions only (ClientServer
    invariant 8); no-responders as for any publish."""
    result = origin.sublist.match(subject) if is_published_subject(subject) else None
    delivered = result is not None and server._deliver_matches(
        result, origin, wire_text(subject), wire_text(reply) if reply else None, headers, payload)[0]
    if not delivered and reply and origin.no_responders:
        origin.send_no_responders(reply)
    return delivered
