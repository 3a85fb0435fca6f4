"""Authenticated cluster links: a shared secret proven by challenge-response, and mutual TLS.

Method: real nodes on loopback (`jsraft.open_node`, `jsraft.testing.cluster.Cluster`), real files.
The rogue is a raw TCP connection to a node's cluster port that speaks the transport's own frames: a
valid HELLO naming a configured peer, then a RequestVote and an AppendEntries at term 100 for the meta
group — what an attacker who read the wire format would send. The node must refuse it (a REFUSE frame,
the connection closed, a log line with the rogue's address) and its meta Raft term must not move. The
same rogue against a node without a secret shows the attack lands (term 100), so the check has teeth.
mTLS: a node whose certificate a foreign CA signed never links; the two good nodes elect a meta leader.
Certificates are made at test time (`jsraft.testing.certs`). Every wait polls with a deadline.
"""

from __future__ import annotations

import logging
import uuid

import attrs
import pytest
import trio

import jsraft
from jsraft.raft.messages import AppendEntries, RequestVote
from jsraft.server import NodeConfig
from jsraft.server.settings.auth_config import TlsConfig
from jsraft.server.groups.meta_service import META_GROUP
from jsraft.testing.certs import TestCa
from jsraft.testing.cluster import Cluster
from jsraft.transport import FrameDecoder, Hello, encode_message
from jsraft.transport.cluster_auth import ClusterAuth
from jsraft.transport.wire import FrameKind, encode_data, encode_group, encode_hello

pytestmark = pytest.mark.trio

SECRET = "correct horse battery staple"
DEADLINE_S = 10.0
ROGUE_TERM = 100


def lonely(tmp_path, **overrides) -> NodeConfig:
    """n1 of a 3-node cluster whose other two nodes are not running: no leader, term stays low."""
    return NodeConfig(name="n1", store_dir=str(tmp_path / "n1"), cluster_port=0, client_port=0, tick_ms=20,
                      election_ticks=10, test_mode=True, cluster_name="c",
                      peers={"n2": "127.0.0.1:1", "n3": "127.0.0.1:2"}, **overrides)


def rogue_frames(proof: bytes = b"") -> bytes:
    hello = Hello(cluster_name="c", node_name="n2", storage_uuid=uuid.uuid4(), incarnation=7)
    vote = RequestVote(from_id="n2", to_id="n1", term=ROGUE_TERM, last_log_index=10_000, last_log_term=ROGUE_TERM)
    append = AppendEntries(from_id="n2", to_id="n1", term=ROGUE_TERM, leader_id="n2", prev_log_index=0,
                           prev_log_term=0, entries=(), leader_commit=0)
    group = encode_group(META_GROUP)
    return proof + encode_hello(hello) + encode_data(group, encode_message(vote)) + \
        encode_data(group, encode_message(append))


async def rogue(address, *, secret: str | None = None) -> list[FrameKind]:
    """Connect as 'n2', send the frames (after a proof made with `secret`, if given); the frame kinds the
    node sent back before closing or going quiet."""
    stream = await trio.open_tcp_stream(*address)
    decoder, kinds = FrameDecoder(), []

    async def read_frame():
        while (frame := decoder.next_frame()) is None:
            data = await stream.receive_some(65536)
            if not data:
                return None
            decoder.feed(data)
        kinds.append(frame.kind)
        return frame

    with trio.move_on_after(3.0):
        proof = b""
        if secret is not None:
            challenge = await read_frame()
            proof, _ = ClusterAuth(secret, "c").answer(challenge.body)
        await stream.send_all(rogue_frames(proof))
        while await read_frame() is not None:
            pass
    await trio.aclose_forcefully(stream)
    return kinds


def meta_term(node) -> int:
    return node.runtime.status(META_GROUP).raft.current_term


async def test_a_rogue_without_the_secret_cannot_vote_or_append(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="jsraft.transport")
    async with jsraft.open_node(lonely(tmp_path, cluster_secret=SECRET), ready_timeout_s=None) as node:
        assert await rogue(node.cluster_address) == [FrameKind.CHALLENGE, FrameKind.REFUSE]
        assert await rogue(node.cluster_address, secret="a guessed wrong secret") == \
            [FrameKind.CHALLENGE, FrameKind.REFUSE]
        assert meta_term(node) < ROGUE_TERM
        assert node.runtime.status(META_GROUP).raft.leader_id is None
        assert not node.transport.peer_status()["n2"].connected
        assert node.transport.refused_auth == 2
    refusals = [r.getMessage() for r in caplog.records if "refused connection from 127.0.0.1:" in r.getMessage()]
    assert len(refusals) == 2 and all("cluster authentication failed" in r for r in refusals), refusals
    assert not any(SECRET in r.getMessage() for r in caplog.records)


async def test_the_same_rogue_lands_on_a_node_without_a_secret(tmp_path):
    async with jsraft.open_node(lonely(tmp_path), ready_timeout_s=None) as node:
        kinds = await rogue(node.cluster_address)
        assert FrameKind.HELLO in kinds  # admitted as n2
        with trio.fail_after(DEADLINE_S):
            while meta_term(node) < ROGUE_TERM:
                await trio.sleep(0.01)


async def test_a_cluster_with_a_secret_and_mutual_tls_forms_and_refuses_a_foreign_ca_node(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="jsraft.transport")
    ca, foreign = TestCa(tmp_path / "ca"), TestCa(tmp_path / "foreign", "foreign CA")
    cert, key = ca.issue("node")
    good = TlsConfig(cert_file=cert, key_file=key, ca_file=ca.ca_file)
    cert, key = foreign.issue("intruder")
    bad = TlsConfig(cert_file=cert, key_file=key, ca_file=ca.ca_file)  # trusts the cluster's CA, signed by another
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, node_options={"cluster_secret": SECRET,
                                                                     "cluster_tls": good}) as cluster:
            leader = await cluster.wait_until(lambda: cluster.node("n1").runtime.status(META_GROUP).raft.leader_id,
                                              timeout=30, what="a meta leader")
            assert leader in cluster.names
            await cluster.stop("n3")
            cluster.configs["n3"] = attrs.evolve(cluster.configs["n3"], cluster_tls=bad)
            await cluster.start_node("n3")
            await cluster.wait_until(
                lambda: any("TLS handshake failed" in r.getMessage() for r in caplog.records),
                timeout=DEADLINE_S, what="a refused TLS handshake")
            n1_links = cluster.node("n1").transport.peer_status()
            assert n1_links["n2"].connected and not n1_links["n3"].connected
            assert not any(status.connected for status in cluster.node("n3").transport.peer_status().values())
            nursery.cancel_scope.cancel()
