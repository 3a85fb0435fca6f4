"""The chaos harness's process faults on real `jsraft serve` processes (`ChaosCluster`: pause/resume, wall
clock skew, stepdown, kill during startup replay, restart) and the process registry's cleanup when the
harness itself is killed with SIGTERM.

Method: real OS processes and real sockets; every fault is checked from the outside through the node's
test hooks (a paused node's hooks time out and answer again after SIGCONT; the skewed clock is read back;
a killed node's process is gone) and through `faults_log`. The registry test runs a small harness in a
subprocess that starts a long-lived child, SIGTERMs that harness, and checks the child's process group is
gone. Waits poll with deadlines.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
import subprocess
import sys
import time

import nats
import pytest
from nats.js.api import StreamConfig

from jsraft.testing.chaos.cluster import ChaosCluster
from jsraft.testing.chaos.hooks import HookError
from jsraft.testing.chaos.procs import REGISTRY

READY_S = 60.0


def _until(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
    return result


async def _create_stream(url: str) -> None:
    nc = await nats.connect(url, connect_timeout=5, allow_reconnect=False)
    try:
        await nc.jetstream(timeout=10).add_stream(StreamConfig(name="CHAOS", subjects=["chaos.>"], num_replicas=3))
    finally:
        await nc.close()


def test_process_faults_on_a_real_cluster(tmp_path):
    faults: list[tuple] = []
    with ChaosCluster(tmp_path, seed=3, faults_log=lambda *f: faults.append(f)) as cluster:
        cluster.wait_ready(READY_S)
        assert cluster.set_clock("n2", offset_s=288)["offset_s"] == 288
        assert abs(cluster.hooks("n2").clock()["wall_ns"] / 1e9 - time.time() - 288) < 30
        cluster.pause("n1")
        with pytest.raises(HookError):
            cluster.hooks("n1", timeout_s=1.0).meta_state()
        cluster.resume("n1")
        assert "streams" in cluster.hooks("n1", timeout_s=10).meta_state()
        asyncio.run(_create_stream(cluster.client_url("n3")))
        cluster.wait_ready(READY_S, streams=["CHAOS"])
        leader = _until(lambda: cluster.stream_leader("CHAOS"), READY_S, "a stream leader")
        assert cluster.stream_stepdown("CHAOS").get("success") is True
        _until(lambda: cluster.stream_leader("CHAOS") not in (None, leader), READY_S, "a new stream leader")
        delay = cluster.kill_during_replay("n3")
        assert 0 <= delay <= 0.5 and not cluster.alive("n3")
        cluster.restart("n3", delay_s=0.1)
        cluster.wait_ready(READY_S, streams=["CHAOS"])
        assert cluster.hooks("n3").streams() == ["CHAOS"]
        assert os.path.isdir(cluster.store_dir("n3", "CHAOS")) and os.path.isdir(cluster.wal_dir("n3", "CHAOS"))
    kinds = [(kind, phase) for kind, phase, _, _ in faults]
    assert kinds == [("clock", "instant"), ("pause", "start"), ("pause", "end"), ("stepdown", "instant"),
                     ("kill", "instant"), ("kill", "instant"), ("restart", "instant")]
    assert REGISTRY.live() == []


_HARNESS = """
import sys, time
from jsraft.testing.chaos.procs import NodeProcess
child = NodeProcess("sleeper", [sys.executable, "-c", "import time; time.sleep(600)"], sys.argv[1])
print(child.pid, flush=True)
time.sleep(600)
"""


def test_registry_kills_children_when_the_harness_gets_sigterm(tmp_path):
    harness = subprocess.Popen([sys.executable, "-c", _HARNESS, str(tmp_path / "sleeper.log")],
                               stdout=subprocess.PIPE, text=True)
    try:
        child = int(harness.stdout.readline())
        os.kill(child, 0)  # running
        harness.send_signal(signal.SIGTERM)
        assert harness.wait(timeout=30) == -signal.SIGTERM
        _until(lambda: not _exists(child), 10, "the child to be gone")
    finally:
        harness.kill()
        harness.wait()


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _established_tcp() -> list[tuple[tuple[str, int], tuple[str, int]]]:
    """(local, remote) address pairs of this machine's established IPv4 TCP connections (/proc/net/tcp)."""
    def address(text: str) -> tuple[str, int]:
        ip, port = text.split(":")
        return socket.inet_ntoa(struct.pack("<I", int(ip, 16))), int(port, 16)

    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.read().splitlines()[1:]]
    return [(address(row[1]), address(row[2])) for row in rows if row[3] == "01"]


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="needs Linux /proc/net/tcp")
def test_hosts_mode_binds_listeners_and_outgoing_links_to_each_nodes_address(tmp_path):
    """The network-namespace mode's addressing, on the host's loopback (127.0.0.0/8 is all local on
    Linux): every listener is on the node's own address and every cluster link comes FROM the dialling
    node's address, so per-address drop rules can cut a node off."""
    hosts = ["127.0.0.11", "127.0.0.12", "127.0.0.13"]
    with ChaosCluster(tmp_path, hosts=hosts, shadow_disk=False) as cluster:
        cluster.wait_ready(READY_S)
        assert cluster.client_url("n2") == f"nats://127.0.0.12:{cluster.ports['n2']['client']}"
        listeners = {(cluster.hosts[name], cluster.ports[name]["cluster"]): name for name in cluster.names}
        links = _until(lambda: [(local, listeners[remote]) for local, remote in _established_tcp()
                                if remote in listeners] or None, READY_S, "cluster links")
        assert {local[0] for local, _ in links} <= set(hosts)
        assert all(local[0] != cluster.hosts[to] for local, to in links)  # nobody dials itself
