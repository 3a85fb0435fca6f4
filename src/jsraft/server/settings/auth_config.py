"""Security settings as values: client users and permissions, TLS files, the cluster secret (layer L5).

Owns: the frozen values `NodeConfig` carries for who may connect and what they may do —
`ClientAuthConfig` (a token, or users with plain or bcrypt passwords or NKeys, each with optional
`Permissions`, or operator mode: `TrustConfig`, the trusted operator JWTs and the MEMORY resolver's
account JWTs), `TlsConfig` (certificate files and options of one listener), and their `validate()`.
Nothing here opens a file or a socket; `server.auth` and `server.tls` use these values.

Invariants:
  1. No secret is part of a value's `repr`: passwords, tokens and the cluster secret are `repr=False`, so
     logging a `NodeConfig` (or an error quoting it) never prints one.
  2. `validate()` refuses what nats-server refuses: a token together with users, a user with neither a
     password nor an NKey, two users of one name, an NKey that is not a user public key (`U…`, 56 chars),
     a subject in a permission list that is not a valid subject filter, TLS without a certificate and key,
     `verify` without a CA file; operator mode together with a token or users (nats-server: "operators do
     not allow users to be configured directly"), or without an operator (JWT or trusted key), both kinds
     at once, a trusted key that is not an operator public key, or a preloaded account whose
     key is not an account public key (`A…`, 56 chars). JWTs themselves are decoded by `server.nats.jwt_auth`.
  3. `SubjectPermission.allow` is None for "everything" and `()` for "nothing" (nats-server's nil and
     empty allow lists differ the same way); `deny` always wins over `allow`.

Imports: L0 (`errors`), L1 (`subjects`), attrs. Reference: nats-server `server/opts.go` (`authorization`,
`users`, `permissions`, `allow_responses`, `tls`), `server/auth.go`.
"""

from __future__ import annotations

import attrs

from jsraft import subjects
from jsraft.errors import InvalidConfig, InvalidSubject

BCRYPT_PREFIXES = ("$2a$", "$2b$", "$2y$")
NKEY_USER_PREFIX = "U"
NKEY_ACCOUNT_PREFIX = "A"
NKEY_OPERATOR_PREFIX = "O"
NKEY_PUBLIC_CHARS = 56


@attrs.frozen(kw_only=True)
class SubjectPermission:
    """Subjects a user may publish to or subscribe to (invariant 3)."""

    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] = ()

    def validate(self, where: str) -> None:
        for subject in (*(self.allow or ()), *self.deny):
            try:
                subjects.validate(subject.split(" ", 1)[0], wildcards=True)
            except (InvalidSubject, AttributeError):
                raise InvalidConfig(f"{where}: {subject!r} is not a valid subject") from None


@attrs.frozen(kw_only=True)
class ResponsePermission:
    """`allow_responses`: publish to the reply subject of a message received, `max` times within
    `expires_ms` (0: no expiry), as nats-server's response permissions."""

    max: int = 1
    expires_ms: int = 0


@attrs.frozen(kw_only=True)
class Permissions:
    publish: SubjectPermission | None = None
    subscribe: SubjectPermission | None = None
    allow_responses: ResponsePermission | None = None

    def validate(self, where: str) -> None:
        for name in ("publish", "subscribe"):
            value = getattr(self, name)
            if value is not None:
                value.validate(f"{where}.{name}")
        if self.allow_responses is not None and (self.allow_responses.max < 1 or self.allow_responses.expires_ms < 0):
            raise InvalidConfig(f"{where}.allow_responses: max must be at least 1 and expires_ms at least 0")


@attrs.frozen(kw_only=True)
class UserConfig:
    """One client identity: `user` with `password` (plain, or a bcrypt hash `$2a$…`), or an NKey."""

    user: str | None = None
    password: str | None = attrs.field(default=None, repr=False)
    nkey: str | None = None
    permissions: Permissions | None = None
    # The account the user belongs to: None is the node's main account (the one JetStream serves and
    # cluster routes carry); a named one is isolated — its subjects reach only its own users (client_server).
    account: str | None = None

    @property
    def identity(self) -> str:
        return self.nkey or self.user or "?"


def _is_public_key(key: str, prefix: str) -> bool:
    return key.startswith(prefix) and len(key) == NKEY_PUBLIC_CHARS and key.isalnum() and key.isupper()


