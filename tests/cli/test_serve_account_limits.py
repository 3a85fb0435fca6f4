"""An account's JetStream limits and domain from a nats-server config file, and a pull request whose
client stopped listening, on real `jsraft serve` processes with real nats-py clients.

Method: a real `python -m jsraft serve -c FILE -js` process per test (`test_serve_accounts.start`: a free
port, polled until ready); nats-py drives it as nats.py's own `AccountLimitsTest` and
`test_pull_subscribe_limits` do. The expected answers — error codes and descriptions, usage and
reservation figures, the `$JS.API.INFO` fields, `num_pending` — are the ones nats-server 2.15.1 gives
for the same config and requests (captured with a nats-py probe against the real binary): the byte
figures are nats-server's file-store sizes (30 bytes + subject + payload per message). Waits are nats-py
request timeouts; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import json

import nats
import pytest
from nats.js.api import AccountLimits, ConsumerConfig, StorageType
from nats.js.errors import APIError

from test_serve_accounts import start
from test_serve_like_nats import stop

LIMITS = """
jetstream { domain: "hub" }
no_auth_user: u
accounts {
  A {
    users: [ { user: u } ]
    jetstream {
      max_mem: 4KB, max_file: 9000, max_streams: 4, max_consumers: 2, max_ack_pending: 100,
      memory_max_stream_bytes: 2048, store_max_stream_bytes: 4096, max_bytes_required: true
    }
  }
}
"""

# nats.py's tests/conf/js-limits.conf (v2.15.0), the domain named differently.
NATS_PY_LIMITS = """
jetstream: { domain: "test-domain" }
no_auth_user: "foo"
accounts: {
  A {
    users: [{ user: "foo" }]
    jetstream: {
      max_mem: 64MB, max_file: 32MB, max_streams: 10, max_consumers: 20, max_ack_pending: 100,
      memory_max_stream_bytes: 2048, store_max_stream_bytes: 4096, max_stream_bytes: true
    }
  }
}
"""


def run_against(tmp_path, conf: str | None, scenario, timeout_s: float = 60.0) -> dict:
    """Start `jsraft serve -js` (with `conf` as its config file), run `scenario(nc, seen)` with one nats-py
    connection, stop the server; what the scenario saw."""
    args = ["-js", f"-sd={tmp_path / 'js'}"]
    if conf is not None:
        (tmp_path / "server.conf").write_text(conf)
        args += ["-c", str(tmp_path / "server.conf")]
    process, url = start(tmp_path, *args)

    async def connected() -> dict:
        nc = await nats.connect(url)
        seen: dict = {}
        try:
            await scenario(nc, seen)
        finally:
            await nc.close()
        return seen

    try:
        return asyncio.run(asyncio.wait_for(connected(), timeout_s))
    finally:
        stop(process)


async def refused(call) -> tuple[int, int, str]:
    """(code, err_code, description) of the API error `call` must raise."""
    with pytest.raises(APIError) as error:
        await call
    return error.value.code, error.value.err_code, error.value.description


async def limits_scenario(nc, seen: dict) -> None:
    js = nc.jetstream()
    seen["no max_bytes"] = await refused(js.add_stream(name="F0", subjects=["f0"]))
    seen["file over"] = await refused(js.add_stream(name="F0", subjects=["f0"], max_bytes=65536))
    seen["memory over"] = await refused(js.add_stream(name="M0", subjects=["m0"], max_bytes=4096,
                                                      storage=StorageType.MEMORY))
    seen["stream consumers"] = await refused(js.add_stream(name="F0", subjects=["f0"], max_bytes=100,
                                                           max_consumers=5))
    await js.add_stream(name="F1", subjects=["f1"], max_bytes=4096)
    await js.add_stream(name="F2", subjects=["f2"], max_bytes=4096)
    seen["storage reserved"] = await refused(js.add_stream(name="F3", subjects=["f3"], max_bytes=1000))
    # F2's own old reservation is not counted against its update (4096 + 4000 <= 9000).
    seen["update"] = (await js.update_stream(name="F2", subjects=["f2"], max_bytes=4000)).config.max_bytes
    seen["update no max_bytes"] = await refused(js.update_stream(name="F2", subjects=["f2"]))
    await js.add_stream(name="M1", subjects=["m1"], max_bytes=2048, storage=StorageType.MEMORY)
    await js.add_stream(name="M2", subjects=["m2"], max_bytes=2048, storage=StorageType.MEMORY)
    seen["streams"] = await refused(js.add_stream(name="F3", subjects=["f3"], max_bytes=10))
    first = await js.add_consumer("F1", ConsumerConfig(durable_name="c1", ack_policy="explicit"))
    seen["default max_ack_pending"] = first.config.max_ack_pending
    seen["ack pending over"] = await refused(js.add_consumer("F1", ConsumerConfig(
        durable_name="c2", ack_policy="explicit", max_ack_pending=500)))
    await js.add_consumer("F1", ConsumerConfig(durable_name="c2", ack_policy="explicit", max_ack_pending=50))
    seen["consumers"] = await refused(js.add_consumer("F1", ConsumerConfig(durable_name="c3",
                                                                             ack_policy="explicit")))
    await js.add_consumer("F2", ConsumerConfig(durable_name="c1", ack_policy="explicit"))  # a cap per stream
    seen["info"] = json.loads((await nc.request("$JS.API.INFO", b"", timeout=10)).data)


def test_account_limits_refuse_with_nats_server_codes(tmp_path):
    seen = run_against(tmp_path, LIMITS, limits_scenario)
    assert seen["no max_bytes"] == (400, 10113, "account requires a stream config to have max bytes set")
    over = (400, 10122, "stream max bytes exceeds account limit max stream bytes")
    assert seen["file over"] == over and seen["memory over"] == over
    assert seen["stream consumers"] == (400, 10026, "maximum consumers limit reached")
    assert seen["storage reserved"] == (500, 10047, "insufficient storage resources available")
    assert seen["update"] == 4000
    assert seen["update no max_bytes"] == (400, 10113, "account requires a stream config to have max bytes set")
    assert seen["streams"] == (400, 10027, "maximum number of streams reached")
    assert seen["default max_ack_pending"] == 100
    assert seen["ack pending over"] == (400, 10121, "consumer max ack pending exceeds system limit of 100")
    assert seen["consumers"] == (400, 10026, "maximum consumers limit reached")
    info = seen["info"]
    assert (info["streams"], info["consumers"], info["reserved_storage"], info["reserved_memory"]) == \
        (4, 3, 4096 + 4000, 2048 + 2048)
    assert info["limits"] == {"max_memory": 4096, "max_storage": 9000, "max_streams": 4, "max_consumers": 2,
                              "max_ack_pending": 100, "memory_max_stream_bytes": 2048,
                              "storage_max_stream_bytes": 4096, "max_bytes_required": True}
    assert info["domain"] == "hub" and "tiers" not in info


async def usage_scenario(nc, seen: dict) -> None:
    js = nc.jetstream()
    await refused(js.add_stream(name="limits", subjects=["limits"]))
    await js.add_stream(name="limits", subjects=["limits"], max_bytes=128)
    await js.publish("limits", b"A" * 55)
    for _ in range(5):
        await js.publish("limits", b"A")
    seen["messages"] = (await js.stream_info("limits")).state.messages
    seen["account"] = await js.account_info()
    seen["plain"] = json.loads((await nc.request("$JS.API.INFO", b"", timeout=10)).data)
    seen["domain"] = json.loads((await nc.request("$JS.test-domain.API.INFO", b"", timeout=10)).data)
    seen["stream domain"] = json.loads(
        (await nc.request("$JS.test-domain.API.STREAM.INFO.limits", b"", timeout=10)).data)["domain"]
    listed = json.loads((await nc.request("$JS.API.STREAM.LIST", b"{}", timeout=10)).data)
    update = json.dumps({"name": "limits", "subjects": ["limits"], "max_bytes": 128}).encode()
    updated = json.loads((await nc.request("$JS.API.STREAM.UPDATE.limits", update, timeout=10)).data)
    seen["list and update domain"] = (listed["streams"][0]["domain"], updated["domain"])
    in_domain = nc.jetstream(domain="test-domain")  # every API subject under $JS.test-domain.API
    psub = await in_domain.pull_subscribe("limits", durable="d", stream="limits")
    msgs = await psub.fetch(3, timeout=10)
    for msg in msgs:
        await msg.ack_sync()
    seen["fetched"] = [msg.data for msg in msgs]
    seen["after"] = json.loads((await nc.request("$JS.API.INFO", b"", timeout=10)).data)


def test_account_info_usage_limits_and_domain_as_nats_server(tmp_path):
    seen = run_against(tmp_path, NATS_PY_LIMITS, usage_scenario)
    assert seen["messages"] == 3  # 91 + 5 × 37 bytes held to max_bytes 128: the last three, 111 bytes
    account = seen["account"]
    assert (account.memory, account.storage, account.streams, account.consumers) == (0, 111, 1, 0)
    assert account.limits == AccountLimits(max_memory=67108864, max_storage=33554432, max_streams=10,
                                           max_consumers=20, max_ack_pending=100, memory_max_stream_bytes=2048,
                                           storage_max_stream_bytes=4096, max_bytes_required=True)
    assert (account.api.total, account.api.errors) == (3, 1)  # the refused create, the create, the info
    assert account.domain == "test-domain" and account.tiers is None
    plain, domain = seen["plain"], seen["domain"]
    assert list(plain) == ["type", "memory", "storage", "reserved_memory", "reserved_storage", "streams",
                           "consumers", "limits", "domain", "api"]  # nats-server's fields, in its order
    assert plain["reserved_storage"] == 128 and plain["reserved_memory"] == 0
    assert domain["api"]["total"] == plain["api"]["total"] + 1  # one account, counted on either prefix
    assert {**domain, "api": None} == {**plain, "api": None}
    assert seen["stream domain"] == "test-domain"
    assert seen["list and update domain"] == ("test-domain", "test-domain")
    assert seen["fetched"] == [b"A", b"A", b"A"]
    assert seen["after"]["consumers"] == 1


async def unsubscribed_pull_scenario(nc, seen: dict) -> None:
    js = nc.jetstream()
    await js.add_stream(name="TEST2", subjects=["a3"])
    sub = await js.pull_subscribe("a3", "two")
    await js.publish("a3", b"first")
    seen["first"] = [msg.data for msg in await sub.fetch(1, timeout=10)]
    await js.publish("a3", b"last message")
    seen["pending before"] = (await sub.consumer_info()).num_pending
    await sub.unsubscribe()
    with pytest.raises(nats.errors.TimeoutError):
        await sub.fetch(1, timeout=1)  # its reply subject has no subscriber: nothing may be sent there
    info = await sub.consumer_info()
    seen["pending after"] = (info.num_pending, info.num_ack_pending)
    again = await js.pull_subscribe("a3", "two")
    seen["again"] = [msg.data for msg in await again.fetch(1, timeout=10)]


def test_a_pull_request_nobody_listens_to_any_more_leaves_the_message_pending(tmp_path):
    seen = run_against(tmp_path, None, unsubscribed_pull_scenario)
    assert seen["first"] == [b"first"]
    assert seen["pending before"] == 1
    assert seen["pending after"] == (1, 1)  # "last message" still pending; "first" unacked
    assert seen["again"] == [b"last message"]
