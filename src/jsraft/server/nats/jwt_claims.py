"""NATS JWTs as values: decoding and verifying operator, account and user claims (layer L5).

Owns: `decode(token, kind)`, which turns one NATS JWT (`header.payload.signature`, base64url without
padding, Ed25519 signed by its issuer's NKey) into `Claims` or raises `JwtInvalid` with a loggable reason;
`time_problem` (`exp`, `nbf`); the readers of the claim fields operator mode needs (signing keys,
revocations, permissions, JetStream limits), for both claim versions nats-io/jwt writes (v1: `type` at the
top; v2: `nats.type`, `nats.version`).

Invariants:
  1. A token is `Claims` only once its signature verified against its `iss` key, and `iss` and `sub` are
     public keys of the kinds the claim type allows (user: issued by an account, subject a user; account:
     issued by an operator, subject an account; operator: issued by an operator). A v1 claim's signature
     covers the payload chunk, a v2 claim's covers `header.payload` (nats-io/jwt `Decode`).
  2. The header is `typ` "JWT" (any case) and `alg` "ed25519" or "ed25519-nkey"; the payload is a JSON
     object of at most `MAX_TOKEN_BYTES`; a claim of a version newer than 2 is refused.
  3. A reason never quotes the token or a signature (client_auth invariant: secrets are not logged); it
     names the claim kind and what was wrong.

Imports: stdlib (`base64`, `binascii`, `json`, `time`), attrs, cryptography (Ed25519), server siblings
(`auth` for NKey public keys). Reference: nats-io/jwt v2 `decoder.go` (`Decode`, `loadClaims`),
`header.go`, `claims.go` (`Validate`), `signingkeys.go`, `types.go`.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from typing import Any

import attrs
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from jsraft.errors import JsraftError
from jsraft.server.nats.credentials import (NKEY_PREFIX_BYTE_ACCOUNT, NKEY_PREFIX_BYTE_OPERATOR, NKEY_PREFIX_BYTE_USER,
                                     nkey_public_bytes)

MAX_TOKEN_BYTES = 1024 * 1024  # nats-io/jwt MaxTokenSize
LIB_VERSION = 2
ALGORITHMS = ("ed25519", "ed25519-nkey")
# claim kind -> (issuer key kind, subject key kind)
KEY_KINDS = {
    "operator": (NKEY_PREFIX_BYTE_OPERATOR, NKEY_PREFIX_BYTE_OPERATOR),
    "account": (NKEY_PREFIX_BYTE_OPERATOR, NKEY_PREFIX_BYTE_ACCOUNT),
    "user": (NKEY_PREFIX_BYTE_ACCOUNT, NKEY_PREFIX_BYTE_USER),
}
ALL_USERS = "*"  # a revocation of every user issued up to its time (nats-io/jwt `All`)


class JwtInvalid(JsraftError):
    """A JWT that does not decode or verify; `reason` is loggable (invariant 3)."""

    err_code = 20721
    http_code = 401
    default_description = "invalid JWT"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@attrs.frozen
class Claims:
    """A verified NATS JWT. `nats`: the claim-specific fields (v1 claims are folded into the same shape)."""

    kind: str
    version: int
    subject: str
    issuer: str
    name: str
    issued_at: int
    expires: int  # 0: never
    not_before: int  # 0: at once
    nats: dict[str, Any] = attrs.field(eq=False, repr=False)

    @property
    def issuer_account(self) -> str:
        """A user JWT signed by an account's signing key names its account here ("" when not)."""
        return str(self.nats.get("issuer_account") or "")


