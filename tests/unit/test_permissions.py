"""Permission decisions and NKey checks as pure functions (`server.permissions`, `server.auth`).

Method: table-driven cases of nats-server's rules — deny wins, an absent allow list allows all and an
empty one nothing, a wildcard subscription must lie inside an allow filter and is filtered by a deny
filter it overlaps, responses are admitted `max` times before they expire — and NKey public keys
corrupted one character at a time (the CRC16 must catch it), signatures over the wrong data refused.
"""

from __future__ import annotations

import base64
import os

import nkeys
import pytest

from jsraft.errors import InvalidConfig
from jsraft.server.nats.auth import Authenticator, AuthRefused, nkey_public_bytes, verify_nkey
from jsraft.server.settings.auth_config import (
    ClientAuthConfig, Permissions, ResponsePermission, SubjectPermission, UserConfig,
)
from jsraft.server.nats.permissions import ConnPermissions, Responses, permission_error_text


def conn(pub_allow=None, pub_deny=(), sub_allow=None, sub_deny=(), responses=None) -> ConnPermissions:
    return ConnPermissions(Permissions(publish=SubjectPermission(allow=pub_allow, deny=pub_deny),
                                       subscribe=SubjectPermission(allow=sub_allow, deny=sub_deny),
                                       allow_responses=responses))


@pytest.mark.parametrize("perms, subject, allowed", [
    (conn(), "anything.at.all", True),
    (conn(pub_allow=()), "anything", False),
    (conn(pub_allow=("a.*",)), "a.b", True),
    (conn(pub_allow=("a.*",)), "a.b.c", False),
    (conn(pub_allow=("a.>",), pub_deny=("a.secret",)), "a.secret", False),
    (conn(pub_deny=(">",)), "x", False),
    (conn(responses=ResponsePermission()), "x", False),  # allow_responses alone: publish only responses
])
def test_publish(perms, subject, allowed):
    assert perms.can_publish(subject) is allowed
    assert perms.can_publish(subject) is allowed  # the cached answer is the same


@pytest.mark.parametrize("sub_allow, sub_deny, subject, queue, allowed, filtered", [
    (None, (), ">", None, True, False),
    (("a.>",), (), "a.*", None, True, False),
    (("a.*",), (), "a.>", None, False, False),  # could receive a.b.c, which a.* does not allow
    (("a.>",), ("a.secret",), "a.secret", None, False, False),
    (("a.>",), ("a.secret",), "a.*", None, True, True),  # overlaps the deny filter: filtered at delivery
    (("a.> workers",), (), "a.b", "workers", True, False),
    (("a.> workers",), (), "a.b", None, False, False),
])
def test_subscribe(sub_allow, sub_deny, subject, queue, allowed, filtered):
    perms = conn(sub_allow=sub_allow, sub_deny=sub_deny)
    assert perms.can_subscribe(subject, queue) is allowed
    if not allowed:
        return  # a refused subscription has nothing to filter
    deny = perms.delivery_deny(subject)
    assert (deny is not None) is filtered
    if filtered:
        assert deny.matches("a.secret") and not deny.matches("a.open")


def test_responses_are_bounded_in_count_and_time():
    responses = Responses(ResponsePermission(max=2, expires_ms=1000))
    responses.received("_INBOX.1", now_s=10.0)
    assert responses.take("_INBOX.1", 10.5) and responses.take("_INBOX.1", 10.6)
    assert not responses.take("_INBOX.1", 10.7)
    responses.received("_INBOX.2", now_s=10.0)
    assert not responses.take("_INBOX.2", 11.5)
    assert not responses.take("never.received", 10.0)


def test_error_texts_are_nats_servers():
    assert permission_error_text("Publish", "a.b") == 'Permissions Violation for Publish to "a.b"'
    assert permission_error_text("Subscription", "a", "q") == 'Permissions Violation for Subscription to "a" using queue "q"'


def test_nkey_public_keys_and_signatures():
    pair = nkeys.from_seed(bytearray(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)))
    public = pair.public_key.decode()
    assert len(nkey_public_bytes(public)) == 32
    signature = base64.urlsafe_b64encode(pair.sign(b"nonce-1")).rstrip(b"=").decode()
    assert verify_nkey(public, "nonce-1", signature)
    assert verify_nkey(public, "nonce-1", base64.b64encode(pair.sign(b"nonce-1")).decode())  # standard b64
    assert not verify_nkey(public, "nonce-2", signature)
    for position in range(1, len(public)):
        changed = public[:position] + ("A" if public[position] != "A" else "B") + public[position + 1:]
        with pytest.raises(ValueError):
            nkey_public_bytes(changed)
    account = nkeys.from_seed(bytearray(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_ACCOUNT)))
    with pytest.raises(ValueError, match="not a user"):
        nkey_public_bytes(account.public_key.decode())


@pytest.mark.parametrize("config, message", [
    (ClientAuthConfig(token="t", users=(UserConfig(user="a", password="p"),)), "cannot both"),
    (ClientAuthConfig(), "give a token"),
    (ClientAuthConfig(users=(UserConfig(user="a"), UserConfig(user="a"))), "listed twice"),
    (ClientAuthConfig(users=(UserConfig(nkey="UBAD"),)), "user public key"),
    (ClientAuthConfig(users=(UserConfig(user="a", permissions=Permissions(
        publish=SubjectPermission(allow=("a..b",)))),)), "not a valid subject"),
    (ClientAuthConfig(users=(UserConfig(user="a"),), no_auth_user="b"), "no_auth_user"),
    (ClientAuthConfig(users=(UserConfig(user="a", account=""),)), "account must not be empty"),
])
def test_bad_auth_configs_are_refused(config, message):
    with pytest.raises(InvalidConfig, match=message):
        Authenticator(config)


def test_no_auth_user_admits_a_connect_without_credentials_only():
    auth = Authenticator(ClientAuthConfig(users=(UserConfig(user="guest"), UserConfig(user="x", password="pw")),
                                          no_auth_user="guest"))
    assert auth.authenticate({}, None).identity == "guest"
    assert auth.authenticate({"user": "x", "pass": "pw"}, None).identity == "x"
    with pytest.raises(AuthRefused, match="bad password for user 'x'"):
        auth.authenticate({"user": "x", "pass": "nope"}, None)
