"""Network faults between jsraft nodes: one API over two implementations (CHAOS.md "partition").

Owns: `LinkControl`, the state every implementation shares — which directed links `(src, dst)` are cut,
the helpers built on it (`partition`, `isolate`, `bridge`, `heal_all`, `swizzle`) and their fault log.
The two implementations (picked by `chaos.network.make_network(kind, nodes)`, which imports them: they
import this module, so the factory lives apart and no import cycle forms):
  - "relay" (`chaos.relay.Relay`): a userspace TCP relay in front of every node's cluster listener. Works
    anywhere, and is the only one with delays; nodes' `--routes` point at `relay.peer_address(src, dst)`.
  - "nft" (`chaos.netns.NftPartitioner`): drop rules between the nodes' own loopback addresses
    (127.0.0.11, .12, ...) inside a private network namespace (`chaos.netns`).

A directed link `(src, dst)` stands for the bytes flowing from src to dst, on whichever connection carries
them (the one src dialled and the one dst dialled): cutting `(n1, n2)` alone is one-way loss.

Invariants:
  1. `cut_links()` is exactly the set of directed links cut now; every change goes through `_apply_link`,
     which an implementation makes effective before it returns (no byte crosses a cut link afterwards).
  2. The helpers `partition`, `isolate`, `bridge` and `heal_all` *replace* the whole cut set (as Jepsen's
     partition nemesis does: `isolate(a)` then `isolate(b)` leaves only b isolated), while `cut`, `heal`,
     `cut_pair`, `heal_pair` and `rejoin` change only the links they name. `swizzle` steps set the cut
     set to "every link touching a node cut so far".
  3. Every change made through the public API is reported once to `faults_log(kind, phase, nodes,
     detail)`: cuts as kind "partition", phase "start"; heals as kind "heal", phase "end"; `detail` has
     "op" (the method) and "links" (the directed links it asked to be cut, or the ones it healed).
  4. Nodes are named once, at construction; a link to or from an unknown node is a programmer error.

Imports: stdlib, attrs, jsraft.errors (test code: may import anything; production never imports this).
"""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from jsraft.errors import invariant

Link = tuple[str, str]
FaultsLog = Callable[[str, str, list[str], dict[str, Any]], None]
MODES = ("blackhole", "reject")


def pair_links(a: str, b: str) -> set[Link]:
    """Both directions between `a` and `b`."""
    return {(a, b), (b, a)}


def partition_links(nodes: Sequence[str], groups: Iterable[Iterable[str]]) -> set[Link]:
    """Every directed link between nodes of different groups; a node in no group is a group of its own."""
    group_of: dict[str, int] = {}
    for number, group in enumerate(groups):
        for node in group:
            invariant(node in nodes, f"partition: unknown node {node!r}")
            invariant(node not in group_of, f"partition: {node!r} is in two groups")
            group_of[node] = number
    for node in nodes:
        group_of.setdefault(node, -1 - nodes.index(node))
    return {(a, b) for a, b in itertools.permutations(nodes, 2) if group_of[a] != group_of[b]}


def isolate_links(nodes: Sequence[str], node: str) -> set[Link]:
    return partition_links(nodes, [[node], [other for other in nodes if other != node]])


@attrs.frozen(kw_only=True)
class SwizzleStep:
    """One step of a swizzle: after it, exactly the links touching a node of `cut_nodes` are cut."""
    op: str  # "cut" (node's links go down) or "restore" (node's links come back, unless the peer is still cut)
    node: str
    cut_nodes: frozenset[str]

    def apply(self, network: "LinkControl") -> None:
        links = {link for link in itertools.permutations(network.nodes, 2)
                 if link[0] in self.cut_nodes or link[1] in self.cut_nodes}
        network.set_cut(links, op=f"swizzle_{self.op}", nodes=[self.node])


