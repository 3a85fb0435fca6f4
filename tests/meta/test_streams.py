"""Stream and consumer create/update/delete through `MetaStateMachine`, with every refusal's code.

Method: a 3- or 5-node meta state (peers added by committed entries) is driven the way the meta leader
drives it: `propose_*` then `apply` of the proposal's bytes at the next index. Each refusal is checked
for nats-server's `err_code` (server/errors.json). Entries that were valid when proposed but conflict
when applied (two leaders' proposals both committing) are applied directly, to show apply refuses them
deterministically and leaves the state unchanged.
"""

from __future__ import annotations

import pytest
from meta_helpers import NODES3, NODES5, NOW_NS, commit, config, create, new_cluster

from jsraft.errors import BadRequest, InvalidConfig, InvalidJSON, StreamNotFound, UnknownConfigField
from jsraft.meta import (
    ClusterNoPeers,
    ConsumerAlreadyExists,
    ConsumerNotFound,
    EntryKind,
    MaximumConsumersLimit,
    MaximumStreamsLimit,
    ReplicasNotSupported,
    StreamNameExist,
    StreamSubjectOverlap,
)

ONLINE = set(NODES5)


def test_create_assigns_a_group_peers_and_keeps_the_raw_bytes():
    machine = new_cluster(NODES3)
    raw = b'{"name":"ORDERS",  "subjects":["orders.>"], "num_replicas":3}'
    applied = commit(machine, machine.propose_create_stream("ORDERS", raw, now_ns=NOW_NS, online=ONLINE))
    assert applied.ok and applied.kind is EntryKind.CREATE_STREAM
    stream = machine.stream("ORDERS")
    assert stream.config_raw == raw and stream.config.subjects == ("orders.>",)
    assert stream.peers == NODES3 and stream.group == f"S-ORDERS-{applied.index}"
    assert (stream.created_ns, stream.created_index, stream.required_level) == (NOW_NS, applied.index, 0)
    assert machine.names() == ["ORDERS"] and machine.assignments_for("n2") == [stream]
    assert machine.has_stream("ORDERS") and not machine.has_stream("orders") and not machine.has_stream("OTHER")


def test_same_name_same_config_is_idempotent_different_config_is_10058():
    machine = new_cluster()
    create(machine, "S", subjects=["a"])
    # Same config, spelled differently and with a client-sent `_nats.` key: answered at once, no entry.
    again = machine.propose_create_stream(
        "S", b'{"subjects": ["a"], "metadata": {"_nats.req.level": "0"}}', now_ns=NOW_NS + 1, online=ONLINE)
    assert again.data is None and again.existing == machine.stream("S")
    with pytest.raises(StreamNameExist) as error:
        machine.propose_create_stream("S", config("S", subjects=["b"]), now_ns=NOW_NS, online=ONLINE)
    assert (error.value.err_code, error.value.http_code) == (10058, 400)


def test_subjects_overlap_is_10065():
    machine = new_cluster()
    create(machine, "A", subjects=["orders.*"])
    for subjects in (["orders.new"], ["*.*"], ["orders.>"], ["x", "*.new"]):
        with pytest.raises(StreamSubjectOverlap) as error:
            machine.propose_create_stream("B", config("B", subjects=subjects), now_ns=NOW_NS, online=ONLINE)
        assert error.value.err_code == 10065
    create(machine, "B", subjects=["orders.new.more"])  # one token more than orders.*: disjoint


def test_default_subject_is_the_name_and_is_guarded():
    machine = new_cluster()
    create(machine, "ORDERS")
    with pytest.raises(StreamSubjectOverlap):
        machine.propose_create_stream("OTHER", config("OTHER", subjects=["ORDERS"]), now_ns=0, online=ONLINE)


def test_bad_requests_keep_their_config_codes():
    machine = new_cluster()
    with pytest.raises(InvalidJSON):
        machine.propose_create_stream("S", b"{nope", now_ns=0, online=ONLINE)
    with pytest.raises(UnknownConfigField):
        machine.propose_create_stream("S", config("S", bogus=1), now_ns=0, online=ONLINE)
    with pytest.raises(InvalidConfig, match="does not match"):
        machine.propose_create_stream("S", config("T"), now_ns=0, online=ONLINE)
    assert machine.pending_count == 0 and machine.names() == []


