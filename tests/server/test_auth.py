"""Client authentication and permissions on a real node's NATS port.

Method: a real node (`jsraft.open_node`, free ports) configured through `NodeConfig.client_auth`;
hand-driven raw clients (`nats_kit.RawClient`) for the exact protocol lines nats-server sends — `INFO`
with `auth_required` and `nonce`, `-ERR 'Authorization Violation'` then EOF, `-ERR 'Permissions
Violation for …'` with the connection kept — and nats-py for the JetStream read-only user. Every
refusal is checked for its effect too: a refused publish reaches no subscriber, a refused admin request
changes nothing. No sleeps: events are read with deadlines.
"""

from __future__ import annotations

import base64
import os

import bcrypt
import nkeys
import pytest

import jsraft
from jsraft.protocol import Msg
from jsraft.server.settings.auth_config import (
    ClientAuthConfig, Permissions, ResponsePermission, SubjectPermission, UserConfig,
)

from nats_kit import RawClient, errors_in, in_asyncio, nats_connect, single

pytestmark = pytest.mark.trio

AUTH_VIOLATION = "Authorization Violation"


def new_nkey() -> tuple[str, nkeys.KeyPair]:
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    pair = nkeys.from_seed(bytearray(seed))
    return pair.public_key.decode(), pair


def sign(pair: nkeys.KeyPair, nonce: str) -> str:
    return base64.urlsafe_b64encode(pair.sign(nonce.encode())).rstrip(b"=").decode()


async def refused(node, options: dict | None, *, before: bytes = b"") -> list[str]:
    """Connect, send `before` then CONNECT `options` (if any); the errors seen before the server closed."""
    client = await RawClient.connect(node.client_address)
    assert client.info.get("auth_required") is True
    if before:
        await client.send(before)
    if options is not None:
        await client.send(client.protocol.send(jsraft.protocol.Connect(options)))
    events = await client.read_to_eof()
    await client.aclose()
    return errors_in(events)


async def admitted(node, options: dict) -> RawClient:
    client = await RawClient.connect(node.client_address, options)
    assert errors_in(await client.round_trip()) == []
    return client


async def test_token_good_bad_missing_and_ops_before_connect(tmp_path):
    config = single(tmp_path, client_auth=ClientAuthConfig(token="s3cr3t-token"))
    async with jsraft.open_node(config) as node:
        client = await admitted(node, {"auth_token": "s3cr3t-token", "verbose": False})
        await client.aclose()
        assert await refused(node, {"auth_token": "wrong"}) == [AUTH_VIOLATION]
        assert await refused(node, {}) == [AUTH_VIOLATION]
        assert await refused(node, None, before=b"PUB foo 1\r\nx\r\n") == [AUTH_VIOLATION]
        assert node.clients.stats.auth_failures == 3


async def test_users_plain_and_bcrypt_passwords(tmp_path):
    hashed = bcrypt.hashpw(b"b-pass-word", bcrypt.gensalt(rounds=4)).decode()
    users = (UserConfig(user="alice", password="a-pass-word"), UserConfig(user="bob", password=hashed))
    async with jsraft.open_node(single(tmp_path, client_auth=ClientAuthConfig(users=users))) as node:
        for user, password in (("alice", "a-pass-word"), ("bob", "b-pass-word")):
            client = await admitted(node, {"user": user, "pass": password})
            await client.aclose()
        assert await refused(node, {"user": "alice", "pass": "b-pass-word"}) == [AUTH_VIOLATION]
        assert await refused(node, {"user": "bob", "pass": hashed}) == [AUTH_VIOLATION]  # the hash is no password
        assert await refused(node, {"user": "carol", "pass": "a-pass-word"}) == [AUTH_VIOLATION]
        assert await refused(node, {"auth_token": "a-pass-word"}) == [AUTH_VIOLATION]


async def test_nkey_signature_of_the_nonce(tmp_path):
    public, pair = new_nkey()
    _, other = new_nkey()
    config = single(tmp_path, client_auth=ClientAuthConfig(users=(UserConfig(nkey=public),)))
    async with jsraft.open_node(config) as node:
        client = await RawClient.connect(node.client_address)
        nonce = client.info["nonce"]
        await client.send(client.protocol.send(jsraft.protocol.Connect({"nkey": public, "sig": sign(pair, nonce)})))
        assert errors_in(await client.round_trip()) == []
        await client.aclose()
        # Signed by another key; signed over another nonce; no signature at all.
        for make_sig in (lambda n: sign(other, n), lambda n: sign(pair, n + "x"), lambda n: None):
            client = await RawClient.connect(node.client_address)
            options = {"nkey": public}
            sig = make_sig(client.info["nonce"])
            if sig is not None:
                options["sig"] = sig
            await client.send(client.protocol.send(jsraft.protocol.Connect(options)))
            assert errors_in(await client.read_to_eof()) == [AUTH_VIOLATION]
            await client.aclose()


async def test_no_connect_within_the_auth_timeout(tmp_path):
    config = single(tmp_path, client_auth=ClientAuthConfig(token="some-token", timeout_ms=200))
    async with jsraft.open_node(config) as node:
        assert await refused(node, None) == ["Authentication Timeout"]


def perms(pub_allow=None, pub_deny=(), sub_allow=None, sub_deny=(), responses=False) -> Permissions:
    return Permissions(publish=SubjectPermission(allow=pub_allow, deny=pub_deny),
                       subscribe=SubjectPermission(allow=sub_allow, deny=sub_deny),
                       allow_responses=ResponsePermission() if responses else None)


