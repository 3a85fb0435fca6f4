"""What every client authenticator shares: the refusal, the grant, nonces and NKey signatures (layer L5).

Owns: `AuthRefused` (a refusal with a loggable reason), `Grant` (who a connection is and what it may do),
`new_nonce()` for INFO, and the NKey helpers — `nkey_public_bytes` (a public key's raw Ed25519 bytes after
checking its kind prefix and CRC16), `decode_signature`, `verify_nkey` (the Ed25519 signature of a nonce).
`auth` (token, users, NKeys) and `jwt_auth` (operator mode) both build on it.

Invariants:
  1. A public key is used only after its prefix byte (user `U`, account `A`, operator `O`) and CRC16
     checked out; a wrong kind of key never verifies anything.
  2. `verify_nkey` answers False, never raises, for any malformed key, nonce or signature.

Imports: stdlib (`base64`, `binascii`, `secrets`), attrs, cryptography (Ed25519), L0, settings
(`auth_config`). Reference: nkeys (`PREFIX_BYTE_*`, CRC16), nats-server `server/auth.go`.
"""

from __future__ import annotations

import base64
import binascii
import secrets

import attrs
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from jsraft.errors import JsraftError
from jsraft.server.settings.auth_config import Permissions

NKEY_PREFIX_BYTE_USER = 20 << 3  # base32-encodes to 'U'
NKEY_PREFIX_BYTE_ACCOUNT = 0  # 'A'
NKEY_PREFIX_BYTE_OPERATOR = 14 << 3  # 'O'
KEY_KIND_NAMES = {NKEY_PREFIX_BYTE_USER: "user", NKEY_PREFIX_BYTE_ACCOUNT: "account",
                  NKEY_PREFIX_BYTE_OPERATOR: "operator"}
NONCE_BYTES = 11  # nats-server's nonceRawLen


class AuthRefused(JsraftError):
    """A CONNECT whose credentials do not admit it; `reason` is loggable (auth invariant 1)."""

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
    expires_s: float | None = None  # a user's or account's JWT `exp` (unix seconds): the connection closes then
    expired_text: str = "User Authentication Expired"  # the -ERR it closes with (nats-server's words)


def new_nonce() -> str:
    """A fresh nonce for INFO, base64url without padding (nats-server's encoding)."""
    return base64.urlsafe_b64encode(secrets.token_bytes(NONCE_BYTES)).rstrip(b"=").decode()


def _b32decode(text: str) -> bytes:
    return base64.b32decode(text + "=" * (-len(text) % 8))


def nkey_public_bytes(public_key: str, prefix_byte: int = NKEY_PREFIX_BYTE_USER) -> bytes:
    """The raw 32-byte Ed25519 key of an NKey public key of one kind (a user's `U…` unless
    `prefix_byte` says otherwise); ValueError if prefix or CRC16 is wrong."""
    try:
        raw = _b32decode(public_key)
    except (binascii.Error, ValueError, TypeError):
        raise ValueError("not base32") from None
    if len(raw) != 35 or raw[0] != prefix_byte:
        raise ValueError(f"not a {KEY_KIND_NAMES.get(prefix_byte, 'expected')} public key")
    if binascii.crc_hqx(raw[:-2], 0) != int.from_bytes(raw[-2:], "little"):
        raise ValueError("CRC16 mismatch")
    return raw[1:33]


def decode_signature(sig: str) -> bytes:
    """A CONNECT `sig`: base64url without padding (nats-py), or standard base64 (nats-server accepts both)."""
    padded = sig + "=" * (-len(sig) % 4)
    try:
        return base64.urlsafe_b64decode(padded)
    except (binascii.Error, ValueError):
        return base64.b64decode(padded, validate=True)


def verify_nkey(public_key: str, nonce: str, sig: str) -> bool:
    """Whether `sig` is `public_key`'s Ed25519 signature of `nonce` (invariant 2)."""
    try:
        key = Ed25519PublicKey.from_public_bytes(nkey_public_bytes(public_key))
        key.verify(decode_signature(sig), nonce.encode())
    except (ValueError, binascii.Error, InvalidSignature, TypeError):
        return False
    return True
