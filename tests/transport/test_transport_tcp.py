"""Transports over real TCP on loopback: delivery, multiplexing, Raft messages, reconnects, membership.

Method: start real `Transport`s on 127.0.0.1 with ephemeral ports inside the test's nursery, give them
each other's addresses, and poll (with deadlines) until every pair shares one connection dialed by its
lower node id (`wait_mesh`). From then on a send is delivered, because the connection is stable and TCP is
ordered; each test then checks what arrived, in order, under which group and from whom. A "crash" cancels
a node's scope, which closes its sockets like a dying process's kernel would.
"""

from __future__ import annotations

import logging
import socket

import attrs
import pytest
import trio
from transport_helpers import FAST, HOST, connect, paired, start_mesh, start_node, wait_mesh, wait_until

from jsraft.raft import (
    AppendEntries, AppendEntriesResponse, ConfState, Entry, EntryType, InstallSnapshot, InstallSnapshotResponse,
    RequestVote, RequestVoteResponse, SnapshotMeta, StatusProbe, StatusProbeResponse, TermQuery, TermQueryResponse,
    TimeoutNow,
)
from jsraft.raft.messages import MESSAGE_TYPES
from jsraft.transport import FrameTooLarge, decode_message, encode_message


async def test_two_transports_exchange_group_multiplexed_messages_both_ways(nursery):
    n1, n2 = await start_mesh(nursery, ["n1", "n2"])
    for i in range(20):
        assert n1.transport.send("n2", "meta", b"m%d" % i)
        assert n1.transport.send("n2", "S-ORDERS", b"o%d" % i)
        assert n2.transport.send("n1", "S-ORDERS", b"back%d" % i)
    await wait_until(lambda: len(n2.inbox) == 40 and len(n1.inbox) == 20, what="all 60 messages")
    assert n2.received("n1", "meta") == [b"m%d" % i for i in range(20)]
    assert n2.received("n1", "S-ORDERS") == [b"o%d" % i for i in range(20)]
    assert n1.received("n2", "S-ORDERS") == [b"back%d" % i for i in range(20)]
    status = n1.status("n2")
    assert status.frames_sent >= 40 and status.bytes_sent > 0 and status.dropped == 0
    assert status.storage_uuid == n2.transport.hello.storage_uuid


async def test_three_transports_full_mesh(nursery):
    nodes = await start_mesh(nursery, ["n1", "n2", "n3"])
    for sender in nodes:
        for receiver in nodes:
            if sender is not receiver:
                for i in range(10):
                    assert sender.transport.send(receiver.node_id, f"g{i % 2}", f"{sender.node_id}:{i}".encode())
    await wait_until(lambda: all(len(n.inbox) == 20 for n in nodes), what="20 messages at each node")
    for receiver in nodes:
        for sender in nodes:
            if sender is not receiver:
                assert receiver.received(sender.node_id, "g0") == [f"{sender.node_id}:{i}".encode() for i in (0, 2, 4, 6, 8)]
                assert receiver.received(sender.node_id, "g1") == [f"{sender.node_id}:{i}".encode() for i in (1, 3, 5, 7, 9)]
    # One connection per pair: each node has exactly its two peers, each on one shared socket.
    assert all(paired(a, b) for a in nodes for b in nodes if a is not b)


