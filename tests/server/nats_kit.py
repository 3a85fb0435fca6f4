"""Helpers for the NATS client-port tests: a single node on free ports, nats-py in a worker thread, and a
raw protocol client built on `jsraft.protocol.ClientConnection`.

Method: the node runs in the test's trio loop; nats-py needs asyncio, so a scenario written as an async
function runs under `asyncio.run` in a worker thread (`in_asyncio`), bounded by its own timeout because
a thread cannot be cancelled from trio. nats-py's `flush()` is no barrier for a SUB still in its pending
buffer (its PING is written ahead of it), so a scenario waits for the node to hold the interest it
needs (`until(...)`, polled in the node's thread) before publishing. Raw clients speak bytes over a
trio socket and read events with a deadline; nothing sleeps and hopes.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import trio
import trio.testing

from jsraft.protocol import NEED_DATA, ClientConnection, Connect, Err, Info, Ping, Pong, RemoteProtocolError
from jsraft.server import NodeConfig

DEADLINE_S = 10.0


def single(tmp_path, name: str = "n1", **overrides: Any) -> NodeConfig:
    return NodeConfig(name=name, store_dir=str(tmp_path / name), cluster_port=0, client_port=0, tick_ms=20,
                      election_ticks=5, test_mode=True, **overrides)


async def in_asyncio(scenario: Callable[..., Awaitable[Any]], *args: Any, timeout_s: float = 30.0) -> Any:
    """Run `scenario(*args)` with asyncio in a worker thread while the node keeps running here."""
    async def bounded() -> Any:
        return await asyncio.wait_for(scenario(*args), timeout_s)

    return await trio.to_thread.run_sync(lambda: asyncio.run(bounded()))


async def until(predicate: Callable[[], bool], what: str, timeout_s: float = DEADLINE_S) -> None:
    """From inside an `in_asyncio` scenario: poll `predicate()` — run in the node's trio thread, so it may
    read the node — until it holds, or fail after `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not trio.from_thread.run_sync(predicate):
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def held_handler(node: Any, subject: str, note: Callable[[Any], Any]) -> list[Any]:
    """Subscribe a sync internal handler on `subject` that notes each message (`note(msg)`, into the
    caller's list) and holds it, unanswered, until the test calls its `done()`: the list of held messages."""
    held: list[Any] = []

    def handler(msg: Any) -> None:
        note(msg)
        held.append(msg)

    node.clients.subscribe_internal(subject, handler, sync=True)
    return held


async def release_within_bound(held: list[Any], conn: Any, total: int, bound: int, what: str) -> None:
    """`total` messages sent in one read reach `held_handler`'s list at most `bound` at a time: wait for each
    bound's worth, check that nothing past it started (every task blocked) and that the connection counts
    exactly those in flight, then release them and wait for the next."""
    released = 0
    while released < total:
        target = min(released + bound, total)
        with trio.fail_after(DEADLINE_S):
            while len(held) < target:
                await trio.sleep(0.005)
        await trio.testing.wait_all_tasks_blocked()  # nothing past the bound starts while it is full
        assert len(held) == target, f"{len(held) - released} {what} in handlers at once"
        assert conn.internal_inflight == target - released
        for msg in held[released:]:
            msg.done()
        released = target


def interest(node: Any, subject: str) -> int:
    """How many subscriptions (plain, and queue members) the node has for a literal `subject`."""
    result = node.clients.sublist.match(subject)
    return len(result.plain) + sum(len(members) for members in result.queues)


async def nats_connect(url: str, **options: Any) -> Any:
    import nats

    return await nats.connect(url, connect_timeout=5, allow_reconnect=False, **options)


class RawClient:
    """A hand-driven client: send bytes, read protocol events with deadlines."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.protocol = ClientConnection(max_payload=64 << 20)
        self.info: dict[str, Any] = {}
        self.events: list[Any] = []  # read but not yet taken
        self.eof = False
        self.error: RemoteProtocolError | None = None

    @classmethod
    async def connect(cls, address: tuple[str, int], options: dict[str, Any] | None = None, *,
                      receive_buffer_bytes: int | None = None) -> "RawClient":
        sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer_bytes is not None:  # before connect, so the window starts small
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
        await sock.connect(address)
        client = cls(trio.SocketStream(sock))
        info = await client.next_event()
        assert isinstance(info, Info), info
        client.info = info.options
        if options is not None:
            await client.send(client.protocol.send(Connect(options)))
        return client

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def _read(self) -> None:
        try:
            data = await self.stream.receive_some(1 << 16)
        except trio.BrokenResourceError:  # a reset after the server closed counts as the end
            data = b""
        if not data:
            self.eof = True
            return
        self.protocol.receive_data(data)
        while (event := self.protocol.next_event()) is not NEED_DATA:
            self.events.append(event)

    async def next_event(self, timeout_s: float = DEADLINE_S) -> Any:
        """The next event; None at EOF."""
        with trio.fail_after(timeout_s):
            while not self.events:
                if self.eof:
                    return None
                await self._read()
        return self.events.pop(0)

    async def expect(self, kind: type, timeout_s: float = DEADLINE_S, *, skip: tuple[type, ...] = (Ping,)) -> Any:
        """The next event of `kind`, answering PINGs and skipping kinds in `skip` on the way."""
        while True:
            event = await self.next_event(timeout_s)
            if isinstance(event, kind):
                return event
            if isinstance(event, Ping):
                await self.send(b"PONG\r\n")
            assert isinstance(event, skip), f"expected {kind.__name__}, got {event!r}"

    async def round_trip(self) -> list[Any]:
        """PING, then wait for PONG: everything sent before has been processed by the server. Returns
        the events that came before the PONG (PINGs from the server are answered, not returned)."""
        await self.send(b"PING\r\n")
        before = []
        while not isinstance(event := await self.next_event(), Pong):
            assert event is not None, f"connection closed before PONG (after {before!r})"
            if isinstance(event, Ping):
                await self.send(b"PONG\r\n")
            else:
                before.append(event)
        return before

    async def read_to_eof(self, timeout_s: float = DEADLINE_S) -> list[Any]:
        """Every event until the server closes the connection."""
        seen = []
        with trio.fail_after(timeout_s):
            while (event := await self.next_event(timeout_s)) is not None:
                seen.append(event)
        return seen

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


def errors_in(events: list[Any]) -> list[str]:
    return [event.message for event in events if isinstance(event, Err)]
