"""Operator (JWT) mode on the NATS client port: trusted operators, the MEMORY resolver, user JWTs (layer L5).

Owns: `JwtTrust`, built from a `TrustConfig` at start — every operator and preloaded account JWT decoded
and verified, or `InvalidConfig` (`check_trust` does it before `jsraft serve` touches anything) — which
checks one CONNECT's `jwt` and `sig` and answers with the `Grant` or raises `AuthRefused` — the order and the checks of nats-server's `processClientOrLeafAuthentication` in
operator mode; `jwt_permissions`, a user JWT's permissions as a `Permissions` value.

Invariants:
  1. A connection is admitted only when: its user JWT verifies (jwt_claims invariant 1) and is within
     `nbf`/`exp`; its account (`issuer_account`, else the issuer) is in the resolver; that account JWT is
     issued by a trusted operator key (an operator's subject or one of its signing keys, or a configured
     trusted key) and not expired;
     the user JWT's issuer is the account or one of the account's signing keys; the user is not revoked;
     `allowed_connection_types` (if any) include STANDARD; `src` (if any) contains the client's address;
     and — unless the JWT is a bearer token the account allows — `sig` is the user key's Ed25519
     signature of the nonce this connection's INFO carried. Anything else is `AuthRefused`.
  2. What jsraft cannot enforce is refused rather than ignored: connect-time windows (`times`) and a
     scoped signing key's permission template with `{{ }}` placeholders.
  3. The grant's permissions are the user JWT's (or its scoped signing key's template): an empty allow list
     means "no restriction" as in nats-server's `buildInternalNkeyUser`, a malformed one (not a list of
     subjects) refuses the connection; `resp` without a publish allow
     list makes that list empty (permissions invariant 1). The grant's `expires_s` is the earlier of the user's and the account's JWT `exp`, with
     nats-server's `-ERR` for it (`User Authentication Expired` or `Account Authentication Expired`).
  4. Accounts: the one preloaded account whose JWT enables JetStream is the node's main account (grant
     account None); every other account is isolated under its public key (ClientServer invariant 8). Two
     accounts with JetStream are an `InvalidConfig` (jsraft serves JetStream in one account).
  5. Reasons never contain a JWT, a signature or the nonce (auth invariant 1); they name keys and what failed.
  6. What an account JWT asks that jsraft does not enforce (connection, subscription and data limits,
     imports and exports) is logged as a warning at start.

Imports: stdlib (`ipaddress`, `logging`), L0, server siblings (`credentials`, `jwt_claims`), settings (`auth_config`).
Reference: nats-server `server/auth.go` (`processClientOrLeafAuthentication`, `buildInternalNkeyUser`),
`server/jwt.go` (`validateSrc`, `validateTrustedOperators`), `server/accounts.go` (`isRevoked`).
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from jsraft.errors import InvalidConfig
from jsraft.server.nats import jwt_claims
from jsraft.server.nats.credentials import AuthRefused, Grant, verify_nkey
from jsraft.server.nats.jwt_claims import Claims, JwtInvalid
from jsraft.server.settings.auth_config import Permissions, ResponsePermission, SubjectPermission, TrustConfig

log = logging.getLogger("jsraft.server.clients")

CONNECTION_TYPE_STANDARD = "STANDARD"
UNENFORCED_LIMITS = ("subs", "conn", "leaf", "data", "payload", "imports", "exports")
RESPONSES_MAX_DEFAULT = 1  # nats-server DEFAULT_ALLOW_RESPONSES_MAX_MSGS
RESPONSES_EXPIRES_MS_DEFAULT = 120_000  # DEFAULT_ALLOW_RESPONSES_EXPIRATION
RESPONSES_UNLIMITED = 2**31
INFINITY = float("inf")


def _subjects(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError("a permission list is not a list of subjects")  # never read as "no restriction"
    return tuple(value)


def _subject_permission(value: Any) -> SubjectPermission | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError("a permission is not an object")
    allow, deny = _subjects(value.get("allow")), _subjects(value.get("deny"))
    if not allow and not deny:
        return None
    return SubjectPermission(allow=allow or None, deny=deny)


def jwt_permissions(limits: dict[str, Any]) -> Permissions | None:
    """A user JWT's (or a scope template's) `pub`/`sub`/`resp` as `Permissions`, None for none (invariant 3)."""
    publish, subscribe = _subject_permission(limits.get("pub")), _subject_permission(limits.get("sub"))
    resp = limits.get("resp")
    responses = None
    if resp is not None and not isinstance(resp, dict):
        raise ValueError("resp is not an object")
    if isinstance(resp, dict):
        max_msgs, ttl_ns = int(resp.get("max") or 0), int(resp.get("ttl") or 0)
        responses = ResponsePermission(
            max=RESPONSES_UNLIMITED if max_msgs < 0 else max_msgs or RESPONSES_MAX_DEFAULT,
            expires_ms=ttl_ns // 1_000_000 if ttl_ns > 0 else RESPONSES_EXPIRES_MS_DEFAULT)
    if publish is None and subscribe is None and responses is None:
        return None
    permissions = Permissions(publish=publish, subscribe=subscribe, allow_responses=responses)
    permissions.validate("user JWT permissions")
    return permissions


def jwt_permissions_raw(limits: dict[str, Any]) -> tuple[Any, ...]:
    """The permission and limit fields a scoped user must leave empty (nats-io/jwt `HasEmptyPermissions`)."""
    pub, sub = limits.get("pub") or {}, limits.get("sub") or {}
    return (*(pub.values() if isinstance(pub, dict) else [pub]), *(sub.values() if isinstance(sub, dict) else [sub]),
            limits.get("resp"), limits.get("src"), limits.get("times"))


def _src_allows(cidrs: Any, host: str | None) -> bool:
    """nats-server `validateSrc`: no list admits everyone; otherwise the client's address must be inside."""
    entries = cidrs.split(",") if isinstance(cidrs, str) else list(cidrs or ())
    entries = [entry.strip() for entry in entries if isinstance(entry, str) and entry.strip()]
    if not entries:
        return True
    try:
        address = ipaddress.ip_address((host or "").strip("[]"))
        return any(address in ipaddress.ip_network(entry, strict=False) for entry in entries)
    except ValueError:
        return False