async def test_publish_and_subscribe_permissions(tmp_path):
    users = (UserConfig(user="admin", password="admin-pw"),
             UserConfig(user="limited", password="limited-pw",
                        permissions=perms(pub_allow=("foo.>", "_INBOX.>"), pub_deny=("foo.secret",),
                                          sub_allow=("foo.>", "_INBOX.>"), sub_deny=("foo.secret",))))
    async with jsraft.open_node(single(tmp_path, client_auth=ClientAuthConfig(users=users))) as node:
        admin = await admitted(node, {"user": "admin", "pass": "admin-pw"})
        limited = await admitted(node, {"user": "limited", "pass": "limited-pw"})
        await admin.send(b"SUB > 1\r\n")
        await admin.round_trip()
        # A forbidden publish: nats-server's -ERR, the connection stays, nobody receives it.
        await limited.send(b"PUB bar 1\r\nx\r\nPUB foo.secret 1\r\ny\r\nPUB foo.ok 1\r\nz\r\n")
        assert errors_in(await limited.round_trip()) == ['Permissions Violation for Publish to "bar"',
                                                         'Permissions Violation for Publish to "foo.secret"']
        msg = await admin.expect(Msg)
        assert (msg.subject, msg.payload) == ("foo.ok", b"z")
        await admin.send(b"PUB after 1\r\nq\r\n")
        assert [e.subject for e in await admin.round_trip() if isinstance(e, Msg)] == ["after"]
        # A forbidden subscription: refused; a wildcard overlapping the deny list never sees denied subjects.
        await limited.send(b"SUB bar 1\r\nSUB foo.secret 2\r\nSUB > 3\r\nSUB foo.* 4\r\n")
        assert errors_in(await limited.round_trip()) == ['Permissions Violation for Subscription to "bar"',
                                                         'Permissions Violation for Subscription to "foo.secret"',
                                                         'Permissions Violation for Subscription to ">"']
        await admin.send(b"PUB foo.secret 1\r\ns\r\nPUB foo.open 1\r\no\r\n")
        await admin.round_trip()
        events = await limited.round_trip()
        assert [(e.subject, e.sid) for e in events if isinstance(e, Msg)] == [("foo.open", "4")]
        await limited.aclose()
        await admin.aclose()


async def test_allow_responses_lets_a_responder_answer_only_requests(tmp_path):
    users = (UserConfig(user="requester", password="req-pw"),
             UserConfig(user="responder", password="resp-pw", permissions=perms(sub_allow=("svc",), responses=True)))
    async with jsraft.open_node(single(tmp_path, client_auth=ClientAuthConfig(users=users))) as node:
        requester = await admitted(node, {"user": "requester", "pass": "req-pw"})
        responder = await admitted(node, {"user": "responder", "pass": "resp-pw"})
        await responder.send(b"SUB svc 1\r\n")
        await responder.round_trip()
        await requester.send(b"SUB reply.1 9\r\nPUB svc reply.1 3\r\nreq\r\n")
        await requester.round_trip()
        request = await responder.expect(Msg)
        assert request.reply == "reply.1"
        # The first answer is allowed; a second one (max 1) and any other subject are not.
        await responder.send(b"PUB reply.1 2\r\nok\r\nPUB reply.1 4\r\nmore\r\nPUB other 1\r\nx\r\n")
        assert errors_in(await responder.round_trip()) == ['Permissions Violation for Publish to "reply.1"',
                                                           'Permissions Violation for Publish to "other"']
        answer = await requester.expect(Msg)
        assert answer.payload == b"ok"
        assert [e for e in await requester.round_trip() if isinstance(e, Msg)] == []
        await requester.aclose()
        await responder.aclose()


READ_ONLY = Permissions(
    publish=SubjectPermission(allow=("$JS.API.INFO", "$JS.API.STREAM.INFO.*", "$JS.API.STREAM.NAMES",
                                     "$JS.API.STREAM.LIST", "$JS.API.STREAM.MSG.GET.*",
                                     "$JS.API.CONSUMER.INFO.*.*", "$JS.API.CONSUMER.LIST.*")),
    subscribe=SubjectPermission(allow=("_INBOX.>",)))


async def test_read_only_user_reads_but_cannot_create_purge_or_delete(tmp_path):
    users = (UserConfig(user="admin", password="admin-pw"),
             UserConfig(user="reader", password="reader-pw", permissions=READ_ONLY))
    async with jsraft.open_node(single(tmp_path, client_auth=ClientAuthConfig(users=users))) as node:
        async def scenario(url: str) -> list[str]:
            import nats.errors

            admin = await nats_connect(url, user="admin", password="admin-pw")
            await admin.jetstream().add_stream(name="ORDERS", subjects=["orders.*"])
            await admin.jetstream().publish("orders.1", b"one")
            errors: list[str] = []

            async def error_cb(error: Exception) -> None:
                errors.append(str(error))

            reader = await nats_connect(url, user="reader", password="reader-pw", error_cb=error_cb)
            js = reader.jetstream(timeout=1.0)
            info = await js.stream_info("ORDERS")
            assert info.state.messages == 1
            assert (await js.get_msg("ORDERS", 1)).data == b"one"
            for attempt in (lambda: js.add_stream(name="EVIL", subjects=["evil"]), lambda: js.purge_stream("ORDERS"),
                            lambda: js.delete_stream("ORDERS")):
                with pytest.raises(nats.errors.TimeoutError):
                    await attempt()
            await reader.close()
            assert (await admin.jetstream().stream_info("ORDERS")).state.messages == 1
            assert await admin.jetstream().streams_info() and len(await admin.jetstream().streams_info()) == 1
            await admin.close()
            return errors

        errors = await in_asyncio(scenario, node.url)
        # nats-py lower-cases the server's -ERR text when it reports it.
        assert errors == [f'nats: permissions violation for publish to "$js.api.stream.{what}"'
                          for what in ("create.evil", "purge.orders", "delete.orders")], errors
