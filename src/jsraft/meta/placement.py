"""Replica placement: which peers a stream's group runs on (DESIGN §5).

Owns: choosing N distinct peers that are known, online, in the requested cluster and carrying the
requested tags, preferring the peers with the fewest assets; and replacing a removed peer.

Invariants:
  1. A placement's peers are distinct, known, online and eligible for the placement's cluster and tags.
  2. Deterministic: among eligible peers the ones with fewest assets win, ties broken by node id, so the
     same inputs give the same peers on every run (the leader decides; apply only records).
  3. Kept peers (a scale-up's current set) keep their positions; new peers are appended. The first
     peer is the preferred leader, so a scale never moves leadership on its own account.
  4. `place` reads `assets` only when it has a choice to make (more than one eligible peer); the
     leader passes them as `LazyAssets`, so the count over every stream is made only then.

"Assets" are stream assignments (committed plus in-flight): consumers live inside their stream's group
and add no group to a peer. Online-ness is the leader's knowledge, passed in, never stored.

Imports: L0, L1 (`jsapi`), attrs, `meta.errors`. Reference: nats-server `server/jetstream_cluster.go`
(selectPeerGroup, remapStreamAssignment).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping

import attrs

from jsraft.errors import invariant
from jsraft.jsapi import Placement
from jsraft.meta.errors import ClusterNoPeers, ReplicasNotSupported


@attrs.frozen(kw_only=True)
class PeerInfo:
    """What placement knows about a node: its cluster name and server tags (from its PEER_ADD)."""

    cluster: str | None = None
    tags: tuple[str, ...] = ()


def count_assets(peer_sets: Iterable[tuple[str, ...]]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for peers in peer_sets:
        counts.update(peers)
    return counts


class LazyAssets(Mapping[str, int]):
    """Asset counts computed on first use (invariant 4): `place` with one eligible peer reads none, so a
    create on a single node does not count every stream's peers."""

    def __init__(self, count: Callable[[], Mapping[str, int]]) -> None:
        self._count = count
        self._counts: Mapping[str, int] | None = None

    def _get(self) -> Mapping[str, int]:
        if self._counts is None:
            self._counts = self._count()
        return self._counts

    def __getitem__(self, peer: str) -> int:
        return self._get()[peer]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


def _mismatch(info: PeerInfo, placement: Placement | None) -> str | None:
    """Why a peer does not fit `placement`: 'cluster' or 'tags', or None. Tags compare case-insensitively,
    as nats-server lower-cases server tags."""
    if placement is None:
        return None
    if placement.cluster is not None and placement.cluster != info.cluster:
        return "cluster"
    have = {tag.lower() for tag in info.tags}
    if any(tag.lower() not in have for tag in placement.tags):
        return "tags"
    return None


def eligible_peers(
    peers: Mapping[str, PeerInfo], online: Collection[str], placement: Placement | None,
    exclude: Collection[str] = (),
) -> tuple[list[str], dict[str, list[str]]]:
    """`(eligible peer ids, {reason: [peer ids]} for the others)`, both in node-id order."""
    eligible: list[str] = []
    refused: dict[str, list[str]] = {}
    for peer in sorted(peers):
        if peer in exclude:
            continue
        reason = "offline" if peer not in online else _mismatch(peers[peer], placement)
        if reason is None:
            eligible.append(peer)
        else:
            refused.setdefault(f"{reason} not matched" if reason != "offline" else reason, []).append(peer)
    return eligible, refused


def place(
    *, replicas: int, peers: Mapping[str, PeerInfo], online: Collection[str], assets: Mapping[str, int],
    placement: Placement | None = None, keep: tuple[str, ...] = (), clustered: bool = True,
) -> tuple[str, ...]:
    """`replicas` peers: `keep` first, then the eligible peers with the fewest assets (invariants 1–3).

    Raises `ReplicasNotSupported` (10074) for R>1 on a node that is not clustered, and
    `ClusterNoPeers` (10005) when too few peers are online and eligible. A cluster with fewer peers than
    replicas at all gets nats-server's own 400/10005 "no suitable peers for placement" (nats-server 2.15.1
    answers R5 on three nodes so), not 10023.
    """
    invariant(replicas >= 1 and len(keep) <= replicas, "place: 1 <= replicas and keep fits in replicas")
    if replicas > 1 and not clustered:
        raise ReplicasNotSupported()
    if replicas > len(peers):
        raise ClusterNoPeers()
    needed = replicas - len(keep)
    eligible, refused = eligible_peers(peers, online, placement, exclude=keep)
    if len(eligible) < needed:
        detail = "; ".join(f"{reason}: {', '.join(ids)}" for reason, ids in sorted(refused.items()))
        raise ClusterNoPeers(f"no suitable peers for placement: {needed} more needed, {len(eligible)} "
                             f"eligible" + (f" ({detail})" if detail else ""))
    # Invariant 4: one eligible peer is the choice whatever the counts say.
    ranked = eligible if len(eligible) == 1 else sorted(eligible, key=lambda peer: (assets.get(peer, 0), peer))
    chosen = keep + tuple(ranked[:needed])
    invariant(len(set(chosen)) == len(chosen) == replicas, "placement chose distinct peers")
    return chosen


def replace_peer(
    current: tuple[str, ...], removed: str, *, peers: Mapping[str, PeerInfo], online: Collection[str],
    assets: Mapping[str, int], placement: Placement | None = None,
) -> tuple[str, ...] | None:
    """`current` with `removed` replaced in place by the best spare, or None if there is no spare."""
    invariant(removed in current, "replace_peer: the removed peer is in the set")
    eligible, _ = eligible_peers(peers, online, placement, exclude=set(current))
    if not eligible:
        return None
    spare = min(eligible, key=lambda peer: (assets.get(peer, 0), peer))
    return tuple(spare if peer == removed else peer for peer in current)
