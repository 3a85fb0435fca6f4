"""The leader counts its in-flight proposals in every check (DESIGN §5).

Method: proposals are made on one machine and *not* applied, so the only thing that can refuse the
second request is the leader's accounting of the first; then the first is applied, cancelled or
abandoned, and the effect on the next request is checked.
"""

from __future__ import annotations

import pytest
from meta_helpers import NODES3, NODES5, commit, config, create, new_cluster

from jsraft.errors import InvalidConfig, InvalidJSON
from jsraft.meta import (
    ClusterNoPeers,
    MaximumConsumersLimit,
    MaximumStreamsLimit,
    MetaProposalsFull,
    StreamNameExist,
    StreamSubjectOverlap,
)

ONLINE = set(NODES5)


def test_overlapping_subjects_in_flight_refuse_the_second():
    machine = new_cluster()
    first = machine.propose_create_stream("A", config("A", subjects=["orders.*"]), now_ns=1, online=ONLINE)
    with pytest.raises(StreamSubjectOverlap):
        machine.propose_create_stream("B", config("B", subjects=["orders.new"]), now_ns=2, online=ONLINE)
    assert commit(machine, first).ok
    with pytest.raises(StreamSubjectOverlap):  # and still refused once the first committed
        machine.propose_create_stream("B", config("B", subjects=["orders.new"]), now_ns=2, online=ONLINE)


def test_pending_update_subjects_are_claimed():
    machine = new_cluster()
    create(machine, "A", subjects=["a"])
    machine.propose_update_stream("A", config("A", subjects=["a", "b.>"]), online=ONLINE)
    with pytest.raises(StreamSubjectOverlap):
        machine.propose_create_stream("B", config("B", subjects=["b.x"]), now_ns=1, online=ONLINE)


def test_same_name_in_flight():
    machine = new_cluster()
    first = machine.propose_create_stream("S", config("S", subjects=["s"]), now_ns=1, online=ONLINE)
    retry = machine.propose_create_stream("S", b'{"subjects":["s"]}', now_ns=2, online=ONLINE)
    assert retry.in_flight and retry.data == first.data and machine.pending_count == 1
    with pytest.raises(StreamNameExist):
        machine.propose_create_stream("S", config("S", subjects=["t"]), now_ns=3, online=ONLINE)


def test_max_streams_counts_in_flight_creates():
    machine = new_cluster(max_streams=1)
    first = machine.propose_create_stream("A", config("A"), now_ns=1, online=ONLINE)
    with pytest.raises(MaximumStreamsLimit):
        machine.propose_create_stream("B", config("B"), now_ns=2, online=ONLINE)
    machine.cancel_proposal(first.data)  # Raft refused it: the slot is free again
    machine.propose_create_stream("B", config("B"), now_ns=2, online=ONLINE)


def test_max_consumers_counts_in_flight_creates():
    machine = new_cluster()
    create(machine, "S", max_consumers=1)
    machine.propose_create_consumer("S", "c1", b"{}", now_ns=1)
    assert machine.propose_create_consumer("S", "c1", b"{}", now_ns=2).in_flight
    with pytest.raises(MaximumConsumersLimit):
        machine.propose_create_consumer("S", "c2", b"{}", now_ns=2)


def test_in_flight_creates_spread_over_peers():
    machine = new_cluster(NODES3)
    peers = [machine.propose_create_stream(name, config(name), now_ns=1, online=ONLINE).entry.peers
             for name in ("A", "B", "C")]
    assert peers == [("n1",), ("n2",), ("n3",)]


def test_pending_peer_remove_takes_the_peer_out_of_placement():
    machine = new_cluster(NODES3)
    machine.propose_peer_remove("n1", online=ONLINE)
    with pytest.raises(ClusterNoPeers):  # the cluster is about to have two peers
        machine.propose_create_stream("S", config("S", num_replicas=3), now_ns=1, online=ONLINE)
    assert machine.propose_create_stream("T", config("T"), now_ns=1, online=ONLINE).entry.peers == ("n2",)


def test_apply_and_abandon_release_claims():
    machine = new_cluster()
    first = machine.propose_create_stream("A", config("A", subjects=["x"]), now_ns=1, online=ONLINE)
    assert machine.pending_count == 1
    commit(machine, first)
    assert machine.pending_count == 0
    machine.propose_create_stream("B", config("B", subjects=["y"]), now_ns=2, online=ONLINE)
    machine.abandon_proposals()  # leadership lost
    assert machine.pending_count == 0
    machine.propose_create_stream("C", config("C", subjects=["y"]), now_ns=3, online=ONLINE)


def test_in_flight_proposals_are_bounded():
    machine = new_cluster(pending_max=2)
    machine.propose_create_stream("A", config("A"), now_ns=1, online=ONLINE)
    machine.propose_create_stream("B", config("B"), now_ns=1, online=ONLINE)
    with pytest.raises(MetaProposalsFull) as error:
        machine.propose_create_stream("C", config("C"), now_ns=1, online=ONLINE)
    assert (error.value.err_code, error.value.http_code) == (20302, 503)


def test_updates_are_judged_against_the_in_flight_update():
    machine = new_cluster(NODES5)
    create(machine, "S", subjects=["s"], num_replicas=1)
    seal = machine.propose_update_stream("S", config("S", subjects=["s"], sealed=True), online=ONLINE)
    with pytest.raises(InvalidConfig, match="unseal"):
        machine.propose_update_stream("S", config("S", subjects=["s"]), online=ONLINE)
    assert machine.propose_update_stream("S", config("S", subjects=["s"], sealed=True), online=ONLINE).in_flight
    scale = machine.propose_update_stream("S", config("S", subjects=["s"], sealed=True, num_replicas=3),
                                          online=ONLINE)
    assert scale.entry.peers[0] == seal.entry.peers[0] and len(scale.entry.peers) == 3
    for proposal in (seal, scale):
        assert commit(machine, proposal).ok
    assert machine.stream("S").config.sealed and len(machine.stream("S").peers) == 3


def test_a_pending_delete_blocks_a_create_of_the_same_name():
    machine = new_cluster()
    create(machine, "S")
    delete = machine.propose_delete_stream("S")
    with pytest.raises(StreamNameExist, match="being deleted"):
        machine.propose_create_stream("S", config("S"), now_ns=1, online=ONLINE)
    commit(machine, delete)
    create(machine, "S")


def test_max_streams_zero_means_unlimited_as_in_nats_server():
    machine = new_cluster(max_streams=0)
    for name in ("A", "B", "C"):
        create(machine, name)


def test_absurdly_nested_config_is_invalid_json():
    machine = new_cluster()
    with pytest.raises(InvalidJSON):
        machine.propose_create_stream("S", b'{"name":"S","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                                      now_ns=1, online=ONLINE)
