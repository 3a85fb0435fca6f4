"""INFO's `connect_urls` on a three-node cluster follows the nodes that are up, and a client connected
before a node came back learns of it from the INFO sent again (as nats-server does on a route change).

Method: three real nodes in one process (`jsraft.testing.cluster.Cluster`, real TCP on loopback); nats-py
runs in a worker thread (`nats_kit.in_asyncio`) connected to n1 only, while the trio side stops and
restarts n3. Waits poll the client's server pool, or n1's INFO list, with a deadline.
"""

from __future__ import annotations

import asyncio

import pytest
import trio

from jsraft.testing.cluster import Cluster
from nats_kit import DEADLINE_S, in_asyncio

nats = pytest.importorskip("nats")


def netloc(node) -> str:
    return node.url.removeprefix("nats://")


async def test_connect_urls_follow_the_nodes_and_reach_connected_clients(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path) as cluster:
            n1 = cluster.node("n1")
            token = trio.lowlevel.current_trio_token()  # the asyncio side restarts n3 through it
            everyone = sorted(netloc(cluster.node(name)) for name in cluster.names)
            await cluster.wait_until(lambda: sorted(n1.clients.connect_urls or ()) == everyone, DEADLINE_S)
            assert n1.clients.connect_urls[0] == netloc(n1)  # its own first, as nats-server lists it
            await cluster.stop("n3")
            await cluster.wait_until(lambda: netloc(cluster.node("n2")) in (n1.clients.connect_urls or ())
                                     and len(n1.clients.connect_urls) == 2, DEADLINE_S)

            async def scenario(url):
                nc = await nats.connect(url, max_reconnect_attempts=0)
                try:
                    before = sorted(server.netloc for server in nc.servers)
                    n3 = await asyncio.to_thread(
                        lambda: trio.from_thread.run(cluster.restart, "n3", trio_token=token))
                    url3 = netloc(n3)
                    loop = asyncio.get_running_loop()
                    deadline = loop.time() + DEADLINE_S
                    while url3 not in {server.netloc for server in nc.servers}:
                        assert loop.time() < deadline, "the client never learned n3's URL"
                        await asyncio.sleep(0.01)
                    return before, url3  # nats-py pools an async INFO's URLs; its `_server_info` keeps the first
                finally:
                    await nc.close()

            before, url3 = await in_asyncio(scenario, n1.url, timeout_s=60)
            assert before == sorted([netloc(n1), netloc(cluster.node("n2"))])  # n3 was down at connect
            assert url3 in n1.clients.connect_urls and len(n1.clients.connect_urls) == 3
            await cluster.stop_all()
