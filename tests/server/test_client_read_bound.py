"""What one read of a client's bytes may start: the in-flight bound on internal handlers, and the read size.

Method: a real node (`jsraft.open_node`, free ports), a hand-driven client (`nats_kit.RawClient`) and a
sync internal subscription that holds each message it gets until the test releases it, so the client's
publishes stay "in internal handlers" (`ClientConn` invariant 6). The client sends far more publishes
than `INTERNAL_INFLIGHT_MAX` in one write: the node must stop at the bound, in the middle of what it has
read, and carry on with the rest, in order, as handlers finish. The read-size rule (invariant 11) is a
pure function, checked on its own.
"""

from __future__ import annotations

import trio

import jsraft
from jsraft.server.nats.client_conn import INTERNAL_INFLIGHT_MAX, READ_BYTES_MAX, READ_BYTES_MIN, next_read_bytes
from nats_kit import DEADLINE_S, RawClient, held_handler, release_within_bound, single

HEADERS = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True, "protocol": 1}
PUBLISHES = 3 * INTERNAL_INFLIGHT_MAX


async def _poll(predicate, what: str) -> None:
    with trio.fail_after(DEADLINE_S):
        while not predicate():
            await trio.sleep(0.005)


async def test_one_read_of_many_publishes_stops_at_the_in_flight_bound(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        seen: list[bytes] = []
        # A sync internal handler: it answers later, via msg.done().
        held = held_handler(node, "held.x", lambda msg: seen.append(msg.payload))
        client = await RawClient.connect(node.client_address, HEADERS)
        await client.round_trip()
        conn = next(iter(node.clients.clients.values()))
        # ~40 KiB: on loopback one read brings all of it, well over the bound.
        await client.send(b"".join(b"PUB held.x %d\r\n%d\r\n" % (len(b"%d" % i), i) for i in range(PUBLISHES)))
        await release_within_bound(held, conn, PUBLISHES, INTERNAL_INFLIGHT_MAX, "publishes")
        assert seen == [b"%d" % i for i in range(PUBLISHES)], "every publish handled once, in order"
        await _poll(lambda: conn.internal_inflight == 0, "every handler released")
        await client.round_trip()  # the connection is still served
        await client.aclose()


def test_read_size_doubles_when_filled_and_halves_when_mostly_empty():
    assert next_read_bytes(READ_BYTES_MIN, READ_BYTES_MIN) == 2 * READ_BYTES_MIN
    assert next_read_bytes(READ_BYTES_MAX, READ_BYTES_MAX) == READ_BYTES_MAX
    assert next_read_bytes(4 * READ_BYTES_MIN, 3 * READ_BYTES_MIN) == 4 * READ_BYTES_MIN
    assert next_read_bytes(4 * READ_BYTES_MIN, READ_BYTES_MIN - 1) == 2 * READ_BYTES_MIN
    assert next_read_bytes(READ_BYTES_MIN, 10) == READ_BYTES_MIN
    size = READ_BYTES_MIN
    for _ in range(10):
        size = next_read_bytes(size, size)
    assert size == READ_BYTES_MAX
