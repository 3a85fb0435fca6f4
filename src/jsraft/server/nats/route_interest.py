"""Subject interest exchanged between nodes, sans-IO: what this node advertises, what each peer did (L5).

Owns: `InterestSet` (a key `(subject filter, queue name or "")` -> weight, with an order-independent
digest kept up to date on every change), `LocalInterest` (this node's client subscriptions counted per
key and turned into advertised weights, plus the changes not yet sent), and `PeerView` (one peer's
advertised set as this node last synced it, fed with that peer's STATE, DELTA and DIGEST frames),
`RouteSub` (one such entry as `Routes.remote`'s sublist holds it) and `Outbound` (what this node sent one
peer: its interest frame sequence).

A weight is what a peer needs to route: 1 for plain interest (one forwarded copy serves every plain
subscription on the node, however many), the number of members for a queue group (nats-server's queue
weight, used to pick a node in proportion to its members).

Invariants:
  1. `InterestSet.digest` is the sum modulo 2**64 of `entry_hash(key, weight)` over its entries, so two
     sets with equal entries have equal digests whatever order they were built in.
  2. `LocalInterest.advertised` always equals the weights implied by the counts; every change of an
     advertised weight is also in `pending` until `take_pending()`, so a peer that received the last
     STATE and every DELTA since holds exactly `advertised`.
  3. A `PeerView` applies a DELTA only in sequence — same epoch, `seq == last seq + 1`, synced — and a
     STATE only when its chunks arrive complete and consecutive; anything else leaves the view unsynced
     (its entries kept: stale interest costs a wasted forward, missing interest a lost message) and asks
     for a resync. A DIGEST that disagrees with the view also asks for one.
  4. A view holds at most `entries_max` entries; a peer that advertises more is broken or hostile, and
     `TransportProtocolError` closes its link.

Imports: stdlib, L0, L4 (`transport.errors`), server siblings (`route_wire`).
Reference: nats-server `server/route.go` (RS+/RS- with queue weights, `sendSubsToRoute` on connect).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator

from jsraft.errors import invariant
from jsraft.server.nats.route_wire import Digest, Interest, Key, Kind
from jsraft.transport.errors import TransportProtocolError

DIGEST_MASK = (1 << 64) - 1
WEIGHT_MAX = 0xFFFFFFFF  # a u32 on the wire
_WEIGHT = struct.Struct("<I")

# (key, old weight, new weight); a weight of 0 means "no entry".
Change = tuple[Key, int, int]


def entry_hash(key: Key, weight: int) -> int:
    subject, queue = (part.encode("utf-8") for part in key)
    data = b"%d:%s%d:%s%s" % (len(subject), subject, len(queue), queue, _WEIGHT.pack(weight))
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


class InterestSet:
    __slots__ = ("weights", "digest")

    def __init__(self) -> None:
        self.weights: dict[Key, int] = {}
        self.digest = 0

    def __len__(self) -> int:
        return len(self.weights)

    def items(self) -> Iterator[tuple[Key, int]]:
        return iter(self.weights.items())

    def set(self, key: Key, weight: int) -> int:
        """Give `key` the weight `weight` (0 removes it); return its old weight (invariant 1)."""
        invariant(0 <= weight <= WEIGHT_MAX, "a weight fits a u32")
        old = self.weights.get(key, 0)
        if old == weight:
            return old
        if old:
            self.digest = (self.digest - entry_hash(key, old)) & DIGEST_MASK
        if weight:
            self.weights[key] = weight
            self.digest = (self.digest + entry_hash(key, weight)) & DIGEST_MASK
        else:
            del self.weights[key]
        return old


class LocalInterest:
    """This node's client subscriptions, as the peers should see them (invariant 2)."""

    def __init__(self) -> None:
        self.counts: dict[Key, int] = {}
        self.advertised = InterestSet()
        self.pending: dict[Key, int] = {}

    def change(self, key: Key, delta: int) -> bool:
        """One subscription with `key` came (+1) or went (-1); True when the advertised weight changed."""
        count = self.counts.get(key, 0) + delta
        invariant(count >= 0, "a subscription is removed only after it was added")
        if count:
            self.counts[key] = count
        else:
            del self.counts[key]
        weight = min(count, 1) if key[1] == "" else min(count, WEIGHT_MAX)
        if self.advertised.set(key, weight) == weight:
            return False
        self.pending[key] = weight
        return True

    def take_pending(self) -> dict[Key, int]:
        pending, self.pending = self.pending, {}
        return pending