class LinkControl:
    """The cut set and the helpers over it; subclasses implement `_apply_link` (and `close`)."""

    def __init__(self, nodes: Sequence[str], *, faults_log: FaultsLog | None = None,
                 default_mode: str = "blackhole") -> None:
        invariant(len(set(nodes)) == len(nodes) >= 2, "a network needs at least two distinct nodes")
        invariant(default_mode in MODES, f"mode must be one of {MODES}")
        self.nodes: tuple[str, ...] = tuple(nodes)
        self.default_mode = default_mode
        self.faults_log = faults_log
        self._cut: dict[Link, str] = {}  # link -> mode
        # Scenarios call from worker threads: one change (apply + bookkeeping + log) at a time.
        self._control_lock = threading.RLock()

    # --- To implement ----------------------------------------------------------------------------------------

    def _apply_link(self, link: Link, mode: str | None) -> None:
        """Make `link` cut in `mode` ("blackhole" or "reject"), or healed when `mode` is None."""
        raise NotImplementedError

    def _apply_many(self, changes: dict[Link, str | None]) -> None:
        """Apply several link changes; implementations may do it atomically."""
        for link, mode in sorted(changes.items()):
            self._apply_link(link, mode)

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> "LinkControl":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- One link ------------------------------------------------------------------------------------------

    def cut_links(self) -> frozenset[Link]:
        return frozenset(self._cut)

    def cut(self, src: str, dst: str, *, mode: str | None = None) -> None:
        """Stop the bytes flowing from `src` to `dst` (one direction: one-way loss). `mode` "blackhole"
        (default: stalled, like dropped packets) or "reject" (connections reset, new ones refused)."""
        self._change({(src, dst)}, set(), mode, "cut", [src, dst])

    def cut_pair(self, a: str, b: str, *, mode: str | None = None) -> None:
        """Cut both directions between `a` and `b`."""
        self._change(pair_links(a, b), set(), mode, "cut_pair", [a, b])

    def heal(self, src: str, dst: str) -> None:
        self._change(set(), {(src, dst)}, None, "heal", [src, dst])

    def heal_pair(self, a: str, b: str) -> None:
        self._change(set(), pair_links(a, b), None, "heal_pair", [a, b])

    # --- Whole-network helpers (each replaces the cut set) ---------------------------------------------------

    def set_cut(self, links: Iterable[Link], *, mode: str | None = None, op: str = "set_cut",
                nodes: Sequence[str] | None = None, detail: dict[str, Any] | None = None) -> None:
        """Make exactly `links` cut: heal every other link."""
        wanted = set(links)
        others = set(itertools.permutations(self.nodes, 2)) - wanted
        self._change(wanted, others, mode, op, list(nodes or self.nodes), detail)

    def partition(self, groups: Iterable[Iterable[str]], *, mode: str | None = None) -> None:
        """Symmetric partition: nodes in different groups cannot talk (a node in no group is alone)."""
        groups = [sorted(group) for group in groups]
        self.set_cut(partition_links(self.nodes, groups), mode=mode, op="partition", detail={"groups": groups})

    def isolate(self, node: str, *, mode: str | None = None) -> None:
        """`node` can reach no one and no one reaches it; the others talk freely."""
        self.set_cut(isolate_links(self.nodes, node), mode=mode, op="isolate", nodes=[node])

    def bridge(self, a: str, b: str, via: str, *, mode: str | None = None) -> None:
        """`a` and `b` cannot talk to each other, both reach `via` (and everything else is open)."""
        invariant(len({a, b, via}) == 3 and via in self.nodes, "bridge: three distinct known nodes")
        self.set_cut(pair_links(a, b), mode=mode, op="bridge", nodes=[a, b, via], detail={"via": via})

    def rejoin(self, node: str) -> None:
        """Heal every link to and from `node`, leaving the other cuts alone (additive, like `heal`)."""
        links = {link for link in itertools.permutations(self.nodes, 2) if node in link}
        self._change(set(), links, None, "rejoin", [node])

    def heal_all(self) -> None:
        self.set_cut(set(), op="heal_all")

    def swizzle(self, rng: random.Random) -> list[SwizzleStep]:
        """Steps to apply over time: cut each node's links one at a time (a random order), then restore the
        nodes in another random order. The caller applies each with `step.apply(network)`."""
        order = list(self.nodes)
        rng.shuffle(order)
        steps, cut = [], frozenset[str]()
        for node in order:
            cut = cut | {node}
            steps.append(SwizzleStep(op="cut", node=node, cut_nodes=cut))
        rng.shuffle(order)
        for node in order:
            cut = cut - {node}
            steps.append(SwizzleStep(op="restore", node=node, cut_nodes=cut))
        return steps

    # --- Internals ------------------------------------------------------------------------------------------

    def _check_link(self, link: Link) -> None:
        invariant(link[0] != link[1] and link[0] in self.nodes and link[1] in self.nodes,
                  f"unknown or self link {link!r}")

    def _change(self, cut: set[Link], healed: set[Link], mode: str | None, op: str, nodes: list[str],
                detail: dict[str, Any] | None = None) -> None:
        with self._control_lock:
            self._change_locked(cut, healed, mode or self.default_mode, op, nodes, detail)

    def _change_locked(self, cut: set[Link], healed: set[Link], mode: str, op: str, nodes: list[str],
                       detail: dict[str, Any] | None) -> None:
        invariant(mode in MODES, f"mode must be one of {MODES}")
        changes: dict[Link, str | None] = {}
        for link in cut:
            self._check_link(link)
            if self._cut.get(link) != mode:
                changes[link] = mode
        for link in healed - cut:
            self._check_link(link)
            if link in self._cut:
                changes[link] = None
        self._apply_many(changes)
        for link, link_mode in changes.items():
            if link_mode is None:
                self._cut.pop(link, None)
            else:
                self._cut[link] = link_mode
        self._log(op, nodes, cut, {link for link, link_mode in changes.items() if link_mode is None}, mode, detail)

    def _log(self, op: str, nodes: list[str], cut: set[Link], healed: set[Link], mode: str,
             detail: dict[str, Any] | None) -> None:
        if self.faults_log is None:
            return
        extra = dict(detail or {})
        if cut:
            self.faults_log("partition", "start", nodes, {"op": op, "mode": mode, "links": sorted(map(list, cut)),
                                                           **extra})
        if healed or not cut:
            self.faults_log("heal", "end", nodes, {"op": op, "links": sorted(map(list, healed)), **extra})