def test_max_streams_is_10027():
    machine = new_cluster(max_streams=2)
    create(machine, "A")
    create(machine, "B")
    with pytest.raises(MaximumStreamsLimit) as error:
        machine.propose_create_stream("C", config("C"), now_ns=0, online=ONLINE)
    assert error.value.err_code == 10027


def test_replica_errors_10074_10005():
    standalone = new_cluster(("n1",), clustered=False)
    with pytest.raises(ReplicasNotSupported) as error:
        standalone.propose_create_stream("S", config("S", num_replicas=3), now_ns=0, online={"n1"})
    assert (error.value.err_code, error.value.http_code) == (10074, 500)
    machine = new_cluster(NODES3)
    with pytest.raises(ClusterNoPeers) as error:  # nats-server 2.15.1's answer to R5 on three nodes
        machine.propose_create_stream("S", config("S", num_replicas=5), now_ns=0, online=ONLINE)
    assert (error.value.err_code, error.value.http_code, error.value.description) == \
        (10005, 400, "no suitable peers for placement")
    with pytest.raises(ClusterNoPeers, match="offline: n3") as error:
        machine.propose_create_stream("S", config("S", num_replicas=3), now_ns=0, online={"n1", "n2"})
    assert (error.value.err_code, error.value.http_code) == (10005, 400)
    assert machine.pending_count == 0


def test_update_rules_are_nats_servers():
    machine = new_cluster()
    create(machine, "S", subjects=["s"], retention="limits", sealed=False, deny_delete=True, deny_purge=True,
           max_consumers=5)
    cases = [
        ({"storage": "memory"}, "can not change storage type"),
        ({"retention": "workqueue"}, "to/from workqueue"),
        ({"max_consumers": 6}, "can not change MaxConsumers"),
        ({"deny_delete": False}, "cancel deny message deletes"),
        ({"deny_purge": False}, "cancel deny purge"),
        ({"placement": {"cluster": "east"}}, "change placement"),
    ]
    base = {"subjects": ["s"], "deny_delete": True, "deny_purge": True, "max_consumers": 5}
    for change, why in cases:
        with pytest.raises(InvalidConfig, match=why) as error:
            machine.propose_update_stream("S", config("S", **{**base, **change}), online=ONLINE)
        assert error.value.err_code == 10052
    commit(machine, machine.propose_update_stream("S", config("S", **base, retention="interest"), online=ONLINE))
    assert machine.stream("S").config.retention == "interest"


def test_unseal_is_refused():
    machine = new_cluster()
    create(machine, "S", sealed=True)
    with pytest.raises(InvalidConfig, match="unseal"):
        machine.propose_update_stream("S", config("S", sealed=False), online=ONLINE)


def test_update_missing_stream_is_10059_and_overlap_is_10065():
    machine = new_cluster()
    with pytest.raises(StreamNotFound) as error:
        machine.propose_update_stream("S", config("S"), online=ONLINE)
    assert (error.value.err_code, error.value.http_code) == (10059, 404)
    create(machine, "A", subjects=["a.>"])
    create(machine, "B", subjects=["b.>"])
    with pytest.raises(StreamSubjectOverlap):
        machine.propose_update_stream("B", config("B", subjects=["b.>", "a.x"]), online=ONLINE)
    # Its own subjects never conflict with an update of itself.
    applied = commit(machine, machine.propose_update_stream("B", config("B", subjects=["b.*", "c"]),
                                                            online=ONLINE))
    assert applied.ok and machine.stream("B").subjects == ("b.*", "c")


def test_same_config_update_is_answered_without_an_entry():
    machine = new_cluster()
    create(machine, "S", subjects=["s"])
    proposal = machine.propose_update_stream("S", b'{"subjects":["s"]}', online=ONLINE)
    assert proposal.data is None and proposal.existing == machine.stream("S")


def test_scale_up_keeps_peers_in_place_and_scale_down_keeps_the_first():
    machine = new_cluster(NODES5)
    create(machine, "X", num_replicas=1)  # gives n1 an asset
    create(machine, "S", num_replicas=1)
    assert machine.stream("S").peers == ("n2",)
    commit(machine, machine.propose_update_stream("S", config("S", num_replicas=3), online=ONLINE))
    stream = machine.stream("S")
    assert stream.peers == ("n2", "n3", "n4") and stream.group.startswith("S-S-")
    commit(machine, machine.propose_update_stream("S", config("S", num_replicas=1), online=ONLINE))
    assert machine.stream("S").peers == ("n2",)
    assert machine.stream("S").group == stream.group and machine.stream("S").created_index == stream.created_index