class PeerView:
    """One peer's advertised interest as synced here (invariants 3 and 4)."""

    def __init__(self, entries_max: int) -> None:
        self.entries_max = entries_max
        self.interest = InterestSet()
        self.epoch: int | None = None
        self.seq = 0
        self.synced = False
        self._gathering: dict[Key, int] | None = None  # the chunks of a STATE seen so far
        self._gathering_epoch = 0
        self._gathering_seq = 0

    def on_interest(self, frame: Interest) -> tuple[list[Change], bool]:
        """Apply a STATE chunk or a DELTA: the changes to the view, and whether to ask for a resync."""
        if frame.kind is Kind.STATE:
            return self._on_state(frame)
        if not self.synced or self._gathering is not None or frame.epoch != self.epoch or frame.seq != self.seq + 1:
            return self._lost()
        self.seq = frame.seq
        changes = self._set_all(frame.entries.items())
        self._check_room(len(self.interest))
        return changes, False

    def _on_state(self, frame: Interest) -> tuple[list[Change], bool]:
        if frame.first:
            self._gathering, self._gathering_epoch, self._gathering_seq = {}, frame.epoch, frame.seq - 1
        if self._gathering is None or frame.epoch != self._gathering_epoch or frame.seq != self._gathering_seq + 1:
            return self._lost()
        self._gathering.update(frame.entries)
        self._gathering_seq = frame.seq
        self._check_room(len(self._gathering))
        if not frame.last:
            return [], False
        wanted, self._gathering = self._gathering, None
        gone = [(key, 0) for key in self.interest.weights.keys() - wanted.keys()]
        changes = self._set_all([*gone, *wanted.items()])
        self.epoch, self.seq, self.synced = frame.epoch, frame.seq, True
        return changes, False

    def check(self, digest: Digest) -> bool:
        """A DIGEST arrived: True when the view disagrees with it and a resync is needed."""
        if (self.synced and self._gathering is None and digest.epoch == self.epoch and digest.seq == self.seq
                and digest.count == len(self.interest) and digest.digest == self.interest.digest):
            return False
        self.synced = False
        return True

    def clear(self) -> list[Change]:
        """Forget the peer's interest (its link went down); the changes that removes."""
        changes = self._set_all([(key, 0) for key in list(self.interest.weights)])
        self.epoch, self.seq, self.synced, self._gathering = None, 0, False, None
        return changes

    def _lost(self) -> tuple[list[Change], bool]:
        self.synced = False
        self._gathering = None
        return [], True

    def _set_all(self, entries: Iterable[tuple[Key, int]]) -> list[Change]:
        changes = []
        for key, weight in entries:
            old = self.interest.set(key, weight)
            if old != weight:
                changes.append((key, old, weight))
        return changes

    def _check_room(self, entries: int) -> None:
        if entries > self.entries_max:
            raise TransportProtocolError(f"peer advertises more than {self.entries_max} interest entries")


class RouteSub:
    """One entry a peer advertised, in `Routes.remote` (sublist duck type: `subject`, `queue`)."""

    __slots__ = ("peer", "subject", "queue", "weight")

    def __init__(self, peer: str, key: Key, weight: int) -> None:
        self.peer = peer
        self.subject = key[0]
        self.queue = key[1] or None
        self.weight = weight

    def __repr__(self) -> str:
        return f"RouteSub({self.peer}, {self.subject!r}, {self.queue!r}, {self.weight})"


class Outbound:
    """What this node sent to one connected peer: the last interest frame's sequence, and whether the peer
    must get a full STATE before any DELTA (routes invariant 3)."""

    __slots__ = ("seq", "dirty", "resync_served_s")

    def __init__(self) -> None:
        self.seq = 0
        self.dirty = True
        self.resync_served_s = float("-inf")  # when a STATE last answered this peer's RESYNC