def _raft_messages() -> list:
    meta = SnapshotMeta(index=40, term=3, conf=ConfState(voters=("n1", "n2", "n3"), learners=("n4",)))
    return [
        AppendEntries(from_id="n1", to_id="n2", term=3, leader_id="n1", prev_log_index=9, prev_log_term=2,
                      entries=(Entry(10, 3, EntryType.NORMAL, b"batch" * 100), Entry(11, 3, EntryType.NOOP)),
                      leader_commit=9, read_round=4),
        AppendEntriesResponse(from_id="n1", to_id="n2", term=3, success=False, rejected_index=9,
                              reject_hint_index=7, reject_hint_term=2),
        RequestVote(from_id="n1", to_id="n2", term=4, last_log_index=11, last_log_term=3, pre_vote=True),
        InstallSnapshot(from_id="n1", to_id="n2", term=3, leader_id="n1", meta=meta, offset=0,
                        data=bytes(range(256)) * 64, total_bytes=1 << 20, done=False),
        TimeoutNow(from_id="n1", to_id="n2", term=3),
        StatusProbeResponse(from_id="n1", to_id="n2", term=3, repairing=True, leader_id=None),
        RequestVoteResponse(from_id="n1", to_id="n2", term=4, vote_granted=True, pre_vote=True),
        InstallSnapshotResponse(from_id="n1", to_id="n2", term=3, snapshot_index=40, chunk_offset=0,
                                next_offset=16384, match_index=0),
        StatusProbe(from_id="n1", to_id="n2", term=3, repairing=True),
        TermQuery(from_id="n1", to_id="n2", term=1, query_id=(1 << 63) - 1),
        TermQueryResponse(from_id="n1", to_id="n2", term=7, query_id=5, term_known=False),
    ]


async def test_raft_messages_round_trip_through_the_transport(nursery):
    received: list = []
    n1 = await start_node(nursery, "n1")
    n2 = await start_node(nursery, "n2", on_message=lambda sender, group, payload: received.append(
        (sender, group, decode_message(payload))))
    connect([n1, n2])
    await wait_mesh([n1, n2])
    messages = _raft_messages()
    assert {type(m) for m in messages} == set(MESSAGE_TYPES)
    for message in messages:
        assert n1.transport.send("n2", "meta", encode_message(message))
    await wait_until(lambda: len(received) == len(messages), what="every Raft message")
    assert received == [("n1", "meta", message) for message in messages]


async def test_peer_killed_and_restarted_reconnects_and_delivery_resumes(nursery, caplog):
    n1, n2 = await start_mesh(nursery, ["n1", "n2"])
    port = n2.address[1]
    await n2.kill()
    await wait_until(lambda: not n1.status("n2").connected, what="n1 to notice n2 is gone")
    assert not n1.transport.send("n2", "meta", b"lost"), "a send to a disconnected peer is refused"
    await wait_until(lambda: n1.status("n2").dial_failures >= 2, what="n1 to keep redialing")

    with caplog.at_level(logging.WARNING, logger="jsraft.transport"):
        n2b = await start_node(nursery, "n2", port=port)  # a new process, a new data directory
        connect([n1, n2b])
        await wait_mesh([n1, n2b])
    assert "storage UUID changed" in caplog.text
    assert n1.status("n2").reconnects >= 1
    assert n1.transport.send("n2", "meta", b"after") and n2b.transport.send("n1", "meta", b"reply")
    await wait_until(lambda: n2b.received("n1") == [b"after"] and n1.received("n2") == [b"reply"],
                     what="delivery after the restart")
    assert b"lost" not in n2b.received("n1")


async def test_send_to_unknown_or_unconnected_peer_is_refused_not_blocked(nursery):
    n1 = await start_node(nursery, "n1", peers={"n2": (HOST, 1)})  # nobody listens on port 1
    assert not n1.transport.send("n9", "meta", b"x")
    assert n1.transport.dropped_unknown == 1
    assert not n1.transport.send("n2", "meta", b"x")
    assert n1.status("n2").dropped == 1 and not n1.status("n2").connected
    await wait_until(lambda: n1.status("n2").dial_failures >= 3, what="backoff redials")
    assert "dial" in n1.status("n2").last_error


async def test_send_rejects_a_frame_no_peer_would_accept(nursery):
    config = attrs.evolve(FAST, frame_bytes_max=4096, send_queue_bytes_max=8192)
    n1, n2 = await start_mesh(nursery, ["n1", "n2"], config=config)
    with pytest.raises(FrameTooLarge):
        n1.transport.send("n2", "meta", b"x" * 4096)
    assert n1.transport.send("n2", "meta", b"x" * 4000)
    await wait_until(lambda: n2.received("n1") == [b"x" * 4000], what="the largest allowed frame")