@attrs.frozen(kw_only=True)
class TrustConfig:
    """Operator (JWT) mode, nats-server's `operator` (or `trusted_keys`) + `resolver: MEMORY` +
    `resolver_preload`: `operators` are operator JWTs (their keys sign account JWTs), `trusted_keys` bare
    operator public keys; `resolver_preload` maps an account public key to its account JWT. A client then
    authenticates with a user JWT and the nonce signed by its seed."""

    operators: tuple[str, ...] = attrs.field(default=(), repr=False)
    trusted_keys: tuple[str, ...] = ()  # nats-server `trusted_keys`: operator public keys instead of JWTs
    resolver_preload: dict[str, str] = attrs.field(factory=dict, repr=False)

    def validate(self, where: str) -> "TrustConfig":
        if self.operators and self.trusted_keys:
            raise InvalidConfig(f"{where}: conflicting options for trusted_keys and operator (nats-server refuses "
                                "them together too)")
        if not (self.operators or self.trusted_keys) or not all(jwt for jwt in self.operators):
            raise InvalidConfig(f"{where}: operator mode needs at least one operator JWT or trusted key")
        for key in self.trusted_keys:
            if not _is_public_key(key, NKEY_OPERATOR_PREFIX):
                raise InvalidConfig(f"{where}: trusted key {key!r} is not an operator public key "
                                    f"(O…, {NKEY_PUBLIC_CHARS} characters)")
        for key in self.resolver_preload:
            if not _is_public_key(key, NKEY_ACCOUNT_PREFIX):
                raise InvalidConfig(f"{where}.resolver_preload: {key!r} is not an account public key "
                                    f"(A…, {NKEY_PUBLIC_CHARS} characters)")
        return self


@attrs.frozen(kw_only=True)
class ClientAuthConfig:
    """Who may connect to the client port. `token`: one shared token; `users`: named users and NKeys.
    `default_permissions` apply to a user without its own (and to the token's holder)."""

    token: str | None = attrs.field(default=None, repr=False)
    users: tuple[UserConfig, ...] = ()
    default_permissions: Permissions | None = None
    no_auth_user: str | None = None
    timeout_ms: int = 2000
    trust: TrustConfig | None = None  # operator (JWT) mode: no token, no users

    @property
    def has_nkeys(self) -> bool:
        return any(user.nkey for user in self.users)

    def validate(self) -> "ClientAuthConfig":
        where = "node config: client_auth"
        if self.trust is not None:
            if self.token is not None or self.users or self.no_auth_user is not None:
                raise InvalidConfig(f"{where}: operator mode does not allow a token or users to be configured "
                                    "directly (nats-server refuses it too)")
            self.trust.validate(f"{where}.trust")
        elif self.token is not None and self.users:
            raise InvalidConfig(f"{where}: a token and users cannot both be set (nats-server refuses it too)")
        elif self.token is None and not self.users:
            raise InvalidConfig(f"{where}: give a token or at least one user")
        if self.token is not None and not self.token:
            raise InvalidConfig(f"{where}: the token is empty")
        if self.timeout_ms < 1:
            raise InvalidConfig(f"{where}: timeout_ms must be at least 1")
        seen: set[str] = set()
        for position, user in enumerate(self.users):
            _validate_user(user, f"{where}.users[{position}]", seen)
        if self.default_permissions is not None:
            self.default_permissions.validate(f"{where}.default_permissions")
        if self.no_auth_user is not None and self.no_auth_user not in seen:
            raise InvalidConfig(f"{where}: no_auth_user {self.no_auth_user!r} is not one of the users")
        return self


def _validate_user(user: UserConfig, where: str, seen: set[str]) -> None:
    if user.nkey is not None:
        if user.user is not None or user.password is not None:
            raise InvalidConfig(f"{where}: an NKey user has no user name or password")
        if not _is_public_key(user.nkey, NKEY_USER_PREFIX):
            raise InvalidConfig(f"{where}: nkey must be a user public key (U…, {NKEY_PUBLIC_CHARS} characters)")
    elif not user.user:
        raise InvalidConfig(f"{where}: a user needs a name (user) or an nkey")
    if user.account is not None and not user.account:
        raise InvalidConfig(f"{where}: account must not be empty")
    identity = user.identity
    if identity in seen:
        raise InvalidConfig(f"{where}: {identity!r} is listed twice")
    seen.add(identity)
    if user.permissions is not None:
        user.permissions.validate(f"{where}.permissions")


@attrs.frozen(kw_only=True)
class TlsConfig:
    """TLS of one listener (client, cluster or monitor port): files in PEM. `verify`: ask for a client
    certificate signed by `ca_file` and refuse a connection without one. `handshake_first`: TLS before the
    INFO line (nats-server 2.10+ `handshake_first`; client port only). A cluster link always verifies."""

    cert_file: str
    key_file: str
    ca_file: str | None = None
    verify: bool = False
    handshake_first: bool = False
    timeout_ms: int = 2000

    def validate(self, where: str) -> "TlsConfig":
        if not self.cert_file or not self.key_file:
            raise InvalidConfig(f"{where}: cert_file and key_file are required")
        if self.verify and not self.ca_file:
            raise InvalidConfig(f"{where}: verify needs a ca_file to check client certificates against")
        if self.timeout_ms < 1:
            raise InvalidConfig(f"{where}: timeout_ms must be at least 1")
        return self
