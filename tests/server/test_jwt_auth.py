"""Operator (JWT) mode on a real node's NATS port: trusted operator, MEMORY resolver, user JWTs.

Method: JWTs minted for each test with real NKeys (`jwt_kit`: an operator, accounts it signs, users the
accounts sign); a real node (`jsraft.open_node`, free ports) configured through `ClientAuthConfig.trust`
or a nats-server config file. Hand-driven raw clients (`nats_kit.RawClient`) read the exact lines the node
sends — INFO with `auth_required` and a `nonce`, `-ERR 'Authorization Violation'` then EOF (the bytes
nats-server 2.15.1 sends for the same refusals, compared by hand against its binary) — and nats-py connects
with `.creds` files as its own JWT tests do. Every refusal is also checked in the logs: neither the JWT,
the signature, the nonce nor the seed appears (caplog). No sleeps: events are read with deadlines.
"""

from __future__ import annotations

import logging

import pytest

import jsraft
from jsraft.errors import InvalidConfig
from jsraft.protocol import Connect, Msg
from jsraft.server import NodeConfig
from jsraft.server.settings.auth_config import ClientAuthConfig, TrustConfig

from jwt_kit import Entity, Realm, creds
from nats_kit import RawClient, errors_in, in_asyncio, nats_connect, single

AUTH_VIOLATION = "Authorization Violation"


def trust_config(tmp_path, realm: Realm, accounts: dict[str, str] | None = None) -> NodeConfig:
    trust = TrustConfig(operators=(realm.operator_jwt,), resolver_preload=accounts or realm.account_jwts)
    return single(tmp_path, client_auth=ClientAuthConfig(trust=trust))


async def refused(node, caplog, user: Entity | None, user_jwt: str, **kwargs) -> str:
    """The connection is refused as nats-server refuses it, and nothing secret reached the log (returned)."""
    client = await RawClient.connect(node.client_address)
    options = {"jwt": user_jwt, **kwargs.get("extra", {})}
    signer = kwargs.get("sign_with", user)
    if signer is not None:
        options["sig"] = signer.sign(client.info["nonce"].encode())
    await client.send(client.protocol.send(Connect(options)))
    assert errors_in(await client.read_to_eof()) == [AUTH_VIOLATION]
    await client.aclose()
    logged = caplog.text
    assert "authorization violation" in logged
    for secret in (user_jwt, options.get("sig"), client.info["nonce"], user.seed.decode() if user else None):
        assert not secret or secret not in logged
    caplog.clear()
    return logged


async def admitted(node, user: Entity, user_jwt: str) -> RawClient:
    client = await RawClient.connect(node.client_address)
    options = {"jwt": user_jwt, "sig": user.sign(client.info["nonce"].encode())}
    await client.send(client.protocol.send(Connect(options)))
    assert errors_in(await client.round_trip()) == []
    return client


async def admit_once(node, user: Entity, user_jwt: str) -> None:
    client = await admitted(node, user, user_jwt)
    await client.aclose()


async def admitted_subscriber(node, first: tuple[Entity, str], second: tuple[Entity, str], sub: bytes
                              ) -> tuple[RawClient, RawClient]:
    """Two admitted clients, the second subscribed with `sub` (confirmed by a round trip)."""
    clients = (await admitted(node, *first), await admitted(node, *second))
    await clients[1].send(sub)
    await clients[1].round_trip()
    return clients


async def test_good_creds_connect_with_nats_py_and_request_reply(tmp_path):
    realm = Realm()
    user, user_jwt = realm.user()
    path = tmp_path / "user.creds"
    path.write_text(creds(user_jwt, user))
    async with jsraft.open_node(trust_config(tmp_path, realm)) as node:
        async def scenario(url: str) -> bytes:
            nc = await nats_connect(url, user_credentials=str(path))

            async def helper(msg) -> None:
                await nc.publish(msg.reply, b"OK!")

            await nc.subscribe("help", cb=helper)
            await nc.flush()
            reply = await nc.request("help", b"I need help", timeout=5)
            await nc.close()
            return reply.data

        assert await in_asyncio(scenario, node.url) == b"OK!"


async def test_v1_claims_and_account_signing_keys_are_admitted(tmp_path):
    realm = Realm()
    signer = Entity("account")
    account = Entity("account")
    realm.account_jwts[account.public] = realm.operator.issue(account.public, "account",
                                                             {"signing_keys": [signer.public]})
    async with jsraft.open_node(trust_config(tmp_path, realm)) as node:
        user = Entity("user")
        await admit_once(node, user, realm.plain.issue(user.public, "user", {"pub": {}, "sub": {}}, version=1))
        signed_by_key = signer.issue(user.public, "user", {"issuer_account": account.public})
        await admit_once(node, user, signed_by_key)