async def test_update_peers_removes_and_readds_a_member(nursery):
    n1, n2, n3 = await start_mesh(nursery, ["n1", "n2", "n3"])
    n1.transport.update_peers({"n2": n2.address})  # n3 left the configuration
    assert "n3" not in n1.transport.peer_status()
    await wait_until(lambda: not n3.status("n1").connected, what="n3's link to n1 to close")
    assert not n1.transport.send("n3", "meta", b"x")
    # n3 still knows n1 and redials; n1 refuses an unknown node, so n3 stays disconnected.
    await wait_until(lambda: "not a configured peer" in (n3.status("n1").last_error or ""),
                     what="n1 to refuse n3")
    assert paired(n1, n2) and n1.transport.send("n2", "meta", b"still here")
    await wait_until(lambda: n2.received("n1") == [b"still here"], what="n1->n2 unaffected")

    n1.transport.update_peers({"n2": n2.address, "n3": n3.address})
    await wait_mesh([n1, n2, n3])
    assert n1.transport.send("n3", "meta", b"welcome back")
    await wait_until(lambda: n3.received("n1") == [b"welcome back"], what="n1->n3 after re-adding")


async def test_idle_link_stays_up_on_keepalives(nursery):
    config = attrs.evolve(FAST, keepalive_s=0.05, idle_timeout_s=0.3)
    n1, n2 = await start_mesh(nursery, ["n1", "n2"], config=config)
    before = n1.status("n2")
    # Over twice idle_timeout_s with no application traffic: PINGs must keep the link (link invariant 2).
    await wait_until(lambda: n1.status("n2").frames_received >= before.frames_received + 14,
                     timeout_s=config.idle_timeout_s * 6, what="keepalive PINGs")
    after = n1.status("n2")
    assert after.connected and after.local_address == before.local_address and after.reconnects == 0


def _can_bind(host: str) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((host, 0))
        except OSError:
            return False
    return True


@pytest.mark.skipif(not _can_bind("127.0.0.12"), reason="needs the 127.0.0.0/8 loopback range (Linux)")
async def test_outgoing_connections_bind_to_bind_host(nursery):
    n1 = await start_node(nursery, "n1", host="127.0.0.11", bind_host="127.0.0.11")
    n2 = await start_node(nursery, "n2", host="127.0.0.12", bind_host="127.0.0.12")
    connect([n1, n2])
    await wait_mesh([n1, n2])
    # The canonical connection is n1's outbound one: n2 sees it come from n1's bound address.
    assert n2.status("n1").remote_address[0] == "127.0.0.11"
    assert n1.status("n2").local_address[0] == "127.0.0.11"


async def test_cancelling_run_closes_everything(nursery):
    n1, n2 = await start_mesh(nursery, ["n1", "n2"])
    await n1.kill()
    assert not n1.status("n2").connected
    await wait_until(lambda: not n2.status("n1").connected, what="n2 to see the close")
    with pytest.raises(OSError):
        await trio.open_tcp_stream(*n1.address)  # the listener is gone


async def test_wrong_node_at_a_peer_address_is_refused(nursery, caplog):
    n1 = await start_node(nursery, "n1")
    n3 = await start_node(nursery, "n3", peers={"n1": n1.address})  # n3 would accept n1
    with caplog.at_level(logging.WARNING, logger="jsraft.transport"):
        n1.transport.update_peers({"n2": n3.address})  # misconfigured: n3 listens where n2 should be
        await wait_until(lambda: "expected node 'n2'" in (n1.status("n2").last_error or ""),
                         what="n1 to notice the wrong node")
    assert not n1.status("n2").connected
    assert "expected node 'n2' at this address, found 'n3'" in caplog.text


async def test_a_transport_runs_again_after_cancellation(nursery):
    n1, n2 = await start_mesh(nursery, ["n1", "n2"])
    await n1.kill()
    await wait_until(lambda: not n2.status("n1").connected, what="n2 to see n1 stop")
    rerun = trio.CancelScope()

    async def run_again(task_status=trio.TASK_STATUS_IGNORED):
        with rerun:
            await n1.transport.run(task_status=task_status)

    await nursery.start(run_again)
    await wait_mesh([n1, n2])
    assert n1.transport.send("n2", "meta", b"second life")
    await wait_until(lambda: n2.received("n1") == [b"second life"], what="delivery after the rerun")
    rerun.cancel()
