"""Client authentication on the NATS port: token, users with passwords, NKeys (layer L5).

Owns: `Authenticator`, which checks one CONNECT's credentials against a `ClientAuthConfig` and answers
with the `Grant` (who, with which permissions) or raises `AuthRefused` with a reason fit for a log;
`new_nonce()` for INFO; `verify_nkey()` (an Ed25519 signature of the nonce, checked against the user's
configured public key).

Invariants:
  1. A refusal's reason never contains a secret: it names the user or NKey public key and what was wrong
     ("bad password", "no credentials"), never a password, token, signature or nonce.
  2. Secrets are compared in constant time (`hmac.compare_digest`); a bcrypt hash is checked with
     `bcrypt.checkpw` (slow on purpose: callers run `authenticate` in a worker thread).
  3. An NKey signature is verified over the exact nonce this connection's INFO carried, with the public
     key from the configuration (never one the client sent that is not configured), after checking the
     key's prefix (user) and CRC16.
  4. `no_auth_user`: a CONNECT with no credentials at all is that user; any credential given is checked.

Imports: stdlib (`base64`, `binascii`, `hmac`, `secrets`), bcrypt, cryptography (Ed25519), attrs, L0,
server siblings (`auth_config`).
Reference: nats-server `server/auth.go` (`processClientOrLeafAuthentication`, `comparePasswords`),
nkeys (`PREFIX_BYTE_USER`, CRC16), ADR-14 style nonce signing.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets
from typing import Any

import attrs
import bcrypt
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from jsraft.errors import JsraftError
from jsraft.server.settings.auth_config import BCRYPT_PREFIXES, ClientAuthConfig, Permissions, UserConfig

NKEY_PREFIX_BYTE_USER = 20 << 3  # base32-encodes to 'U'
NONCE_BYTES = 11  # nats-server's nonceRawLen


class AuthRefused(JsraftError):
    """A CONNECT whose credentials do not admit it; `reason` is loggable (invariant 1)."""

    err_code = 20720
    http_code = 401
    default_description = "authorization violation"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@attrs.frozen
class Grant:
    """Who a connection authenticated as, and what it may do (None: everything)."""

    identity: str
    permissions: Permissions | None
    account: str | None = None  # None: the main account (`UserConfig.account`)


def new_nonce() -> str:
    """A fresh nonce for INFO, base64url without padding (nats-server's encoding)."""
    return base64.urlsafe_b64encode(secrets.token_bytes(NONCE_BYTES)).rstrip(b"=").decode()


def _b32decode(text: str) -> bytes:
    return base64.b32decode(text + "=" * (-len(text) % 8))


def nkey_public_bytes(public_key: str) -> bytes:
    """The raw 32-byte Ed25519 key of a user NKey (`U…`); ValueError if prefix or CRC16 is wrong."""
    try:
        raw = _b32decode(public_key)
    except (binascii.Error, ValueError):
        raise ValueError("not base32") from None
    if len(raw) != 35 or raw[0] != NKEY_PREFIX_BYTE_USER:
        raise ValueError("not a user public key")
    if binascii.crc_hqx(raw[:-2], 0) != int.from_bytes(raw[-2:], "little"):
        raise ValueError("CRC16 mismatch")
    return raw[1:33]


def _decode_signature(sig: str) -> bytes:
    """A CONNECT `sig`: base64url without padding (nats-py), or standard base64 (nats-server accepts both)."""
    padded = sig + "=" * (-len(sig) % 4)
    try:
        return base64.urlsafe_b64decode(padded)
    except (binascii.Error, ValueError):
        return base64.b64decode(padded, validate=True)


def verify_nkey(public_key: str, nonce: str, sig: str) -> bool:
    """Whether `sig` is `public_key`'s Ed25519 signature of `nonce` (invariant 3)."""
    try:
        key = Ed25519PublicKey.from_public_bytes(nkey_public_bytes(public_key))
        key.verify(_decode_signature(sig), nonce.encode())
    except (ValueError, binascii.Error, InvalidSignature, TypeError):
        return False
    return True


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

    @property
    def wants_nonce(self) -> bool:
        return bool(self.nkeys)

    def _grant(self, user: UserConfig | None) -> Grant:
        if user is None:
            return Grant("token", self.config.default_permissions)
        return Grant(user.identity, user.permissions or self.config.default_permissions, user.account)

    def authenticate(self, options: dict[str, Any], nonce: str | None) -> Grant:
        """The grant for a CONNECT's `options`, or `AuthRefused` (invariants 1–4)."""
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