async def test_scoped_signing_keys_impose_their_template(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="jsraft")
    realm = Realm()
    scoped, templated, account = Entity("account"), Entity("account"), Entity("account")
    realm.account_jwts[account.public] = realm.operator.issue(account.public, "account", {"signing_keys": [
        {"kind": "user_scope", "key": scoped.public, "template": {"pub": {"allow": ["scoped.>"]}}},
        {"kind": "user_scope", "key": templated.public, "template": {"pub": {"allow": ["{{name()}}.>"]}}}]})
    async with jsraft.open_node(trust_config(tmp_path, realm)) as node:
        user = Entity("user")
        client = await admitted(node, user, scoped.issue(user.public, "user", {"issuer_account": account.public}))
        await client.send(b"PUB scoped.a 1\r\nx\r\nPUB other 1\r\ny\r\n")
        assert errors_in(await client.round_trip()) == ['Permissions Violation for Publish to "other"']
        await client.aclose()
        with_own = scoped.issue(user.public, "user", {"issuer_account": account.public, "pub": {"allow": [">"]}})
        assert "carries no permissions" in await refused(node, caplog, user, with_own)
        placeholders = templated.issue(user.public, "user", {"issuer_account": account.public})
        assert "templates are not supported" in await refused(node, caplog, user, placeholders)


async def test_trusted_keys_instead_of_an_operator_jwt(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="jsraft")
    realm = Realm()
    trust = TrustConfig(trusted_keys=(realm.operator.public,), resolver_preload=realm.account_jwts)
    async with jsraft.open_node(single(tmp_path, client_auth=ClientAuthConfig(trust=trust))) as node:
        user, user_jwt = realm.user()
        await admit_once(node, user, user_jwt)
    other = Realm()  # its accounts are signed by an operator this node does not trust
    trust = TrustConfig(trusted_keys=(realm.operator.public,), resolver_preload=other.account_jwts)
    async with jsraft.open_node(single(tmp_path, client_auth=ClientAuthConfig(trust=trust))) as node:
        user, user_jwt = other.user()
        assert "not signed by a trusted operator" in await refused(node, caplog, user, user_jwt)
    with pytest.raises(InvalidConfig, match="conflicting options"):
        TrustConfig(operators=(realm.operator_jwt,), trusted_keys=(realm.operator.public,)).validate("x")


async def test_bad_jwts_and_signatures_are_refused_without_leaking_secrets(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="jsraft")
    realm = Realm()
    user, user_jwt = realm.user()
    head, body, sig = user_jwt.split(".")
    other = Entity("user")
    async with jsraft.open_node(trust_config(tmp_path, realm)) as node:
        # A payload changed under the account's signature (another subject), and garbage.
        forged = realm.plain.issue(other.public, "user").split(".")[1]
        await refused(node, caplog, other, f"{head}.{forged}.{sig}")
        await refused(node, caplog, user, "not-a-jwt")
        # The right JWT, the nonce signed with the wrong seed, or not signed at all.
        await refused(node, caplog, user, user_jwt, sign_with=other)
        await refused(node, caplog, user, user_jwt, sign_with=None)
        # No JWT at all: a user/password or token is no credential in operator mode.
        await refused(node, caplog, None, "", extra={"user": "a", "pass": "b", "auth_token": "t"})
        assert node.clients.stats.auth_failures == 5


async def test_expired_not_yet_valid_and_revoked_users_are_refused(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="jsraft")
    realm = Realm()
    revoked, revoked_jwt = realm.user(realm.js, iat=1_700_000_000)
    realm.account_jwts[realm.js.public] = realm.operator.issue(
        realm.js.public, "account", {"limits": {"disk_storage": -1}, "revocations": {revoked.public: 1_700_000_001}})
    async with jsraft.open_node(trust_config(tmp_path, realm)) as node:
        expired, expired_jwt = realm.user(exp=1_600_000_000)
        assert "user JWT is expired" in await refused(node, caplog, expired, expired_jwt)
        early, early_jwt = realm.user(nbf=4_000_000_000)
        assert "user JWT is not yet valid" in await refused(node, caplog, early, early_jwt)
        assert "authentication revoked" in await refused(node, caplog, revoked, revoked_jwt)
        elsewhere, elsewhere_jwt = realm.user(nats={"src": ["10.9.8.0/24"]})
        assert "not allowed by its src" in await refused(node, caplog, elsewhere, elsewhere_jwt)
        here, here_jwt = realm.user(nats={"src": ["127.0.0.0/8"]})
        await admit_once(node, here, here_jwt)


