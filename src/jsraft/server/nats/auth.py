"""Client authentication on the NATS port: token, users with passwords, NKeys (layer L5).

Owns: `Authenticator`, which checks one CONNECT's credentials against a `ClientAuthConfig` and answers
with the `Grant` (who, with which permissions) or raises `AuthRefused` with a reason fit for a log (those
two, `new_nonce()` and the NKey signature check `verify_nkey()` live in `credentials`, shared with
`jwt_auth`, and are re-exported here).

Invariants:
  1. A refusal's reason never contains a secret: it names the user or NKey public key and what was wrong
     ("bad password", "no credentials"), never a password, token, signature or nonce.
  2. Secrets are compared in constant time (`hmac.compare_digest`); a bcrypt hash is checked with
     `bcrypt.checkpw` (slow on purpose: callers run `authenticate` in a worker thread).
  3. An NKey signature is verified over the exact nonce this connection's INFO carried, with the public
     key from the configuration (never one the client sent that is not configured), after checking the
     key's prefix (user) and CRC16.
  4. `no_auth_user`: a CONNECT with no credentials at all is that user; any credential given is checked.
  5. Operator mode (`ClientAuthConfig.trust`): only a user JWT admits (`jwt_auth.JwtTrust`); a token,
     user or NKey in the CONNECT is not consulted, as in nats-server.

Imports: stdlib (`hmac`), bcrypt, server siblings (`credentials`, `jwt_auth`), settings (`auth_config`).
Reference: nats-server `server/auth.go` (`processClientOrLeafAuthentication`, `comparePasswords`),
nkeys (`PREFIX_BYTE_USER`, CRC16), ADR-14 style nonce signing.
"""

from __future__ import annotations

import hmac
from typing import Any

import bcrypt

from jsraft.server.nats.credentials import (AuthRefused, Grant, decode_signature, new_nonce, nkey_public_bytes,
                                            verify_nkey)
from jsraft.server.nats.jwt_auth import JwtTrust
from jsraft.server.settings.auth_config import BCRYPT_PREFIXES, ClientAuthConfig, UserConfig

__all__ = ["AuthRefused", "Authenticator", "Grant", "decode_signature", "new_nonce", "nkey_public_bytes", "verify_nkey"]


def _password_ok(configured: str, given: str) -> bool:
    if configured.startswith(BCRYPT_PREFIXES):
        try:
            return bcrypt.checkpw(given.encode(), configured.encode())
        except ValueError:
            return False
    return hmac.compare_digest(configured.encode(), given.encode())


def _text(options: dict[str, Any], key: str) -> str | None:
    value = options.get(key)
    return value if isinstance(value, str) and value else None


class Authenticator:
    """Checks CONNECT credentials against one `ClientAuthConfig` (read-only: safe from worker threads)."""

    def __init__(self, config: ClientAuthConfig) -> None:
        self.config = config.validate()
        self.users = {user.user: user for user in config.users if user.user}
        self.nkeys = {user.nkey: user for user in config.users if user.nkey}
        self.trust = JwtTrust(config.trust) if config.trust is not None else None

    @property
    def wants_nonce(self) -> bool:
        return bool(self.nkeys) or self.trust is not None

    def _grant(self, user: UserConfig | None) -> Grant:
        if user is None:
            return Grant("token", self.config.default_permissions)
        return Grant(user.identity, user.permissions or self.config.default_permissions, user.account)

    def authenticate(self, options: dict[str, Any], nonce: str | None, host: str | None = None) -> Grant:
        """The grant for a CONNECT's `options` from a client at `host`, or `AuthRefused` (invariants 1–5)."""
        if self.trust is not None:
            return self.trust.authenticate(options, nonce, host)
        config = self.config
        token, user_name = _text(options, "auth_token"), _text(options, "user")
        nkey = _text(options, "nkey")
        if config.token is not None:
            if token is None:
                raise AuthRefused("no token given")
            if not hmac.compare_digest(config.token.encode(), token.encode()):
                raise AuthRefused("bad token")
            return self._grant(None)
        if nkey is not None and self.nkeys:
            return self._check_nkey(nkey, _text(options, "sig"), nonce)
        if user_name is not None:
            user = self.users.get(user_name)
            if user is None:
                raise AuthRefused(f"unknown user {user_name!r}")
            if user.password is not None and not _password_ok(user.password, _text(options, "pass") or ""):
                raise AuthRefused(f"bad password for user {user_name!r}")
            return self._grant(user)
        if config.no_auth_user is not None and token is None and nkey is None:
            return self._grant(self.users[config.no_auth_user])
        raise AuthRefused("no credentials given" if token is None else "a token given where users are configured")

    def _check_nkey(self, nkey: str, sig: str | None, nonce: str | None) -> Grant:
        user = self.nkeys.get(nkey)
        if user is None:
            raise AuthRefused(f"unknown nkey {nkey}")
        if sig is None or nonce is None or not verify_nkey(nkey, nonce, sig):
            raise AuthRefused(f"bad signature for nkey {nkey}")
        return self._grant(user)
