"""Helpers for the transport tests: start/stop real transports on loopback, wait for conditions, and a raw
socket client that speaks (or abuses) the wire protocol.

Every wait is a poll of a condition under a deadline (`wait_until`), never a sleep that hopes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import trio

from jsraft.transport import Transport, TransportConfig
from jsraft.transport.wire import Frame, FrameDecoder, Hello, encode_hello

CLUSTER = "test-cluster"
HOST = "127.0.0.1"
POLL_S = 0.005

# Short timeouts so failure paths finish quickly; the relations validate() demands still hold.
FAST = TransportConfig(
    handshake_timeout_s=0.5, dial_timeout_s=1.0, keepalive_s=0.1, idle_timeout_s=2.0,
    backoff_initial_s=0.02, backoff_max_s=0.2, link_stable_s=0.5,
)


async def wait_until(condition: Callable[[], bool], timeout_s: float = 5.0, what: str = "condition") -> None:
    """Poll `condition` until true; fail the test after `timeout_s`."""
    try:
        with trio.fail_after(timeout_s):
            while not condition():
                await trio.sleep(POLL_S)
    except trio.TooSlowError:
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}") from None


class Node:
    """A transport under test, its inbox, and a cancel scope to kill it like a crashed process."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.inbox: list[tuple[str, str, bytes]] = []
        self.scope = trio.CancelScope()
        self.stopped = trio.Event()

    @property
    def node_id(self) -> str:
        return self.transport.node_id

    @property
    def address(self) -> tuple[str, int]:
        return self.transport.listen_address

    def status(self, peer: str):
        return self.transport.peer_status()[peer]

    def received(self, sender: str, group: str | None = None) -> list[bytes]:
        return [p for (f, g, p) in self.inbox if f == sender and (group is None or g == group)]

    async def kill(self) -> None:
        self.scope.cancel()
        await self.stopped.wait()


async def start_node(nursery: trio.Nursery, node_id: str, *, port: int = 0, host: str = HOST,
                     config: TransportConfig = FAST, storage_uuid: uuid.UUID | None = None,
                     bind_host: str | None = None, on_message: Callable | None = None,
                     peers: dict | None = None) -> Node:
    holder: list[Node] = []

    def deliver(sender: str, group: str, payload: bytes) -> None:
        holder[0].inbox.append((sender, group, payload))

    transport = Transport(node_id, CLUSTER, storage_uuid or uuid.uuid4(), host, port, peers or {},
                          on_message=on_message or deliver, config=config, bind_host=bind_host)
    node = Node(transport)
    holder.append(node)

    async def run(task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            with node.scope:
                await transport.run(task_status=task_status)
        finally:
            node.stopped.set()

    await nursery.start(run)
    return node


def connect(nodes: list[Node]) -> None:
    """Give every node the full peer table at once (so every pair dials simultaneously)."""
    table = {node.node_id: node.address for node in nodes}
    for node in nodes:
        node.transport.update_peers(table)


def paired(a: Node, b: Node) -> bool:
    """True when `a` and `b` use one and the same TCP connection for each other."""
    sa, sb = a.transport.peer_status().get(b.node_id), b.transport.peer_status().get(a.node_id)
    return (sa is not None and sb is not None and sa.connected and sb.connected
            and sa.local_address == sb.remote_address and sa.remote_address == sb.local_address)


async def wait_mesh(nodes: list[Node], timeout_s: float = 5.0) -> None:
    """Wait until every pair shares one connection and no dial is in flight. From then on nothing can
    replace the connection (dialers wait while connected), so a send is delivered."""
    def settled() -> bool:
        return all(paired(a, b) and not a.status(b.node_id).dialing
                   for a in nodes for b in nodes if a is not b)
    await wait_until(settled, timeout_s, "every pair on one shared connection, no dial in flight")


async def start_mesh(nursery: trio.Nursery, ids: list[str], **kwargs) -> list[Node]:
    nodes = [await start_node(nursery, node_id, **kwargs) for node_id in ids]
    connect(nodes)
    await wait_mesh(nodes)
    return nodes


class RawPeer:
    """A raw TCP client for hostile-input tests: sends exact bytes, reads frames, sees the close."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder(frame_bytes_max=1 << 20)

    @classmethod
    async def connect(cls, address: tuple[str, int]) -> RawPeer:
        return cls(await trio.open_tcp_stream(*address))

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def send_hello(self, node_name: str, cluster: str = CLUSTER, **fields) -> None:
        hello = Hello(cluster_name=cluster, node_name=node_name, storage_uuid=uuid.uuid4(), incarnation=1,
                      **fields)
        await self.send(encode_hello(hello))

    async def read_until_closed(self, timeout_s: float = 3.0) -> list[Frame]:
        """Every frame received until the other side closes; fail if it does not close in time."""
        frames: list[Frame] = []
        with trio.fail_after(timeout_s):
            while True:
                try:
                    data = await self.stream.receive_some(1 << 16)
                except (trio.BrokenResourceError, OSError):
                    return frames  # a reset is a close too
                if not data:
                    return frames
                self.decoder.feed(data)
                while (frame := self.decoder.next_frame()) is not None:
                    frames.append(frame)

    async def read_frame(self, timeout_s: float = 3.0) -> Frame:
        with trio.fail_after(timeout_s):
            while (frame := self.decoder.next_frame()) is None:
                data = await self.stream.receive_some(1 << 16)
                assert data, "connection closed while a frame was expected"
                self.decoder.feed(data)
        return frame

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)
