"""Two processes on one store directory are refused (issue 14, hole 2).

Method: a real `jsraft serve` process holds a node directory with an acknowledged stream (published through
nats-py). A second `jsraft serve` on the same directory — with the same node name and with another, as the
issue's new user tried — must exit 1 at once with a message naming the directory and the first process's
pid, and write nothing: the first node keeps serving (a publish after the refusals is acknowledged as the
next sequence), and after it stops every acknowledged message reads back from the directory. The embedded
path is checked the same way: a second `open_node` in this process, while the first runs, raises
`StoreLocked`, and once the first stopped the directory opens again.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import nats
import pytest
import trio

import jsraft
from jsraft.errors import StoreLocked
from jsraft.server import NodeConfig

from test_serve import free_ports, get, poll, read_stream, stop


async def _publish(port: int, start: int, count: int) -> list[int]:
    nc = await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=5, allow_reconnect=False)
    try:
        js = nc.jetstream()
        if start == 0:
            await js.add_stream(name="ORDERS", subjects=["ORDERS.*"], num_replicas=1)
        return [(await js.publish(f"ORDERS.{i % 3}", f"order {i}".encode(), timeout=10)).seq
                for i in range(start, start + count)]
    finally:
        await nc.close()


def test_a_second_serve_on_a_running_nodes_directory_exits_1_and_writes_nothing(tmp_path):
    store_dir = str(tmp_path / "data")
    client, cluster, monitor = free_ports(3)
    first = subprocess.Popen([sys.executable, "-m", "jsraft", "serve", "--name", "s1", "--store-dir", store_dir,
                              "--cluster-name", "solo", "--cluster-port", str(cluster), "-p", str(client),
                              "-m", str(monitor)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        poll(lambda: get(monitor, "/varz")[0] == 200, 60, "first node ready")
        assert asyncio.run(_publish(client, 0, 20)) == list(range(1, 21))
        before = sorted(os.path.relpath(os.path.join(d, f), store_dir)
                        for d, _, files in os.walk(store_dir) for f in files)
        for name in ("s1", "solo"):
            other_client, other_cluster = free_ports(2)
            started = time.monotonic()
            second = subprocess.run([sys.executable, "-m", "jsraft", "serve", "--name", name, "--store-dir",
                                     store_dir, "--cluster-name", "solo", "--cluster-port", str(other_cluster),
                                     "-p", str(other_client)], capture_output=True, text=True, timeout=60)
            assert second.returncode == 1, second.stderr
            assert os.path.abspath(store_dir) in second.stderr and f"pid {first.pid}" in second.stderr, second.stderr
            assert time.monotonic() - started < 30
        after = sorted(os.path.relpath(os.path.join(d, f), store_dir) for d, _, files in os.walk(store_dir) for f in files)
        assert after == before, "a refused second process created or removed files"
        # The first node is unaffected: the next publish is acknowledged as the next sequence.
        assert asyncio.run(_publish(client, 20, 5)) == list(range(21, 26))
    finally:
        returncode, stderr = stop(first, signal.SIGTERM)
    assert returncode == 0, stderr
    assert trio.run(read_stream, store_dir) == [f"order {i}".encode() for i in range(25)]


async def test_a_second_open_node_on_the_same_directory_raises_store_locked(tmp_path):
    def config() -> NodeConfig:
        return NodeConfig(name="s1", store_dir=str(tmp_path / "data"), cluster_name="solo", cluster_port=0,
                          client_port=0, tick_ms=20, election_ticks=5, test_mode=True)
    async with jsraft.open_node(config()) as node:
        js = node.jetstream()
        await js.add_stream(name="ORDERS", subjects=["ORDERS.*"], num_replicas=1)
        assert (await js.publish("ORDERS.a", b"one")).seq == 1
        with pytest.raises(StoreLocked) as refused:
            async with jsraft.open_node(config()):
                pass
        assert f"pid {os.getpid()}" in refused.value.description
        assert (await js.publish("ORDERS.a", b"two")).seq == 2
    async with jsraft.open_node(config()) as node:  # released at stop: the directory opens again
        js = node.jetstream()
        assert [(await js.get_msg("ORDERS", seq=seq)).data for seq in (1, 2)] == [b"one", b"two"]
