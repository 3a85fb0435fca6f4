"""`LocalCluster`: N real nodes in this process, on loopback TCP and real files, for `jsraft demo` (layer L6).

Owns: picking loopback ports once (kept across restarts, so peers find a restarted node where they left
it), starting each `Node` in the caller's nursery, crashing one (`kill`: cancelled with no store closed or
flushed beyond what the runtime had made durable), restarting it on the same directory, and the waits the
demo needs, each a poll with a deadline.

The nodes' lifecycle is `NodeSet`'s, which the test kit's `jsraft.testing.cluster.Cluster` extends (production
code may not import the kit, DESIGN §1); `LocalCluster` adds only what a command needs.

Invariants:
  1. Every wait polls a condition with a deadline and raises `TimeoutError` naming what it waited for.
  2. A killed node is never closed cleanly: its stores keep only what was durable, as after a crash.

Imports: stdlib, L2 (`store` state values), L5 (`server`), trio.
"""

from __future__ import annotations

import inspect
import os
import random
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from jsraft.server import Node, NodeConfig
from jsraft.server.groups.meta_service import META_GROUP
from jsraft.store import StoreState


# Where Linux hands out ephemeral ports (outgoing connections, `bind(port 0)`) when the file is unreadable.
_DEFAULT_EPHEMERAL = (32768, 60999)
_LOWEST_PICK = 10000


def ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as file:
            low, high = (int(word) for word in file.read().split())
        return low, high
    except (OSError, ValueError):
        return _DEFAULT_EPHEMERAL


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct ports free now, chosen below the OS's ephemeral range when there is room.

    A port kept across a node's restart must not be one the OS hands out by itself: while the node is
    down, any process's outgoing connection (or another `bind(port 0)`) may take an ephemeral port, and the
    restart then fails with "address in use". Below that range only an explicit bind takes a port. Each
    candidate is bound (every socket held until all are bound, so the ports are distinct), then released."""
    low, _high = ephemeral_range()
    chooser = random.SystemRandom()
    sockets: list[socket.socket] = []
    try:
        while len(sockets) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            if low - _LOWEST_PICK < 1000:  # no room below the range: the OS picks
                sock.bind((host, 0))
                continue
            for _ in range(100):
                try:
                    sock.bind((host, chooser.randrange(_LOWEST_PICK, low)))
                    break
                except OSError:
                    continue
            else:
                sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def loopback_configs(base_dir: str | os.PathLike[str], n: int, *, ports: list[int] | None = None,
                     **fields: Any) -> dict[str, NodeConfig]:
    """Configs of `n` nodes `n1`..`nN` under `base_dir/<name>`, on loopback, each a peer of the others at its
    cluster port (`ports`, else free ones) and with a free client port; `fields`: the other `NodeConfig`
    fields, the same for every node."""
    names = [f"n{i + 1}" for i in range(n)]
    ports = ports or free_ports(n)
    addresses = {name: f"127.0.0.1:{port}" for name, port in zip(names, ports)}
    return {name: NodeConfig(name=name, store_dir=os.path.join(os.fspath(base_dir), name), cluster_port=port,
                             client_port=0, test_mode=True, peers={p: a for p, a in addresses.items() if p != name},
                             **fields)
            for name, port in zip(names, ports)}


class NodeSet:
    """Nodes of this process, each run in the caller's nursery: started, crashed (`kill`, invariant 2),
    restarted on the same directory and ports, and stopped, by name. The lifecycle `LocalCluster` and the
    test kit's `Cluster` share (the kit subclasses this; production never imports the kit)."""

    def __init__(self, nursery: trio.Nursery, configs: dict[str, NodeConfig]) -> None:
        self._nursery = nursery
        self.configs = configs
        self.nodes: dict[str, Node] = {}
        self._stopped: dict[str, trio.Event] = {}

    @classmethod
    @asynccontextmanager
    async def started(cls, nursery: trio.Nursery, configs: dict[str, NodeConfig]) -> AsyncIterator[Any]:
        """Every node of `configs` started, in their order; all stopped when the block ends."""
        nodes = cls(nursery, configs)
        try:
            for name in configs:
                await nodes.start_node(name)
            yield nodes
        finally:
            await nodes.stop_all()

    @property
    def names(self) -> list[str]:
        return sorted(self.configs)

    def node(self, name: str) -> Node:
        return self.nodes[name]

    def is_running(self, name: str) -> bool:
        return name in self._stopped and not self._stopped[name].is_set()

    async def start_node(self, name: str) -> Node:
        node = Node(self.configs[name])
        await node.prepare()
        stopped = trio.Event()
        self.nodes[name], self._stopped[name] = node, stopped

        async def run(task_status: trio.TaskStatus[Node] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                await node.run(task_status=task_status)
            finally:
                stopped.set()

        await self._nursery.start(run)
        return node

    async def kill(self, name: str) -> None:
        """Crash `name` (invariant 2): cancelled abruptly, no clean close; return once it stopped."""
        self.nodes[name].kill()
        await self._stopped[name].wait()

    async def restart(self, name: str) -> Node:
        if self.is_running(name):
            await self.kill(name)
        return await self.start_node(name)

    async def stop_all(self) -> None:
        for name in self.names:
            if self.is_running(name):
                self.nodes[name].stop()
        with trio.CancelScope(shield=True):
            for event in self._stopped.values():
                await event.wait()


class LocalCluster(NodeSet):
    @classmethod
    @asynccontextmanager
    async def start(cls, nursery: trio.Nursery, n: int, base_dir: str, *, tick_ms: int = 50,
                    election_ticks: int = 10, cluster_name: str = "demo") -> AsyncIterator["LocalCluster"]:
        configs = loopback_configs(base_dir, n, tick_ms=tick_ms, election_ticks=election_ticks,
                                   cluster_name=cluster_name)
        async with cls.started(nursery, configs) as cluster:
            yield cluster

    def running(self) -> list[str]:
        return [name for name in self.names if self.is_running(name)]

    # --- Waiting and looking -------------------------------------------------------------------------

    async def wait_until(self, predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
        """Poll `predicate` (sync or async) until it returns a true value (invariant 1)."""
        with trio.move_on_after(timeout_s):
            while True:
                value = predicate()
                if inspect.isawaitable(value):
                    value = await value
                if value:
                    return value
                await trio.sleep(0.02)
        raise TimeoutError(f"{what} not reached in {timeout_s:g}s")

    def meta_leader(self) -> str | None:
        """The meta leader every running node agrees on, once it may propose; else None."""
        leaders = {self.nodes[name].runtime.status(META_GROUP).raft.leader_id for name in self.running()}
        leader = leaders.pop() if len(leaders) == 1 else None
        if leader is None or not self.is_running(leader):
            return None
        return leader if self.nodes[leader].meta_service.ready() else None

    def stream_leader(self, stream: str) -> str | None:
        """The leader of `stream`'s group every running replica agrees on, if it is running; else None."""
        leaders = {self.nodes[name].streams.replicas[stream].leader_id() for name in self.running()
                   if stream in self.nodes[name].streams.replicas}
        leader = leaders.pop() if len(leaders) == 1 else None
        return leader if leader is not None and self.is_running(leader) else None

    def replica_state(self, name: str, stream: str) -> StoreState | None:
        """The state of `stream`'s live store on the running node `name`, or None."""
        if not self.is_running(name):
            return None
        replica = self.nodes[name].streams.replicas.get(stream)
        if replica is None or replica.store is None:
            return None
        return replica.store.state()
