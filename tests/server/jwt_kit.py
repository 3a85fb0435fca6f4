"""Minting NATS JWTs for tests: operators, accounts and users signed with real NKeys (the `nkeys` library).

`Entity` is one key pair (operator `O…`, account `A…`, user `U…`) that can issue claims about another;
`Entity.issue` writes a v2 JWT (header `ed25519-nkey`, signature over `header.payload`), or with
`version=1` the older shape (`type` at the top, `ed25519`, signature over the payload only), as nats-io/jwt
writes them. `creds` renders nats-py's `.creds` file text.
"""

from __future__ import annotations

import base64
import json
import os
import time
from typing import Any

import nkeys

PREFIXES = {"operator": nkeys.PREFIX_BYTE_OPERATOR, "account": nkeys.PREFIX_BYTE_ACCOUNT,
            "user": nkeys.PREFIX_BYTE_USER}


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Entity:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.seed = nkeys.encode_seed(os.urandom(32), PREFIXES[kind])
        self.pair = nkeys.from_seed(bytearray(self.seed))
        self.public = self.pair.public_key.decode()

    def sign(self, data: bytes) -> str:
        return b64url(self.pair.sign(data))

    def issue(self, subject: str, kind: str, nats: dict[str, Any] | None = None, *, version: int = 2,
              **claims: Any) -> str:
        """A JWT of `kind` about `subject`, issued (signed) by this entity."""
        payload: dict[str, Any] = {"jti": b64url(os.urandom(12)), "iat": int(time.time()), "iss": self.public,
                                   "name": kind, "sub": subject, **claims}
        if version == 1:
            payload.update(type=kind, nats=dict(nats or {}))
            header = b64url(json.dumps({"typ": "jwt", "alg": "ed25519"}).encode())
            body = b64url(json.dumps(payload).encode())
            return f"{header}.{body}.{self.sign(body.encode())}"
        payload["nats"] = {**(nats or {}), "type": kind, "version": 2}
        header = b64url(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
        body = b64url(json.dumps(payload).encode())
        return f"{header}.{body}.{self.sign(f'{header}.{body}'.encode())}"


def creds(user_jwt: str, user: Entity) -> str:
    return (f"-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n"
            f"-----BEGIN USER NKEY SEED-----\n{user.seed.decode()}\n------END USER NKEY SEED------\n")


class Realm:
    """An operator, two accounts it signed (`js` with JetStream limits, `plain` without) and their JWTs."""

    def __init__(self) -> None:
        self.operator = Entity("operator")
        self.operator_jwt = self.operator.issue(self.operator.public, "operator")
        self.js, self.plain = Entity("account"), Entity("account")
        self.account_jwts = {
            self.js.public: self.operator.issue(self.js.public, "account",
                                                {"limits": {"mem_storage": -1, "disk_storage": -1}}),
            self.plain.public: self.operator.issue(self.plain.public, "account", {"limits": {}}),
        }

    def user(self, account: Entity | None = None, nats: dict[str, Any] | None = None, **claims: Any
             ) -> tuple[Entity, str]:
        user = Entity("user")
        return user, (account or self.plain).issue(user.public, "user", nats, **claims)