def _b64url(chunk: str, what: str) -> bytes:
    try:
        return base64.b64decode(chunk + "=" * (-len(chunk) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise JwtInvalid(f"{what} is not base64url") from None


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise JwtInvalid(f"{what} is not JSON") from None
    if not isinstance(value, dict):
        raise JwtInvalid(f"{what} is not a JSON object")
    return value


def _check_header(chunk: str) -> None:
    header = _json_object(_b64url(chunk, "JWT header"), "JWT header")
    if str(header.get("typ", "")).upper() != "JWT":
        raise JwtInvalid("JWT header: not a JWT type")
    if str(header.get("alg", "")).lower() not in ALGORITHMS:
        raise JwtInvalid("JWT header: not an ed25519 NKey algorithm")


def _int(payload: dict[str, Any], key: str) -> int:
    value = payload.get(key, 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise JwtInvalid(f"claim {key} is not a number")
    return int(value)


def _verify(issuer: str, prefix_byte: int, signed: str, signature: bytes) -> None:
    try:
        key = Ed25519PublicKey.from_public_bytes(nkey_public_bytes(issuer, prefix_byte))
        key.verify(signature, signed.encode())
    except (ValueError, TypeError, InvalidSignature):
        raise JwtInvalid("signature does not verify against its issuer") from None


def decode(token: str, kind: str) -> Claims:
    """The verified claims of `token`, which must be of `kind` (operator, account, user; invariants 1–3)."""
    if not isinstance(token, str) or not token:
        raise JwtInvalid(f"no {kind} JWT")
    if len(token) > MAX_TOKEN_BYTES:
        raise JwtInvalid(f"{kind} JWT larger than {MAX_TOKEN_BYTES} bytes")
    chunks = token.split(".")
    if len(chunks) != 3:
        raise JwtInvalid(f"{kind} JWT does not have three parts")
    _check_header(chunks[0])
    payload = _json_object(_b64url(chunks[1], "JWT payload"), "JWT payload")
    nats = payload.get("nats") or {}
    if not isinstance(nats, dict):
        raise JwtInvalid("JWT payload: nats is not an object")
    version = 1 if payload.get("type") else nats.get("version", 0)
    if not isinstance(version, int) or version > LIB_VERSION:
        raise JwtInvalid("JWT of an unsupported (newer) version")
    found = payload.get("type") or nats.get("type")
    if found != kind:
        raise JwtInvalid(f"the JWT is not of type {kind!r} (it is {str(found)[:20]!r})")
    issuer, subject = payload.get("iss"), payload.get("sub")
    if not isinstance(issuer, str) or not isinstance(subject, str):
        raise JwtInvalid(f"{kind} JWT without iss or sub")
    issuer_kind, subject_kind = KEY_KINDS[kind]
    signed = chunks[1] if version <= 1 else f"{chunks[0]}.{chunks[1]}"
    _verify(issuer, issuer_kind, signed, _b64url(chunks[2], "JWT signature"))
    try:
        nkey_public_bytes(subject, subject_kind)
    except ValueError:
        raise JwtInvalid(f"{kind} JWT subject is not a {kind} public key") from None
    if version <= 1 and payload.get("issuer_account"):  # v1 kept it beside the claims data
        nats = {**nats, "issuer_account": payload["issuer_account"]}
    return Claims(kind=kind, version=version, subject=subject, issuer=issuer, name=str(payload.get("name", "")),
                  issued_at=_int(payload, "iat"), expires=_int(payload, "exp"), not_before=_int(payload, "nbf"),
                  nats=nats)


def time_problem(claims: Claims, now_s: float | None = None) -> str | None:
    """Why `claims` are not valid at `now_s` (expired, not yet valid), or None (nats-io/jwt `Validate`)."""
    now = int(time.time() if now_s is None else now_s)
    if claims.expires > 0 and now > claims.expires:
        return f"{claims.kind} JWT is expired"
    if claims.not_before > 0 and claims.not_before > now:
        return f"{claims.kind} JWT is not yet valid"
    return None


def signing_keys(claims: Claims) -> dict[str, dict[str, Any] | None]:
    """An operator's or account's signing keys: key -> its scope (a `user_scope` object) or None."""
    keys: dict[str, dict[str, Any] | None] = {}
    for entry in claims.nats.get("signing_keys") or ():
        if isinstance(entry, str):
            keys[entry] = None
        elif isinstance(entry, dict) and isinstance(entry.get("key"), str):
            keys[entry["key"]] = entry
        else:
            raise JwtInvalid(f"{claims.kind} JWT: a signing key that is neither a key nor a scope")
    return keys


def is_revoked(account: Claims, user: Claims) -> bool:
    """Whether `account` revoked `user` (by its key or every user, issued at or before the revocation)."""
    revocations = account.nats.get("revocations") or {}
    if not isinstance(revocations, dict):
        return False
    return any(isinstance(revocations.get(key), (int, float)) and revocations[key] >= user.issued_at
               for key in (user.subject, ALL_USERS))


def jetstream_enabled(account: Claims) -> bool:
    """Whether the account JWT enables JetStream (a non-zero storage limit, or any tier)."""
    limits = account.nats.get("limits") or {}
    if any(limits.get(key) not in (None, 0) for key in ("mem_storage", "disk_storage")):
        return True
    tiers = limits.get("tiered_limits") or {}
    return any(isinstance(tier, dict) and any(tier.get(key) not in (None, 0) for key in ("mem_storage", "disk_storage"))
               for tier in tiers.values())
