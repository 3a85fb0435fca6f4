"""Accounts in a nats-server config file, and nodes started without a store directory, on real processes.

Method: a real `python -m jsraft serve -c FILE` process whose file declares two accounts (A with
JetStream, B without) and `no_auth_user`; real nats-py clients of each. A publish in one account must
reach its own subscribers and never the other's: the barrier is a message in the other account sent
after the first was seen, which must be the first (and only) one its subscriber gets. JetStream must
answer A's clients and give B's no responders. Then: three nodes started with neither `-sd` nor `-js`
(as nats-py's client tests start nats-server) must run side by side, each on a private store directory
that is gone after SIGTERM, and one left behind by a SIGKILLed node is removed by the next start.
"""

from __future__ import annotations

import asyncio
import os
import signal

import nats
import pytest
from nats.errors import NoRespondersError

from test_serve_like_nats import poll, ports_file, read_until_ready, serve, stop

ACCOUNTS = """
accounts {
  A { users = [ {user: a1, password: pa}, {user: a2, password: pa} ], jetstream: enabled }
  B { users = [ {user: b1, password: pb}, {user: b2, password: pb} ] }
}
no_auth_user: b1
"""


def start(tmp_path, *args: str, env=None):
    process = serve("-p", "-1", "-a", "127.0.0.1", "--ports_file_dir", str(tmp_path), *args, env=env)
    read_until_ready(process)
    url = poll(lambda: ports_file(tmp_path, process.pid), "ports file")["nats"][0]
    return process, url


async def first_message(sub, timeout_s: float = 10.0) -> bytes:
    return (await sub.next_msg(timeout=timeout_s)).data


async def check_isolation(url: str) -> None:
    host = url.removeprefix("nats://")
    a1 = await nats.connect(f"nats://a1:pa@{host}")
    a2 = await nats.connect(f"nats://a2:pa@{host}")
    b1 = await nats.connect(url)  # no credentials: no_auth_user b1
    b2 = await nats.connect(f"nats://b2:pb@{host}")
    try:
        a_sub, b_sub = await a1.subscribe("x"), await b2.subscribe("x")
        await a1.flush()
        await b2.flush()
        await a2.publish("x", b"from A")
        await a2.flush()
        assert await first_message(a_sub) == b"from A"
        await b1.publish("x", b"from B")
        await b1.flush()
        assert await first_message(b_sub) == b"from B"  # A's message, sent before, never came
        await a2.publish("x", b"A again")
        await a2.flush()
        assert await first_message(a_sub) == b"A again"  # B's message, sent before, never came
        info = await a1.request("$JS.API.INFO", b"", timeout=10)
        assert b'"type":"io.nats.jetstream.api.v1.account_info_response"' in info.data
        with pytest.raises(NoRespondersError):
            await b1.request("$JS.API.INFO", b"", timeout=10)
    finally:
        for conn in (a1, a2, b1, b2):
            await conn.close()


def test_accounts_isolate_subjects_and_only_the_jetstream_account_has_jetstream(tmp_path):
    conf = tmp_path / "accounts.conf"
    conf.write_text(ACCOUNTS)
    process, url = start(tmp_path, "-js", "-sd", str(tmp_path / "js"), "-c", str(conf))
    try:
        asyncio.run(check_isolation(url))
    finally:
        stop(process)


def private_dirs(tmp_path) -> list[str]:
    base = tmp_path / "jsraft"
    return sorted(name for name in os.listdir(base) if name.startswith("private-")) if base.exists() else []


def test_nodes_without_a_store_dir_run_side_by_side_on_private_stores(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    for i in range(3):
        os.mkdir(tmp_path / f"p{i}")  # each node's ports file apart
    nodes = [start(tmp_path / f"p{i}", env=env) for i in range(3)]
    assert private_dirs(tmp_path) == sorted(f"private-{process.pid}" for process, _ in nodes)
    for process, _ in nodes[1:]:
        stop(process)
    killed = nodes[0][0]
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=60)
    assert private_dirs(tmp_path) == [f"private-{killed.pid}"]  # a killed node cannot clean up
    process, _ = start(tmp_path / "p0", env=env)
    try:
        assert private_dirs(tmp_path) == [f"private-{process.pid}"]  # the next start removed it
    finally:
        stop(process)
    assert private_dirs(tmp_path) == []
