"""KV keys with wildcard tokens through nats-py against real `jsraft serve` processes, one node and three,
as nats-py's `test_kv_simple` and `test_key_validation_bypass` use them (no retries, no name flags).

Method: one module-scoped jsraft system per topology (`bench/nats_servers.py`'s `JsraftServers`, one
`jsraft serve` process per node). nats-server stores a message published to `$KV.B.hello.*` under that
literal subject (a KV purge of `hello.*`), and its `Nats-Rollup: sub` purges what the subject matches as a
filter; a key `x.>` written with `validate_keys=False` is stored and read back the same way. Each
scenario asserts nats-server 2.15.1's answers (values counted by `status`, revisions, not-found errors).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from bench_servers import load_servers

servers = load_servers()
nats = pytest.importorskip("nats")
from nats.js.errors import KeyNotFoundError, NotFoundError  # noqa: E402


@pytest.fixture(scope="module", params=[1, 3], ids=["one-node", "three-nodes"])
def system(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"kvwild{request.param}")
    with servers.JsraftServers(str(root), nodes=request.param) as jsraft_system:
        yield jsraft_system


def run(scenario, *args, timeout_s: float = 120.0):
    return asyncio.run(asyncio.wait_for(scenario(*args), timeout_s))


async def purge_wildcard_key(url: str, replicas: int) -> dict:
    nc = await nats.connect(url, connect_timeout=10, allow_reconnect=False)
    try:
        js = nc.jetstream(timeout=10)
        kv = await js.create_key_value(bucket=f"W{uuid.uuid4().hex[:6].upper()}", history=5, replicas=replicas)
        await kv.put("hello", b"world")
        for i in range(10):
            await kv.put(f"hello.{i}", b"v")
        await kv.purge("hello.*")  # published to `$KV.<bucket>.hello.*`
        out: dict = {"values": (await kv.status()).values}
        try:
            await kv.get("hello.5")
        except NotFoundError as error:  # KeyNotFoundError is one
            out["hello.5"] = type(error).__name__
        out["hello"] = ((await kv.get("hello")).value, (await kv.get("hello")).revision)
        seq = await kv.put("x.>", b"a", validate_keys=False)
        got = await kv.get("x.>", validate_keys=False)
        seq2 = await kv.update("x.>", b"b", last=seq, validate_keys=False)
        await kv.delete("x.>", validate_keys=False)
        try:
            await kv.get("x.>", validate_keys=False)
        except KeyNotFoundError as error:
            out["x.> after delete"] = error.op
        out["x.>"] = (got.value, seq2 > seq)
        return out
    finally:
        await nc.close()


def test_a_kv_purge_of_a_wildcard_key_and_wildcard_keys_behave_as_on_nats_server(system):
    out = run(purge_wildcard_key, system.urls[0], len(system.urls))
    assert out == {"values": 2, "hello.5": "KeyNotFoundError", "hello": (b"world", 1),
                   "x.> after delete": "DEL", "x.>": (b"a", True)}
