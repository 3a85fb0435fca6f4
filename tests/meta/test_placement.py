"""Replica placement (`jsraft.meta.placement`) and re-placement on peer remove.

Method: Hypothesis generates clusters (peers with clusters and tags, an online subset, asset counts)
and requests; `place` must return distinct, eligible peers with the fewest assets (no unchosen eligible
peer ranks before a chosen one by `(assets, node id)`), deterministically, keeping kept peers in place,
or raise the right error exactly when too few peers qualify. Peer remove is then checked through the
machine: a spare replaces the removed peer in place, the fullest spares are avoided, and without a
spare the peer is dropped (R>1) or kept (R1), never losing the assignment.
"""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings
from meta_helpers import NODES3, NODES5, commit, create, new_cluster

from jsraft.jsapi import Placement
from jsraft.meta import (
    ClusterNoPeers,
    ClusterPeerNotMember,
    PeerInfo,
    PeerRemove,
    Replacement,
    encode_entry,
    place,
    replace_peer,
)
from jsraft.meta.placement import LazyAssets, eligible_peers

node_ids = st.sampled_from([f"n{i}" for i in range(1, 9)])
clusters = st.sampled_from(["east", "west"])
tag_sets = st.lists(st.sampled_from(["ssd", "SSD", "hdd", "az1"]), max_size=2).map(tuple)
peer_maps = st.dictionaries(node_ids, st.builds(PeerInfo, cluster=st.none() | clusters, tags=tag_sets),
                            min_size=1, max_size=8)
placements = st.none() | st.builds(Placement, cluster=st.none() | clusters,
                                   tags=st.lists(st.sampled_from(["ssd", "az1"]), max_size=1).map(tuple))


@settings(max_examples=300)
@given(peer_maps, st.data())
def test_place_properties(peers, data):
    online = data.draw(st.sets(st.sampled_from(sorted(peers))))
    assets = data.draw(st.dictionaries(st.sampled_from(sorted(peers)), st.integers(0, 3)))
    placement = data.draw(placements)
    replicas = data.draw(st.integers(1, 5))
    eligible, _ = eligible_peers(peers, online, placement)
    kwargs = dict(replicas=replicas, peers=peers, online=online, assets=assets, placement=placement)
    if len(eligible) < replicas:  # fewer peers than replicas at all included
        with pytest.raises(ClusterNoPeers):
            place(**kwargs)
        return
    chosen = place(**kwargs)
    assert len(chosen) == len(set(chosen)) == replicas
    assert set(chosen) <= set(eligible) <= online
    rank = {p: (assets.get(p, 0), p) for p in eligible}
    assert max(rank[p] for p in chosen) < min((rank[p] for p in set(eligible) - set(chosen)),
                                              default=(99, "~"))
    assert [rank[p] for p in chosen] == sorted(rank[p] for p in chosen)  # fewest first
    assert place(**kwargs) == chosen  # deterministic


@settings(max_examples=100)
@given(peer_maps, st.data())
def test_keep_stays_in_place(peers, data):
    ids = sorted(peers)
    keep = tuple(data.draw(st.lists(st.sampled_from(ids), unique=True, max_size=len(ids))))
    replicas = data.draw(st.integers(max(1, len(keep)), max(1, len(ids))))
    try:
        chosen = place(replicas=replicas, peers=peers, online=set(ids), assets={}, keep=keep)
    except ClusterNoPeers:
        return
    assert chosen[: len(keep)] == keep and len(set(chosen)) == replicas


def test_tags_and_cluster_are_honoured_case_insensitively():
    peers = {"n1": PeerInfo(cluster="east", tags=("SSD",)), "n2": PeerInfo(cluster="west", tags=("ssd",)),
             "n3": PeerInfo(cluster="east", tags=("hdd",))}
    online = set(peers)
    assert place(replicas=1, peers=peers, online=online, assets={}, placement=Placement(tags=("ssd",))) == ("n1",)
    assert place(replicas=2, peers=peers, online=online, assets={"n1": 9},
                 placement=Placement(tags=("ssd",))) == ("n2", "n1")
    assert place(replicas=1, peers=peers, online=online, assets={}, placement=Placement(cluster="west")) == ("n2",)
    with pytest.raises(ClusterNoPeers, match="tags not matched: n3"):
        place(replicas=3, peers=peers, online=online, assets={}, placement=Placement(tags=("ssd",)))


