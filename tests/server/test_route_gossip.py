"""Route discovery from seed routes: the GOSSIP frame's bytes, and three real nodes that grow a full mesh
from one seed without any Raft group growing with it.

Method: the codec is checked by round trips and by malformed frames, each of which must raise
`TransportProtocolError` (the transport then closes that one link). The nodes are three real `Node`s in
this trio loop on loopback TCP (`open_node`): the first is given a seed route to itself (ignored), the
other two only the first's cluster address. The checks poll with a deadline until every node has a
link to both others — the second and third can only have learned each other by gossip — and then read
what must not have changed: each node's `online()` (JetStream's placement view) and its meta group's
voters are still only itself, so a node met by gossip is never a meta learner, voter or replica target.
A raw Raft frame from a gossip-met node is dropped, not delivered to the meta group.
"""

from __future__ import annotations

import socket

import pytest
import trio

import jsraft
from jsraft.server import NodeConfig
from jsraft.server.groups.meta_service import META_GROUP
from jsraft.server.nats import route_wire
from jsraft.server.nats.route_wire import Gossip
from jsraft.transport.errors import TransportProtocolError

DEADLINE_S = 20.0


def test_gossip_frames_round_trip():
    nodes = {"n2": "127.0.0.1:6223", "n3": "[::1]:6224"}
    assert route_wire.decode(route_wire.encode_gossip("127.0.0.1:6222", nodes)) == Gossip("127.0.0.1:6222", nodes)
    assert route_wire.decode(route_wire.encode_gossip("", {})) == Gossip("", {})


@pytest.mark.parametrize("address, nodes, reason", [
    ("127.0.0.1", {}, "is not host:port"),
    ("127.0.0.1:0", {}, "is not host:port"),
    ("127.0.0.1:6222", {"n2": ""}, "is not host:port"),
    ("127.0.0.1:6222", {"n 2": "127.0.0.1:6223"}, "is not a node name"),
    ("127.0.0.1:6222", {"": "127.0.0.1:6223"}, "is not a node name"),
])
def test_malformed_gossip_is_a_protocol_error(address, nodes, reason):
    with pytest.raises(TransportProtocolError, match=reason):
        route_wire.decode(route_wire.encode_gossip(address, nodes))


def test_gossip_with_more_nodes_than_its_bound_is_refused_and_trailing_bytes_too():
    frame = bytearray(route_wire.encode_gossip("127.0.0.1:6222", {}))
    frame[-2:] = (route_wire.GOSSIP_NODES_MAX + 1).to_bytes(2, "little")
    with pytest.raises(TransportProtocolError, match="gossiped nodes exceed"):
        route_wire.decode(bytes(frame))
    with pytest.raises(TransportProtocolError, match="trailing"):
        route_wire.decode(route_wire.encode_gossip("127.0.0.1:6222", {}) + b"x")


def config(tmp_path, name: str, seeds: list[str], cluster_port: int = 0) -> NodeConfig:
    return NodeConfig(name=name, store_dir=str(tmp_path / name), cluster_port=cluster_port, client_port=0,
                      tick_ms=20, election_ticks=5, test_mode=True, seed_routes=seeds, cluster_name="gossip")


async def until(condition, what: str) -> None:
    with trio.fail_after(DEADLINE_S):
        while not condition():
            await trio.sleep(0.01)
    assert condition(), what


async def test_three_nodes_grow_a_full_mesh_from_one_seed_and_no_raft_group_grows(tmp_path):
    # The first node listens on a port chosen up front so its own seed route can name it.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    first_config = config(tmp_path, "n1", [f"127.0.0.1:{port}"], cluster_port=port)
    async with jsraft.open_node(first_config) as n1:
        seed = [f"127.0.0.1:{n1.cluster_address[1]}"]
        async with jsraft.open_node(config(tmp_path, "n2", seed)) as n2, \
                jsraft.open_node(config(tmp_path, "n3", seed)) as n3:
            nodes = (n1, n2, n3)
            await until(lambda: all(len(node.route_peers()) == 2 for node in nodes), "a full mesh")
            assert n2.route_peers() == {"n1", "n3"} and n3.route_peers() == {"n1", "n2"}
            await until(lambda: all(len(node.clients.connect_urls or ()) == 3 for node in nodes),
                        "every node's INFO to list all three client URLs")
            for node in nodes:
                assert node.online() == {node.name}
                assert node.online_storage_uuids().keys() == {node.name}
                assert tuple(node.runtime.status(META_GROUP).raft.voters) == (node.name,)
            assert "n1" not in n1.transport.peer_status()  # its route to itself was ignored
            # A Raft frame from a node met by gossip is dropped unread: were it decoded, these bytes would
            # be a codec error closing the link (a protocol error on n1's side).
            before = n1.transport.peer_status()["n2"]
            assert n2.transport.send("n1", META_GROUP, b"not a raft message")
            await until(lambda: n1.transport.peer_status()["n2"].frames_received > before.frames_received,
                        "n1 to read the frame")
            after = n1.transport.peer_status()["n2"]
            assert (after.connected, after.links_established, after.protocol_errors) == \
                (True, before.links_established, 0)
