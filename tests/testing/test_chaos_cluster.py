"""Smoke tests of the chaos cluster harness (`jsraft.testing.chaos.cluster.ChaosCluster`) on real processes:
a coordinated power cut loses no acknowledged message, and the same power cut against the
`ack_before_fsync` mutant does lose acknowledged messages (the harness has teeth).

Method: three `python -m jsraft serve --test-hooks` processes with the shadow disk
(`JSRAFT_TEST_SHADOW_DISK=1`) on free loopback ports; nats-py (asyncio, in this thread) creates the R3
stream CHAOS and publishes 200 messages one at a time, each with a unique `Nats-Msg-Id` and a random
payload, recording the acked `(value, seq, payload hash)`. Then every node is SIGKILLed in one tight loop
and each data directory is rolled back to what it had fsynced (`power_cut(..., "drop")`), the nodes are
restarted, and each node's LOCAL store is read through its test hooks (`replica_read`, not through the
leader). Every wait is a poll with a deadline (`wait_ready`, `_poll_until`); nothing sleeps and hopes.
The mutant test shows the first test can fail: with the WAL fsync skipped, the same steps leave acked
messages missing from the local stores.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from typing import Any

import nats
import pytest
from nats.js.api import StorageType, StreamConfig

from jsraft.testing.chaos.cluster import ChaosCluster
from jsraft.testing.chaos.hooks import HookError
from jsraft.testing.chaos.procs import REGISTRY

STREAM = "CHAOS"
MESSAGES = 200
READY_S = 60.0


async def _publish(url: str, count: int, seed: int) -> dict[str, tuple[int, str]]:
    """Create CHAOS (R3, file storage, 2 min duplicate window) and publish `count` acked messages:
    value -> (seq, payload hash)."""
    rng = random.Random(seed)
    nc = await nats.connect(url, connect_timeout=5, allow_reconnect=False)
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(StreamConfig(name=STREAM, subjects=["chaos.>"], num_replicas=3,
                                         storage=StorageType.FILE, duplicate_window=120))
        acked = {}
        for counter in range(count):
            value = f"c0-{counter}"
            payload = rng.randbytes(rng.randint(32, 4096))
            ack = await js.publish("chaos.0", payload, headers={"Nats-Msg-Id": value}, timeout=10)
            acked[value] = (ack.seq, hashlib.sha256(payload).hexdigest()[:16])
        return acked
    finally:
        await nc.close()


def _local(cluster: ChaosCluster, name: str) -> dict[str, tuple[int, str]] | None:
    """The node's local store as value -> (seq, hash); None while it cannot be read."""
    try:
        return {m["value"]: (m["seq"], m["hash"]) for m in cluster.hooks(name).replica_read_all(STREAM)
                if not m.get("damaged")}
    except HookError:
        return None


def _lost(cluster: ChaosCluster, acked: dict[str, tuple[int, str]]) -> dict[str, list[str]]:
    """Per node, the acked values its local store lacks (or holds with another seq or payload)."""
    lost = {}
    for name in cluster.names:
        local = _local(cluster, name)
        lost[name] = sorted(acked) if local is None else sorted(v for v, at in acked.items() if local.get(v) != at)
    return lost


def _poll_until(predicate: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.2)


def _cut_and_restart(cluster: ChaosCluster, seed: int) -> dict[str, Any]:
    detail = cluster.power_cut(cluster.names, "drop", seed)
    assert not any(cluster.alive(name) for name in cluster.names)
    for name in cluster.names:
        cluster.start_node(name)
    return detail


def test_power_cut_all_nodes_loses_no_acked_message(tmp_path):
    faults: list[tuple] = []
    with ChaosCluster(tmp_path, seed=11, shadow_disk=True, faults_log=lambda *f: faults.append(f)) as cluster:
        cluster.wait_ready(READY_S)
        acked = asyncio.run(_publish(cluster.client_url("n1"), MESSAGES, seed=11))
        assert len(acked) == MESSAGES and len({seq for seq, _ in acked.values()}) == MESSAGES
        detail = _cut_and_restart(cluster, seed=5)
        assert faults[-1][:3] == ("power_cut", "instant", cluster.names) and detail["mode"] == "drop"
        cluster.wait_ready(READY_S, streams=[STREAM])
        # A follower may still be fetching what it lacked; every replica must end up with every acked message.
        lost = _poll_until(lambda: (lambda lost: lost if not any(lost.values()) else None)(_lost(cluster, acked)),
                           READY_S, "every acked message on every replica")
        assert lost == {name: [] for name in cluster.names}
    assert REGISTRY.live() == []  # every process reaped


def test_ack_before_fsync_mutant_loses_acked_messages(tmp_path):
    """The harness has teeth: the same power cut against nodes that ack before the WAL fsync."""
    with ChaosCluster(tmp_path, seed=12, shadow_disk=True, mutant="ack_before_fsync") as cluster:
        cluster.wait_ready(READY_S)
        acked = asyncio.run(_publish(cluster.client_url("n1"), MESSAGES, seed=12))
        assert len(acked) == MESSAGES
        _cut_and_restart(cluster, seed=6)
        # The nodes come back (maybe repairing, maybe without a stream leader): wait until each local store
        # can be read, then count what it lost.
        _poll_until(lambda: all(_local(cluster, name) is not None for name in cluster.names), READY_S,
                    "every node's local store readable")
        lost = _lost(cluster, acked)
        assert all(lost.values()), f"the mutant lost nothing on some node: {[n for n, v in lost.items() if not v]}"
        print({name: len(values) for name, values in lost.items()})
    with open(cluster.log_path("n1")) as log:
        assert "jsraft mutant: ack_before_fsync applied" in log.read()


@pytest.mark.parametrize("bad", ["nope"])
def test_mutant_launcher_refuses_unknown(bad):
    from jsraft.testing.chaos import mutants

    assert mutants.main([bad, "serve"]) == 2