def test_delete_only_by_an_applied_entry():
    machine = new_cluster()
    create(machine, "S")
    proposal = machine.propose_delete_stream("S")
    assert machine.names() == ["S"]  # proposing deletes nothing
    applied = commit(machine, proposal)
    assert applied.ok and applied.stream.name == "S" and machine.names() == []
    with pytest.raises(StreamNotFound):
        machine.propose_delete_stream("S")
    with pytest.raises(StreamNotFound):
        machine.stream("S")


def test_apply_refuses_conflicts_a_leader_could_not_see():
    """Two leaders' creates both commit: the later ones are refused by apply on every replica, which
    stay identical and unchanged by the refused entries."""
    leader_a, leader_b, follower = new_cluster(), new_cluster(), new_cluster()
    first = leader_a.propose_create_stream("A", config("A", subjects=["x.>"]), now_ns=1, online=ONLINE)
    second = leader_b.propose_create_stream("B", config("B", subjects=["x.y"]), now_ns=2, online=ONLINE)
    renamed = leader_b.propose_create_stream("A", config("A", subjects=["z"]), now_ns=3, online=ONLINE)
    snapshots = set()
    for machine in (leader_a, leader_b, follower):
        assert commit(machine, first).ok
        digest = machine.digest()
        results = [commit(machine, second), commit(machine, renamed)]
        assert [r.error.err_code for r in results] == [10065, 10058]
        assert machine.digest() == digest and machine.names() == ["A"]
        assert machine.pending_count == 0  # applying a leader's own entries clears its in-flight ones
        snapshots.add(machine.snapshot())
    assert len(snapshots) == 1


def test_consumers_create_delete_and_their_codes():
    machine = new_cluster()
    create(machine, "S", max_consumers=2)
    with pytest.raises(StreamNotFound):
        machine.propose_create_consumer("NOPE", "c", b"{}", now_ns=0)
    with pytest.raises(InvalidJSON):
        machine.propose_create_consumer("S", "c", b"[1]", now_ns=0)
    with pytest.raises(BadRequest, match="consumer name"):
        machine.propose_create_consumer("S", "a.b", b"{}", now_ns=0)
    applied = commit(machine, machine.propose_create_consumer("S", "c1", b'{"durable_name":"c1"}', now_ns=7))
    assert applied.ok and applied.consumer.name == "c1" and applied.consumer.created_index == applied.index
    assert machine.consumer("S", "c1").config_raw == b'{"durable_name":"c1"}'
    again = machine.propose_create_consumer("S", "c1", b'{ "durable_name": "c1" }', now_ns=8)
    assert again.data is None and again.existing == machine.consumer("S", "c1")
    with pytest.raises(ConsumerAlreadyExists) as error:
        machine.propose_create_consumer("S", "c1", b'{"durable_name":"c1","ack_policy":"none"}', now_ns=8)
    assert error.value.err_code == 10148
    commit(machine, machine.propose_create_consumer("S", "c2", b"{}", now_ns=9))
    with pytest.raises(MaximumConsumersLimit) as error:
        machine.propose_create_consumer("S", "c3", b"{}", now_ns=9)
    assert error.value.err_code == 10026
    with pytest.raises(ConsumerNotFound) as error:
        machine.propose_delete_consumer("S", "c9")
    assert (error.value.err_code, error.value.http_code) == (10014, 404)
    assert commit(machine, machine.propose_delete_consumer("S", "c1")).ok
    assert [c.name for c in machine.consumers("S")] == ["c2"]
    commit(machine, machine.propose_delete_stream("S"))
    with pytest.raises(StreamNotFound):
        machine.consumers("S")


def test_apply_indexes_must_increase():
    machine = new_cluster()
    proposal = machine.propose_create_stream("S", config("S"), now_ns=0, online=ONLINE)
    with pytest.raises(AssertionError, match="indexes must increase"):
        machine.apply(machine.applied_index, proposal.data)
