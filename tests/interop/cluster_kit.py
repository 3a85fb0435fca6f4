"""Shared steps of the 3-node interop scenarios (counters, schedules, batches): a JetStream API call, an
R3 stream's create, the wait for a stream leader, and the wait until a new stream takes publishes through
every node.

nats-server's meta leader can answer an R3 create with 400/10005 "no suitable peers for placement, peer
offline" when it has not heard from a peer within its window — even after the cluster placed a probe stream
at startup (`bench/nats_servers.py`), when the other system's three processes start beside it on a loaded
machine (seen in CI: `test_batches_cluster.py`, 2026-11-29). `create_stream` asks again on exactly that
answer until its deadline; any other answer, jsraft's included, is returned as it is.

A stream just created on three nodes does not take publishes on every node at once: nats-server 2.15.1
answers "no responders" on a node whose interest in the stream's subjects has not arrived yet (seen under
load), and a scenario that counts sequences cannot retry a publish blindly (a retried publish that did
land would count twice). `ready_on_every_node` instead probes each node with a publish that every server
refuses without storing anything (`Nats-Expected-Stream` naming another stream: 10060, checked before
any feature's own checks), until each answers, or fails after its deadline.
"""

from __future__ import annotations

import asyncio
import json
import time

import nats

DEADLINE_S = 30.0


async def api(nc, subject: str, body: dict | None = None, timeout: float = 5.0) -> dict:
    msg = await nc.request(subject, json.dumps(body).encode() if body is not None else b"", timeout=timeout)
    return json.loads(msg.data)


PEER_OFFLINE = "no suitable peers for placement, peer offline"


async def create_stream(nc, config: dict) -> dict:
    """`STREAM.CREATE` of `config`; asked again while the answer is nats-server's transient 10005 "peer
    offline" (module docstring), for at most `DEADLINE_S`."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        answer = await api(nc, f"$JS.API.STREAM.CREATE.{config['name']}", config, timeout=20)
        error = answer.get("error") or {}
        if error.get("err_code") != 10005 or error.get("description") != PEER_OFFLINE:
            return answer
        assert time.monotonic() < deadline, f"{config['name']}: still {error} after {DEADLINE_S} s"
        await asyncio.sleep(0.1)


async def until_leader(nc, stream: str, not_this: str | None = None) -> str:
    """The stream's leader once there is one (other than `not_this`); a request that goes unanswered
    meanwhile (nats-server while it elects) is asked again."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            leader = ((await api(nc, f"$JS.API.STREAM.INFO.{stream}")).get("cluster") or {}).get("leader")
            if leader and leader != not_this:
                return leader
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            pass
        assert time.monotonic() < deadline, f"no stream leader for {stream} in {DEADLINE_S} s"
        await asyncio.sleep(0.1)


async def ready_on_every_node(conns: list, subject: str) -> None:
    """Wait until a publish on `subject` through each connection reaches the stream (module docstring)."""
    deadline = time.monotonic() + DEADLINE_S
    for conn in conns:
        while True:
            try:
                msg = await conn.request(subject, b"", timeout=5, headers={"Nats-Expected-Stream": "NOT-THIS-ONE"})
                answer = json.loads(msg.data)
                assert answer["error"]["err_code"] == 10060, answer
                break
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                assert time.monotonic() < deadline, f"the stream did not take publishes on {subject} in {DEADLINE_S} s"
                await asyncio.sleep(0.1)
