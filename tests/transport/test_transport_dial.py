"""One connection per node pair: the duplicate-connection rule, as a table and over real TCP.

Method: `new_link_wins` is checked exhaustively against the rule in `peer.py`'s docstring, written out here
by hand (restart wins; else the lower id's outbound connection is canonical). Then real transports are
started with the peer table given to all of them in one synchronous step, so every pair dials each other
at the same moment, repeatedly; each run must settle on exactly one shared connection per pair, the one
dialed by the lower node id, and messages must flow both ways on it.
"""

from __future__ import annotations

import uuid

import pytest
import trio
from transport_helpers import connect, paired, start_node, wait_mesh, wait_until

from jsraft.transport.link import Direction
from jsraft.transport.peer import new_link_wins
from jsraft.transport.wire import Hello


class _FakeLink:
    """Just what `new_link_wins` reads: a direction and the peer's HELLO."""

    def __init__(self, direction: Direction, incarnation: int) -> None:
        self.direction = direction
        self.remote = Hello(cluster_name="c", node_name="peer", storage_uuid=uuid.UUID(int=1),
                            incarnation=incarnation)


OUT, IN = Direction.OUTBOUND, Direction.INBOUND


@pytest.mark.parametrize("local, peer, new, old, wins", [
    # local n1 < peer n2: the canonical connection is n1's outbound one.
    ("n1", "n2", OUT, IN, True),    # canonical replaces the peer's dial
    ("n1", "n2", IN, OUT, False),   # the peer's dial loses to ours
    ("n1", "n2", OUT, OUT, True),   # our newer dial replaces a stale one of ours
    ("n1", "n2", IN, IN, True),     # the peer's newer dial replaces its stale one
    # local n2 > peer n1: the canonical connection is the peer's (inbound here).
    ("n2", "n1", IN, OUT, True),
    ("n2", "n1", OUT, IN, False),
    ("n2", "n1", IN, IN, True),
    ("n2", "n1", OUT, OUT, True),
])
def test_duplicate_rule_same_incarnation(local, peer, new, old, wins):
    assert new_link_wins(local, peer, _FakeLink(new, 7), _FakeLink(old, 7)) is wins  # type: ignore[arg-type]


@pytest.mark.parametrize("new, old", [(IN, OUT), (OUT, IN), (IN, IN), (OUT, OUT)])
@pytest.mark.parametrize("local, peer", [("n1", "n2"), ("n2", "n1")])
def test_a_restarted_peer_always_wins(local, peer, new, old):
    assert new_link_wins(local, peer, _FakeLink(new, 8), _FakeLink(old, 7))  # type: ignore[arg-type]


def test_both_sides_keep_the_same_connection():
    """Symmetry: for any two connections between n1 and n2, both nodes make the same choice."""
    for first in (OUT, IN):
        for second in (OUT, IN):
            # From n1's side, "first" and "second" are directions; from n2's side each is the mirror.
            mirror = {OUT: IN, IN: OUT}
            n1_keeps_new = new_link_wins("n1", "n2", _FakeLink(second, 1), _FakeLink(first, 1))  # type: ignore[arg-type]
            n2_keeps_new = new_link_wins("n2", "n1", _FakeLink(mirror[second], 1), _FakeLink(mirror[first], 1))  # type: ignore[arg-type]
            if first is not second:  # two different connections: the choice must agree
                assert n1_keeps_new == n2_keeps_new


@pytest.mark.parametrize("round_", range(5))
async def test_simultaneous_dials_settle_on_the_lower_ids_connection(nursery, round_):
    async with trio.open_nursery() as inner:
        nodes = [await start_node(inner, node_id) for node_id in ("n1", "n2", "n3")]
        connect(nodes)  # every pair dials both ways at once
        await wait_mesh(nodes)
        for a in nodes:
            for b in nodes:
                if a.node_id < b.node_id:
                    assert paired(a, b)
                    assert a.status(b.node_id).direction == "outbound"
                    assert b.status(a.node_id).direction == "inbound"
        for a in nodes:
            for b in nodes:
                if a is not b:
                    assert a.transport.send(b.node_id, "meta", f"{a.node_id}>{b.node_id}".encode())
        await wait_until(lambda: all(len(n.inbox) == 2 for n in nodes), what="one message per ordered pair")
        inner.cancel_scope.cancel()
