"""A frame whose handler returns a gate is the last one its link hands on until the gate is set (link
invariant 5), so what the gate's owner does first happens before whatever followed that frame.

Method: two real transports on loopback (`transport_helpers.start_mesh` settles them on one connection).
n2's handler logs each payload; for b"gate" it also wakes a "caller" task — as an `$rpc` reply wakes the
task waiting for it — and returns a gate that the caller sets once it has logged itself. n1 sends a,
gate, b, c from one task with no checkpoint in between: one write, and on loopback one read. A reader
that ignored the gate would hand b and c on in that same read, before the woken caller runs (a, gate,
b, c, caller: checked by running it against the reader before the gate); with the gate the log is a,
gate, caller, b, c, however the bytes are split into reads.
"""

from __future__ import annotations

import trio
from transport_helpers import connect, start_node, wait_mesh, wait_until


async def test_the_frames_after_a_gating_frame_wait_for_its_gate(nursery):
    log: list[bytes] = []
    woken, gate = trio.Event(), trio.Event()

    def on_message(sender: str, group: str, payload: bytes) -> trio.Event | None:
        log.append(bytes(payload))
        if bytes(payload) == b"gate":
            woken.set()
            return gate
        return None

    async def caller() -> None:
        await woken.wait()
        log.append(b"caller")
        gate.set()

    nursery.start_soon(caller)
    n1 = await start_node(nursery, "n1")
    n2 = await start_node(nursery, "n2", on_message=on_message)
    connect([n1, n2])
    await wait_mesh([n1, n2])
    for payload in (b"a", b"gate", b"b", b"c"):
        assert n1.transport.send("n2", "g", payload)
    await wait_until(lambda: len(log) == 5, what="the four frames and the caller")
    assert log == [b"a", b"gate", b"caller", b"b", b"c"]
