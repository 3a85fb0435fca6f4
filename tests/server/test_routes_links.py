"""What cluster routes need from the transport: a link callback (up on every current link, down when none
is) and a send headroom (forwarded messages leave part of a peer's queue to Raft).

Method: two real `Transport`s on loopback record every `on_link` call. They connect (each side sees the
other come up, and its last report says up), one is killed like a crashed process (the survivor's last
report says down), then restarted on the same port (up again, on both). Waits are polls with deadlines.
The headroom is checked on a `SendQueue` directly, against both of its bounds.
"""

from __future__ import annotations

import uuid

import trio

from jsraft.transport import Transport, TransportConfig
from jsraft.transport.send_queue import SendQueue

FAST = TransportConfig(handshake_timeout_s=0.5, dial_timeout_s=1.0, keepalive_s=0.1, idle_timeout_s=2.0,
                       backoff_initial_s=0.02, backoff_max_s=0.2, link_stable_s=0.5)


async def wait_until(condition, what: str, timeout_s: float = 10.0) -> None:
    with trio.fail_after(timeout_s):
        while not condition():
            await trio.sleep(0.005)


class Running:
    def __init__(self, nursery: trio.Nursery, name: str, events: list[tuple[str, bool]]) -> None:
        self.nursery = nursery
        self.name = name
        self.events = events
        self.scope = trio.CancelScope()
        self.stopped = trio.Event()
        self.transport = Transport(name, "test", uuid.uuid4(), "127.0.0.1", 0, {}, config=FAST,
                                   on_message=lambda *_: None, on_link=lambda peer, up: events.append((peer, up)))

    async def start(self, port: int = 0) -> "Running":
        self.transport.listen_port = port

        async def run(task_status=trio.TASK_STATUS_IGNORED) -> None:
            try:
                with self.scope:
                    await self.transport.run(task_status=task_status)
            finally:
                self.stopped.set()

        await self.nursery.start(run)
        return self

    async def kill(self) -> None:
        self.scope.cancel()
        await self.stopped.wait()

    def connected(self, peer: str) -> bool:
        return self.transport.peer_status()[peer].connected


async def test_links_are_reported_up_down_and_up_again_after_a_restart():
    events: dict[str, list[tuple[str, bool]]] = {"a": [], "b": []}
    async with trio.open_nursery() as nursery:
        a = await Running(nursery, "a", events["a"]).start()
        b = await Running(nursery, "b", events["b"]).start()
        a.transport.update_peers({"b": b.transport.listen_address})
        b.transport.update_peers({"a": a.transport.listen_address})
        await wait_until(lambda: a.connected("b") and b.connected("a") and events["a"][-1:] == [("b", True)]
                         and events["b"][-1:] == [("a", True)], "both links reported up")
        await b.kill()
        await wait_until(lambda: events["a"][-1:] == [("b", False)], "the lost link reported down on a")
        ups_before = events["a"].count(("b", True))
        again = await Running(nursery, "b", events["b"]).start(b.transport.listen_port)
        again.transport.update_peers({"a": a.transport.listen_address})
        await wait_until(lambda: a.connected("b") and events["a"][-1:] == [("b", True)]
                         and events["b"][-1:] == [("a", True)], "the new link reported up on both")
        assert events["a"].count(("b", True)) > ups_before
        assert all(peer == "b" for peer, _ in events["a"]) and all(peer == "a" for peer, _ in events["b"])
        nursery.cancel_scope.cancel()


def test_a_send_with_headroom_leaves_that_fraction_of_the_queue_free():
    by_frames = SendQueue(frames_max=10, bytes_max=10_000)
    for _ in range(5):
        assert by_frames.has_room(10, headroom=0.5)
        by_frames.put(b"x" * 10)
    assert not by_frames.has_room(10, headroom=0.5)  # half of the frames must stay free
    assert by_frames.has_room(10)  # for everyone else
    by_bytes = SendQueue(frames_max=100, bytes_max=1000)
    by_bytes.put(b"x" * 490)
    assert by_bytes.has_room(10, headroom=0.5) and not by_bytes.has_room(11, headroom=0.5)
    assert by_bytes.has_room(510) and not by_bytes.has_room(511)
