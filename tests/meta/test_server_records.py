"""Server records in the meta state (issue #7): `PEER_SEEN` records a member's storage UUID, `PEER_REMOVE`
keeps the UUID the removed server had, `SERVER_READMIT` lets it back only with another UUID — and all of
it survives a snapshot (format version 2), while a state without such records still encodes as version 1.

Method: a leader machine proposes, a follower applies the same bytes; the two must agree (snapshot bytes,
digest), a machine restored from the snapshot must hold the same records, and refusals must leave the
state unchanged. Entry encodings round-trip and bad fields are refused at decode.
"""

from __future__ import annotations

import pytest
from meta_helpers import NODES3, commit, new_cluster

from jsraft.meta import (
    MalformedMetaEntry, MetaStateMachine, PeerSeen, ServerReadmit, ServerReadmitRefused, decode_entry,
    encode_entry,
)
from jsraft.meta.errors import ClusterPeerNotMember
from jsraft.meta.snapshot import MAGIC


def _both(leader: MetaStateMachine, follower: MetaStateMachine, proposal):
    applied = commit(leader, proposal)
    assert follower.apply(applied.index, proposal.data) == applied
    return applied


def test_seen_removed_readmitted_and_snapshotted():
    leader, follower = new_cluster(), new_cluster()
    assert leader.snapshot()[len(MAGIC)] == 1  # no server records: version 1, as before
    for peer in NODES3:
        _both(leader, follower, leader.propose_peer_seen(peer, f"uuid-{peer}"))
    assert leader.propose_peer_seen("n1", "uuid-n1").data is None  # already recorded
    _both(leader, follower, leader.propose_peer_remove("n3", online=NODES3))
    assert leader.removed_servers() == {"n3": "uuid-n3"} and "n3" not in leader.storage_uuids()

    # The removed disk: refused at apply (whatever the leader checked), state unchanged.
    digest_before = leader.digest()
    refused = _both(leader, follower, leader.propose_server_readmit("n3", "uuid-n3"))
    assert isinstance(refused.error, ServerReadmitRefused)
    assert leader.digest() == digest_before and leader.removed_servers() == {"n3": "uuid-n3"}
    seen = _both(leader, follower, leader.propose_peer_seen("n3", "uuid-other"))
    assert isinstance(seen.error, ClusterPeerNotMember)

    snapshot = leader.snapshot()
    assert snapshot[len(MAGIC)] == 2 and snapshot == follower.snapshot()
    restored = MetaStateMachine(clustered=True)
    restored.restore(snapshot)
    assert restored.removed_servers() == {"n3": "uuid-n3"} and restored.storage_uuids() == leader.storage_uuids()
    assert restored.snapshot() == snapshot and restored.digest() == leader.digest()

    # A wiped disk: readmitted; a second readmit of a peer is refused.
    _both(leader, follower, leader.propose_server_readmit("n3", "uuid-new"))
    assert leader.removed_servers() == {} and leader.storage_uuids()["n3"] == "uuid-new"
    _both(leader, follower, leader.propose_peer_add("n3"))
    again = _both(leader, follower, leader.propose_server_readmit("n3", "uuid-newer"))
    assert isinstance(again.error, ServerReadmitRefused)
    assert leader.digest() == follower.digest() and leader.snapshot() == follower.snapshot()


def test_removed_before_seen_is_recorded_without_a_uuid():
    machine = new_cluster()
    commit(machine, machine.propose_peer_remove("n2", online=NODES3))
    assert machine.removed_servers() == {"n2": ""}
    restored = MetaStateMachine(clustered=True)
    restored.restore(machine.snapshot())
    assert restored.removed_servers() == {"n2": ""}
    commit(machine, machine.propose_server_readmit("n2", "any"))
    assert machine.storage_uuids() == {"n2": "any"}


@pytest.mark.parametrize("entry", [PeerSeen(peer="n1", storage_uuid="u"), ServerReadmit(peer="n2", storage_uuid="v")])
def test_entries_round_trip(entry):
    assert decode_entry(encode_entry(entry)) == entry


def test_a_bad_storage_uuid_is_refused_at_decode():
    data = encode_entry(PeerSeen(peer="n1", storage_uuid="u"))
    bad = data.replace(b'"u"', b'" "')
    with pytest.raises(MalformedMetaEntry, match="storage uuid"):
        decode_entry(bad)
