"""`Cluster`: N real jsraft nodes in one trio process — real TCP on 127.0.0.1, real files under a directory.

Method: each node is a real `jsraft.server.Node` (identity, transport, runtime, meta and stream groups)
run in its own cancel scope inside the caller's nursery. `kill` cancels that scope with the node marked
killed (no store is closed or flushed: what survives is what the runtime had made durable, as after a
crash of the process), `restart` starts a new `Node` on the same directory and ports. Every wait is a
poll with a deadline (`wait_until`), never a sleep that hopes.

Ports are chosen once (ephemeral ports the OS hands out, then released) and kept across restarts, so peers
find a restarted node where they left it.

Imports: anything (test kit); never imported by production code.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from jsraft.cli.local_cluster import NodeSet, free_ports, loopback_configs  # shared with the demo's cluster
from jsraft.disk import OsDisk
from jsraft.meta import MetaStateMachine
from jsraft.server import Node, NodeConfig
from jsraft.server.groups.meta_service import META_GROUP
from jsraft.store.filestore import FileStore


def relayed_configs(base_dir: str | os.PathLike[str], relay: Any, names: list[str], *,
                    cluster_name: str = "chaos") -> dict[str, NodeConfig]:
    """Configs for `Cluster(nursery, configs)` whose node-to-node links run through `relay` (a chaos
    `Relay`): each node's peers point at the relay, and the relay at each node's real cluster port."""
    configs = {}
    for name, port in zip(names, free_ports(len(names)), strict=True):
        relay.set_target(name, f"127.0.0.1:{port}")
        configs[name] = NodeConfig(
            name=name, store_dir=os.path.join(os.fspath(base_dir), name), cluster_name=cluster_name,
            cluster_port=port, client_port=0, tick_ms=20, election_ticks=10, test_mode=True,
            peers={peer: relay.peer_address(name, peer) for peer in names if peer != name})
    return configs


class Cluster(NodeSet):
    @classmethod
    @asynccontextmanager
    async def start(cls, nursery: trio.Nursery, n: int = 3, base_dir: str | os.PathLike[str] = ".", *,
                    tick_ms: int = 20, election_ticks: int = 10, ports: list[int] | None = None,
                    cluster_name: str = "test", node_options: dict[str, Any] | None = None,
                    ) -> AsyncIterator["Cluster"]:
        """`node_options`: further `NodeConfig` fields, the same for every node."""
        configs = loopback_configs(base_dir, n, ports=ports, cluster_name=cluster_name, tick_ms=tick_ms,
                                   election_ticks=election_ticks, **(node_options or {}))
        async with cls.started(nursery, configs) as cluster:
            yield cluster

    # --- Nodes (start_node, kill, restart, stop_all: `NodeSet`) -------------------------------------------

    def running(self) -> list[Node]:
        return [self.nodes[name] for name in self.names if self.is_running(name)]

    async def stop(self, name: str) -> None:
        self.nodes[name].stop()
        await self._stopped[name].wait()

    # --- Waiting ----------------------------------------------------------------------------------------

    async def wait_until(self, predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.01,
                         what: str = "condition") -> Any:
        """Poll `predicate` (sync or async) until it returns a true value; `TimeoutError` at `timeout`."""
        with trio.move_on_after(timeout):
            while True:
                value = predicate()
                if inspect.isawaitable(value):
                    value = await value
                if value:
                    return value
                await trio.sleep(interval)
        raise TimeoutError(f"{what} not reached in {timeout}s")

    async def wait_for_meta_leader(self, timeout: float = 10.0) -> str:
        """The name of a meta leader every running node agrees on, once it may propose."""
        def agreed() -> str | None:
            running = self.running()
            leaders = {node.runtime.status(META_GROUP).raft.leader_id for node in running}
            if len(leaders) != 1:
                return None
            leader = leaders.pop()
            if leader is None or leader not in self.nodes or self._stopped[leader].is_set():
                return None
            return leader if self.nodes[leader].meta_service.ready() else None
        return await self.wait_until(agreed, timeout, what="an agreed meta leader")

    async def wait_ready(self, timeout: float = 10.0) -> None:
        for node in self.running():
            await node.wait_ready(timeout)

    # --- Looking inside -----------------------------------------------------------------------------------

    def stream_dir(self, name: str, stream: str) -> str:
        return os.path.join(self.configs[name].store_dir, "streams", stream)

    def replica_store(self, name: str, stream: str) -> Any:
        """The store of `stream` on node `name`: the live one while the node runs it, else the files,
        opened read-only (nothing on disk changes)."""
        node = self.nodes.get(name)
        if node is not None and not self._stopped[name].is_set():
            replica = node.streams.replicas.get(stream)
            if replica is not None and replica.store is not None:
                return replica.store
        return FileStore.open(OsDisk(os.path.join(self.stream_dir(name, stream), "msgs"), read_only=True),
                              read_only=True)

    def meta(self, name: str) -> MetaStateMachine:
        return self.nodes[name].meta

    def consumer_state(self, name: str, stream: str, consumer: str) -> Any:
        """Node `name`'s replicated state of `consumer` of `stream` (a `ConsumerState`), while it runs the
        stream; None when it does not (or knows no such consumer)."""
        node = self.nodes.get(name)
        if node is None or self._stopped[name].is_set():
            return None
        replica = node.streams.replicas.get(stream)
        if replica is None or replica.adapter is None:
            return None
        entry = replica.adapter.consumers.entries.get(consumer)
        return entry.state if entry is not None else None
