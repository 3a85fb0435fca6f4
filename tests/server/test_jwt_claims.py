"""Decoding NATS JWTs (`jwt_claims`) and a user JWT's permissions (`jwt_auth.jwt_permissions`), without a node.

Method: JWTs minted with real NKeys (`jwt_kit`) in both claim versions, then each part broken on purpose —
header type and algorithm, a v2 signature presented as v1 and the reverse, an issuer of the wrong key kind,
a newer version, bad base64 — and the decoder must refuse each with `JwtInvalid` naming what was wrong
and never quoting the token; permissions are compared with what nats-server builds from the same claims.
"""

from __future__ import annotations

import base64
import json

import pytest

from jsraft.errors import InvalidConfig
from jsraft.server.nats import jwt_claims
from jsraft.server.nats.jwt_auth import jwt_permissions
from jsraft.server.nats.jwt_claims import JwtInvalid
from jsraft.server.settings.auth_config import ResponsePermission, SubjectPermission

from jwt_kit import Entity, b64url


def _rewrite(token: str, header: dict | None = None, payload: dict | None = None) -> str:
    head, body, sig = token.split(".")
    if header is not None:
        head = b64url(json.dumps(header).encode())
    if payload is not None:
        body = b64url(json.dumps(payload).encode())
    return f"{head}.{body}.{sig}"


def _payload(token: str) -> dict:
    body = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))


@pytest.mark.parametrize("version", [1, 2])
def test_both_versions_decode_and_verify(version):
    account, user = Entity("account"), Entity("user")
    token = account.issue(user.public, "user", {"pub": {"allow": ["a"]}, "issuer_account": account.public},
                          version=version, exp=4_000_000_000)
    claims = jwt_claims.decode(token, "user")
    assert (claims.kind, claims.version, claims.subject) == ("user", version, user.public)
    assert claims.issuer == account.public
    assert claims.issuer_account == account.public and claims.nats["pub"] == {"allow": ["a"]}
    assert jwt_claims.time_problem(claims) is None
    assert jwt_claims.time_problem(claims, now_s=4_000_000_001) == "user JWT is expired"


def test_broken_tokens_are_refused_with_a_reason_that_does_not_quote_them():
    operator, account, user = Entity("operator"), Entity("account"), Entity("user")
    good = account.issue(user.public, "user")
    v1_body = account.issue(user.public, "user", version=1).split(".")[1]
    payload = _payload(good)
    cases = {
        "three parts": good + ".x",
        "not of type 'account'": good,
        "not a JWT type": _rewrite(good, header={"typ": "XYZ", "alg": "ed25519-nkey"}),
        "algorithm": _rewrite(good, header={"typ": "JWT", "alg": "HS256"}),
        "newer": _rewrite(good, payload={**payload, "nats": {**payload["nats"], "version": 3}}),
        "signature does not verify": _rewrite(good, payload={**payload, "name": "changed"}),
        # A v1 body under a v2 signature (which covers the header too) does not verify.
        "does not verify": f"{good.split('.')[0]}.{v1_body}.{good.split('.')[2]}",
        "not base64url": good[:-3] + "!!!",
        "subject is not a user": account.issue(account.public, "user"),
    }
    for reason, token in cases.items():
        kind = "account" if reason.startswith("not of type") else "user"
        with pytest.raises(JwtInvalid) as raised:
            jwt_claims.decode(token, kind)
        assert reason in raised.value.reason and token not in raised.value.reason
    # A user JWT issued by an operator key (users are issued by accounts) fails on the issuer's kind.
    with pytest.raises(JwtInvalid, match="does not verify"):
        jwt_claims.decode(operator.issue(user.public, "user"), "user")


def test_revocations_signing_keys_and_jetstream_limits():
    operator, user = Entity("operator"), Entity("user")
    user_claims = jwt_claims.decode(Entity("account").issue(user.public, "user", iat=100), "user")
    account = Entity("account")
    claims = jwt_claims.decode(operator.issue(account.public, "account", {
        "revocations": {user.public: 100}, "signing_keys": ["AKEY", {"kind": "user_scope", "key": "ASCOPED"}],
        "limits": {"tiered_limits": {"R3": {"disk_storage": 1024}}}}), "account")
    assert jwt_claims.is_revoked(claims, user_claims)
    later = jwt_claims.decode(Entity("account").issue(user.public, "user", iat=101), "user")
    assert not jwt_claims.is_revoked(claims, later)
    assert set(jwt_claims.signing_keys(claims)) == {"AKEY", "ASCOPED"}
    assert jwt_claims.jetstream_enabled(claims)
    plain = jwt_claims.decode(operator.issue(account.public, "account", {"limits": {"disk_storage": 0}}), "account")
    assert not jwt_claims.jetstream_enabled(plain)


def test_permissions_as_nats_server_builds_them():
    assert jwt_permissions({"pub": {}, "sub": {}}) is None  # empty lists: no restriction
    permissions = jwt_permissions({"pub": {"deny": ["x"]}, "sub": {"allow": ["a.>"]},
                                   "resp": {"max": 0, "ttl": 5_000_000_000}})
    assert permissions.publish == SubjectPermission(allow=None, deny=("x",))
    assert permissions.subscribe == SubjectPermission(allow=("a.>",), deny=())
    assert permissions.allow_responses == ResponsePermission(max=1, expires_ms=5000)
    assert jwt_permissions({"resp": {"max": -1}}).allow_responses.expires_ms == 120_000
    with pytest.raises(InvalidConfig, match="not a valid subject"):
        jwt_permissions({"pub": {"allow": ["a..b"]}})
    for malformed in ({"pub": {"allow": "foo"}}, {"pub": ["foo"]}, {"sub": {"deny": [1]}}, {"resp": True}):
        with pytest.raises(ValueError):  # never read as "no restriction"
            jwt_permissions(malformed)