async def test_bearer_tokens_and_connection_types(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="jsraft")
    realm = Realm()
    strict = Entity("account")
    realm.account_jwts[strict.public] = realm.operator.issue(strict.public, "account",
                                                            {"limits": {"disallow_bearer": True}})
    async with jsraft.open_node(trust_config(tmp_path, realm)) as node:
        bearer, bearer_jwt = realm.user(nats={"bearer_token": True})
        client = await RawClient.connect(node.client_address, {"jwt": bearer_jwt})  # no signature needed
        assert errors_in(await client.round_trip()) == []
        await client.aclose()
        user, user_jwt = realm.user(strict, nats={"bearer_token": True})
        assert "does not allow bearer tokens" in await refused(node, caplog, None, user_jwt)
        user, user_jwt = realm.user(nats={"allowed_connection_types": ["WEBSOCKET", "MQTT"]})
        assert "connection type not allowed" in await refused(node, caplog, user, user_jwt)
        user, user_jwt = realm.user(nats={"allowed_connection_types": ["STANDARD"]})
        await admit_once(node, user, user_jwt)


async def test_unknown_account_wrong_operator_and_foreign_signer_are_refused(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="jsraft")
    realm = Realm()
    rogue_operator = Entity("operator")
    rogue_account = Entity("account")
    accounts = {**realm.account_jwts,
                rogue_account.public: rogue_operator.issue(rogue_account.public, "account")}
    async with jsraft.open_node(trust_config(tmp_path, realm, accounts)) as node:
        stranger = Entity("account")  # not in the resolver
        user, user_jwt = realm.user(stranger)
        assert f"account {stranger.public} is not in the resolver" in await refused(node, caplog, user, user_jwt)
        user, user_jwt = realm.user(rogue_account)  # in the resolver, signed by an untrusted operator
        assert "not signed by a trusted operator" in await refused(node, caplog, user, user_jwt)
        # Signed by a key the account never listed, claiming to be the account's.
        user = Entity("user")
        foreign = Entity("account").issue(user.public, "user", {"issuer_account": realm.plain.public})
        assert "its issuer is not account" in await refused(node, caplog, user, foreign)


async def test_permissions_from_the_jwt_are_enforced(tmp_path):
    realm = Realm()
    limited, limited_jwt = realm.user(nats={"pub": {"allow": ["foo.>"], "deny": ["foo.secret"]},
                                            "sub": {"allow": ["foo.>", "_INBOX.>"]}})
    watcher, watcher_jwt = realm.user()
    async with jsraft.open_node(trust_config(tmp_path, realm)) as node:
        limited_client, watcher_client = await admitted_subscriber(node, (limited, limited_jwt), (watcher, watcher_jwt),
                                                                   b"SUB > 1\r\n")
        await limited_client.send(b"PUB bar 1\r\nx\r\nPUB foo.secret 1\r\ny\r\nPUB foo.ok 1\r\nz\r\nSUB bar 7\r\n")
        assert errors_in(await limited_client.round_trip()) == [
            'Permissions Violation for Publish to "bar"', 'Permissions Violation for Publish to "foo.secret"',
            'Permissions Violation for Subscription to "bar"']
        msg = await watcher_client.expect(Msg)
        assert (msg.subject, msg.payload) == ("foo.ok", b"z")
        for client in (limited_client, watcher_client):
            await client.aclose()


async def test_accounts_are_isolated_and_jetstream_is_the_js_accounts(tmp_path):
    realm = Realm()
    js_user, js_jwt = realm.user(realm.js)
    plain_user, plain_jwt = realm.user(realm.plain)
    async with jsraft.open_node(trust_config(tmp_path, realm)) as node:
        plain_client, js_client = await admitted_subscriber(node, (plain_user, plain_jwt), (js_user, js_jwt),
                                                            b"SUB shared 1\r\n")
        await plain_client.send(b"PUB shared 4\r\nnope\r\n")
        await plain_client.round_trip()
        await js_client.send(b"PUB shared 3\r\nyes\r\n")
        msg = await js_client.expect(Msg)
        assert msg.payload == b"yes"  # the other account's publish never arrived first

        async def scenario(url: str, path: str) -> int:
            nc = await nats_connect(url, user_credentials=path)
            info = await nc.jetstream().add_stream(name="JWTS", subjects=["jwts.>"])
            await nc.close()
            return info.config.num_replicas

        path = tmp_path / "js.creds"
        path.write_text(creds(js_jwt, js_user))
        assert await in_asyncio(scenario, node.url, str(path)) == 1
        for client in (js_client, plain_client):
            await client.aclose()