def _warn_unenforced(account: Claims) -> None:
    """An account JWT's connection/subscription/data limits and its imports and exports are not enforced by
    jsraft: said once at start, never silently (nats_conf_map invariant 1's spirit)."""
    limits = account.nats.get("limits") or {}
    unenforced = [key for key in UNENFORCED_LIMITS if limits.get(key) not in (None, -1)]
    unenforced += [key for key in ("imports", "exports") if account.nats.get(key)]
    if unenforced:
        log.warning("account %s (%s): %s in its JWT are not enforced by jsraft", account.subject, account.name,
                    ", ".join(sorted(set(unenforced))))


class JwtTrust:
    """The trusted operators and the MEMORY resolver's accounts (read-only: safe from worker threads)."""

    def __init__(self, config: TrustConfig) -> None:
        self.trusted_keys: set[str] = set(config.trusted_keys)
        for position, token in enumerate(config.operators):
            operator = self._decode_config(token, "operator", f"operator[{position}]")
            self.trusted_keys |= {operator.subject, *jwt_claims.signing_keys(operator)}
        self.accounts: dict[str, Claims] = {}
        for key, token in config.resolver_preload.items():
            account = self._decode_config(token, "account", f"resolver_preload {key}")
            if account.subject != key:
                raise InvalidConfig(f"resolver_preload {key}: the JWT is account {account.subject}'s")
            self.accounts[key] = account
            _warn_unenforced(account)
        with_js = [key for key, account in self.accounts.items() if jwt_claims.jetstream_enabled(account)]
        if len(with_js) > 1:
            raise InvalidConfig(f"resolver_preload: JetStream enabled in more than one account ({', '.join(with_js)}) "
                                "is not supported by jsraft")
        self.jetstream_account = with_js[0] if with_js else None

    @staticmethod
    def _decode_config(token: str, kind: str, where: str) -> Claims:
        try:
            return jwt_claims.decode(token, kind)
        except JwtInvalid as error:
            raise InvalidConfig(f"{where}: {error.reason}") from None

    def authenticate(self, options: dict[str, Any], nonce: str | None, host: str | None = None) -> Grant:
        """The grant for a CONNECT in operator mode, or `AuthRefused` (invariants 1–5)."""
        try:
            user = jwt_claims.decode(options.get("jwt"), "user")  # type: ignore[arg-type]
        except JwtInvalid as error:
            raise AuthRefused(f"user JWT not valid: {error.reason}") from None
        problem = jwt_claims.time_problem(user)
        if problem is not None:
            raise AuthRefused(f"user {user.subject}: {problem}")
        account_key = user.issuer_account or user.issuer
        account = self._account(account_key)
        scope = self._user_scope(account, user)
        limits = user.nats if scope is None else dict(scope.get("template") or {})  # replaces the user's
        self._check_connection(account, user, limits, options, nonce, host)
        try:
            permissions = jwt_permissions(limits)
        except (InvalidConfig, TypeError, ValueError, AttributeError):
            raise AuthRefused(f"user {user.subject}: its JWT's permissions are not valid") from None
        expiry = min(((user.expires, "User"), (account.expires, "Account")), key=lambda pair: pair[0] or INFINITY)
        return Grant(user.subject, permissions, None if account_key == self.jetstream_account else account_key,
                     expires_s=float(expiry[0]) if expiry[0] else None,
                     expired_text=f"{expiry[1]} Authentication Expired")

    def _account(self, key: str) -> Claims:
        account = self.accounts.get(key)
        if account is None:
            raise AuthRefused(f"account {key} is not in the resolver")
        if account.issuer not in self.trusted_keys:
            raise AuthRefused(f"account {key} is not signed by a trusted operator")
        if jwt_claims.time_problem(account) is not None:
            raise AuthRefused(f"account {key}: its JWT has expired")
        return account

    @staticmethod
    def _user_scope(account: Claims, user: Claims) -> dict[str, Any] | None:
        if user.issuer == account.subject:
            return None
        try:
            keys = jwt_claims.signing_keys(account)
        except JwtInvalid:
            keys = {}
        if user.issuer not in keys:
            raise AuthRefused(f"user {user.subject}: its issuer is not account {account.subject} or one of its "
                              "signing keys")
        scope = keys[user.issuer]
        if scope is not None and (scope.get("kind") != "user_scope" or "{{" in str(scope.get("template"))):
            raise AuthRefused(f"user {user.subject}: scoped signing key templates are not supported by jsraft")
        if scope is not None and any(jwt_permissions_raw(user.nats)):
            raise AuthRefused(f"user {user.subject}: a user of a scoped signing key carries no permissions")
        return scope

    @staticmethod
    def _check_connection(account: Claims, user: Claims, limits: dict[str, Any], options: dict[str, Any],
                          nonce: str | None, host: str | None) -> None:
        who = f"user {user.subject}"
        bearer = bool(limits.get("bearer_token"))
        if bearer and (account.nats.get("limits") or {}).get("disallow_bearer"):
            raise AuthRefused(f"{who}: account {account.subject} does not allow bearer tokens")
        types = limits.get("allowed_connection_types") or ()
        if types and CONNECTION_TYPE_STANDARD not in types:
            raise AuthRefused(f"{who}: connection type not allowed")
        if not bearer:
            sig = options.get("sig")
            if not isinstance(sig, str) or not sig or nonce is None:
                raise AuthRefused(f"{who}: signature missing")
            if not verify_nkey(user.subject, nonce, sig):
                raise AuthRefused(f"{who}: signature not verified")
        if jwt_claims.is_revoked(account, user):
            raise AuthRefused(f"{who}: authentication revoked")
        if not _src_allows(limits.get("src"), host):
            raise AuthRefused(f"{who}: connections from {host} not allowed by its src")
        if limits.get("times"):
            raise AuthRefused(f"{who}: connect-time windows (times) are not supported by jsraft")


def check_trust(config: object) -> None:
    """Decode every operator and preloaded account JWT a `NodeConfig` names, so a bad one is a
    configuration error (`InvalidConfig`) before anything starts (as `tls.check_tls_files` does for
    certificates)."""
    auth = getattr(config, "client_auth", None)
    if auth is not None and auth.trust is not None:
        JwtTrust(auth.trust)