def test_machine_placement_follows_tags():
    machine = new_cluster(NODES5, tags={"n4": ("ssd",), "n5": ("ssd",)})
    applied = create(machine, "S", num_replicas=2, placement={"tags": ["ssd"]})
    assert applied.stream.peers == ("n4", "n5")


def test_replace_peer_picks_the_emptiest_spare():
    peers = {n: PeerInfo() for n in NODES5}
    assert replace_peer(("n1", "n2", "n3"), "n2", peers=peers, online=set(NODES5),
                        assets={"n4": 2, "n5": 1}) == ("n1", "n5", "n3")
    assert replace_peer(("n1", "n2", "n3"), "n2", peers=peers, online={"n1", "n3"}, assets={}) is None


def test_peer_remove_replaces_drops_or_keeps():
    machine = new_cluster(NODES5)
    create(machine, "R3", num_replicas=3)  # n1 n2 n3
    create(machine, "R1", num_replicas=1)  # n4: fewest assets
    create(machine, "OTHER", num_replicas=1)  # n5
    proposal = machine.propose_peer_remove("n1", online=set(NODES5))
    assert proposal.entry.replacements == (
        Replacement(stream="R3", old_peers=("n1", "n2", "n3"), new_peers=("n4", "n2", "n3")),)
    applied = commit(machine, proposal)
    assert applied.changed == ("R3",) and machine.stream("R3").peers == ("n4", "n2", "n3")
    assert "n1" not in machine.peers()
    # No online spare: R3 loses the peer (runs short), R1 keeps its only peer rather than lose the stream.
    commit(machine, machine.propose_peer_remove("n4", online=set()))
    assert machine.stream("R3").peers == ("n2", "n3") and machine.stream("R1").peers == ("n4",)
    with pytest.raises(ClusterPeerNotMember) as error:
        machine.propose_peer_remove("n1", online=set(NODES5))
    assert error.value.err_code == 10040


def test_two_removals_spread_over_spares():
    machine = new_cluster(NODES5)
    create(machine, "A", num_replicas=3)  # n1 n2 n3
    create(machine, "B", num_replicas=3)  # n4 n5 n1
    proposal = machine.propose_peer_remove("n1", online=set(NODES5))
    new_sets = {r.stream: r.new_peers for r in proposal.entry.replacements}
    assert new_sets == {"A": ("n4", "n2", "n3"), "B": ("n4", "n5", "n2")}


def test_stale_replacement_falls_back_to_dropping_the_peer():
    machine = new_cluster(NODES5)
    create(machine, "S", num_replicas=3)
    stale = PeerRemove(peer="n1", replacements=(
        Replacement(stream="S", old_peers=("n1", "n9", "n3"), new_peers=("n5", "n9", "n3")),))
    applied = machine.apply(machine.applied_index + 1, encode_entry(stale))
    assert applied.changed == ("S",) and machine.stream("S").peers == ("n2", "n3")


def test_an_unknown_online_node_is_never_chosen():
    machine = new_cluster(NODES3)
    applied = create(machine, "S", num_replicas=3, online=set(NODES3) | {"n0"})
    assert set(applied.stream.peers) == set(NODES3)


def test_assets_are_counted_only_when_there_is_a_choice():
    """Placement invariant 4: one eligible peer is chosen without counting; two are ranked by the counts."""
    counted: list[int] = []

    def count() -> dict[str, int]:
        counted.append(1)
        return {"n1": 3, "n2": 1}

    one = {"n1": PeerInfo()}
    assert place(replicas=1, peers=one, online={"n1"}, assets=LazyAssets(count)) == ("n1",)
    assert counted == []
    two = {"n1": PeerInfo(), "n2": PeerInfo()}
    assert place(replicas=1, peers=two, online={"n1", "n2"}, assets=LazyAssets(count)) == ("n2",)
    assert counted == [1]
    lazy = LazyAssets(count)
    assert dict(lazy) == {"n1": 3, "n2": 1} and len(lazy) == 2 and counted == [1, 1]