async def test_a_user_is_disconnected_when_its_or_its_accounts_jwt_expires(tmp_path):
    import time

    realm = Realm()
    soon = Entity("account")
    # Before the node starts, so with room for a slow start on a loaded machine.
    realm.account_jwts[soon.public] = realm.operator.issue(soon.public, "account", exp=int(time.time()) + 10)
    async with jsraft.open_node(trust_config(tmp_path, realm)) as node:
        user, user_jwt = realm.user(exp=int(time.time()) + 3)
        account_user, account_user_jwt = realm.user(soon, exp=int(time.time()) + 3600)
        client = await admitted(node, user, user_jwt)
        account_client = await admitted(node, account_user, account_user_jwt)
        assert errors_in(await client.read_to_eof(timeout_s=10)) == ["User Authentication Expired"]
        assert errors_in(await account_client.read_to_eof(timeout_s=20)) == ["Account Authentication Expired"]
        for each in (client, account_client):
            await each.aclose()


def test_config_file_operator_resolver_and_refusals(tmp_path):
    realm = Realm()
    (tmp_path / "op.jwt").write_text(f"-----BEGIN TEST OPERATOR JWT-----\n{realm.operator_jwt}\n"
                                     "------END TEST OPERATOR JWT------\n")
    preload = "\n".join(f'  {key}: "{jwt}"' for key, jwt in realm.account_jwts.items())
    text = f"operator: {tmp_path / 'op.jwt'}\nresolver: MEMORY\nresolver_preload = {{\n{preload}\n}}\n"
    (tmp_path / "n.conf").write_text(text)
    config = NodeConfig.from_file(str(tmp_path / "n.conf"), {"name": "n1", "store_dir": str(tmp_path / "d")})
    assert config.client_auth.trust.operators == (realm.operator_jwt,)
    assert dict(config.client_auth.trust.resolver_preload) == realm.account_jwts
    assert realm.operator_jwt not in repr(config)
    trusted = text.replace(f"operator: {tmp_path / 'op.jwt'}", f"trusted_keys: [{realm.operator.public}]")
    (tmp_path / "t.conf").write_text(trusted)
    config = NodeConfig.from_file(str(tmp_path / "t.conf"), {"name": "n1", "store_dir": str(tmp_path / "d")})
    assert (config.client_auth.trust.operators, config.client_auth.trust.trusted_keys) == ((), (realm.operator.public,))
    inline = text.replace(str(tmp_path / "op.jwt"), realm.operator_jwt)
    for bad, message in ((inline.replace("MEMORY", 'URL("http://localhost:9090/jwt/v1/accounts/")'),
                          "only the MEMORY resolver"),
                         (inline.replace("resolver: MEMORY\n", ""), "require an account resolver"),
                         (inline + "authorization { user: a, password: b }\n", "operator mode does not allow")):
        (tmp_path / "bad.conf").write_text(bad)
        with pytest.raises(InvalidConfig, match=message):
            NodeConfig.from_file(str(tmp_path / "bad.conf"), {"name": "n1", "store_dir": str(tmp_path / "d")})


async def test_bad_preloaded_jwts_stop_the_node_at_start(tmp_path):
    realm = Realm()
    key = realm.plain.public
    for accounts, message in (({key: "garbage"}, "resolver_preload"),
                              ({key: realm.account_jwts[realm.js.public]}, "is account"),
                              ({key: realm.operator_jwt}, "not of type 'account'")):
        with pytest.raises(InvalidConfig, match=message):
            async with jsraft.open_node(trust_config(tmp_path, realm, accounts)):
                pass
    with pytest.raises(InvalidConfig, match="operator"):
        TrustConfig(operators=(), resolver_preload={}).validate("x")


def test_unenforced_account_limits_are_named_at_start(caplog):
    from jsraft.server.nats.jwt_auth import JwtTrust

    realm = Realm()
    limited = Entity("account")
    realm.account_jwts[limited.public] = realm.operator.issue(
        limited.public, "account", {"limits": {"subs": 10, "conn": -1}, "exports": [{"subject": "x"}]})
    with caplog.at_level(logging.WARNING, logger="jsraft"):
        trust = JwtTrust(TrustConfig(operators=(realm.operator_jwt,), resolver_preload=realm.account_jwts))
    assert [r.getMessage() for r in caplog.records] == [
        f"account {limited.public} (account): exports, subs in its JWT are not enforced by jsraft"]
    assert trust.jetstream_account == realm.js.public
