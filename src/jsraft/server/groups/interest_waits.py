"""`InterestWaits`: the push consumers led on this node that wait for a subscriber (layer L5).

Owns: per owner (a stream's `ConsumerService` on this node: anything with a `leading` table of its
consumers' leaders and a `wake()`), the `PushLeading`s it leads whose `interest` is False. The consumer
hub asks it, for each client subscription added on the node, which owners have such a consumer whose
deliver subject the subscription matches, and wakes those, so the consumer delivers at the subscription
rather than at its next look (`INTEREST_POLL_NS`). The cost of a subscription is then in proportion to
the push consumers waiting (usually none or a handful), not to the streams open here: a node with 10,000
KV buckets has 10,000 services, and every client's inbox, KV watch and push subscription is a SUB.

Invariants:
  1. No miss: every push consumer an owner leads without interest is here. A consumer starts waiting
     only by being made (its `interest` is False until its first pass) or by its `interest` turning
     False, and the owner notes both (`note`): its one factory of leaders notes each new one, and each
     `PushLeading`'s `watch` every change of its interest (consumer_push invariant 7: a property, which
     no write bypasses).
  2. Exact: an entry leaves when its consumer gains interest (`note`), when the owner's table of
     leaders changes — a create, delete, rebuild or step-down: `sync` recomputes the owner's entries from
     the table, O(its consumers), on those rare paths only — and when the owner closes (`forget`).
     `check` compares the registry with the full scan of the owners (`waiting_scan`).
  3. A missed removal cannot wake anything: `matching` checks each entry against its owner's table (the
     consumer still led there, still without interest) before it counts, drops a stale one and counts it
     (`stale`, 0 unless a removal was missed), so the owners it returns are exactly those the full scan
     would wake.
  4. Only owners the caller says are open (`is_open`: the replica is the node's open one for its stream)
     are returned, as the scan of the node's open replicas did; their entries stay until they close.

Imports: stdlib, L0 (`errors`), L1 (`subjects`), L3½ (`replica.consumer_push`). No trio: owners wake
themselves. Reference: nats-server `server/consumer.go` (`updateDeliveryInterest`: a push consumer
starts delivering when its deliver subject gains interest).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from jsraft import subjects
from jsraft.errors import invariant
from jsraft.replica.consumer_push import PushLeading


def waiting_scan(owners: Iterable[Any]) -> set[tuple[Any, PushLeading]]:
    """(owner, consumer) for every push consumer the `owners` lead without interest: the full scan."""
    return {(owner, leading) for owner in owners for leading in owner.leading.values()
            if type(leading) is PushLeading and not leading.interest}


class InterestWaits:
    def __init__(self) -> None:
        # owner -> its waiting consumers (a dict as an ordered set); an owner with none has no key.
        self._owners: dict[Any, dict[PushLeading, None]] = {}
        self.stale = 0  # entries `matching` found stale and dropped (invariant 3)

    def __bool__(self) -> bool:
        return bool(self._owners)

    def __len__(self) -> int:
        return sum(len(waiting) for waiting in self._owners.values())

    def note(self, owner: Any, leading: PushLeading) -> None:
        """`leading`, led by `owner`, was just made or its interest changed (invariants 1 and 2)."""
        if not leading.interest:
            self._owners.setdefault(owner, {})[leading] = None
            return
        waiting = self._owners.get(owner)
        if waiting is not None:
            waiting.pop(leading, None)
            if not waiting:
                del self._owners[owner]

    def sync(self, owner: Any) -> None:
        """`owner`'s table of leaders changed: its entries, recomputed from the table (invariant 2)."""
        waiting = dict.fromkeys(leading for _, leading in waiting_scan([owner]))
        if waiting:
            self._owners[owner] = waiting
        else:
            self._owners.pop(owner, None)

    def forget(self, owner: Any) -> None:
        """`owner` closed: its consumers wait for nobody here any more (invariant 2)."""
        self._owners.pop(owner, None)

    def matching(self, subscribed: str, is_open: Callable[[Any], bool]) -> list[Any]:
        """The open owners leading a consumer that waits for interest and whose deliver subject a new
        subscription on `subscribed` matches (invariants 3 and 4)."""
        found: list[Any] = []
        for owner, waiting in list(self._owners.items()):
            if not is_open(owner):
                continue
            hit = False
            for leading in list(waiting):
                if owner.leading.get(leading.name) is not leading or leading.interest:
                    del waiting[leading]  # invariant 3: a removal was missed; it must not wake the owner
                    self.stale += 1
                elif not hit and subjects.matches(subscribed, leading.deliver_subject):
                    hit = True
            if not waiting:
                del self._owners[owner]
            if hit:
                found.append(owner)
        return found

    def entries(self) -> set[tuple[Any, PushLeading]]:
        return {(owner, leading) for owner, waiting in self._owners.items() for leading in waiting}

    def check(self, owners: Iterable[Any]) -> None:
        """Invariant 2: the registry holds exactly what the full scan of `owners` finds (all of the node's
        open ones, for a full check). For tests and debugging: O(every consumer of `owners`)."""
        expected, held = waiting_scan(owners), self.entries()
        invariant(held == expected, "interest waits differ from the scan: missing "
                  f"{sorted((o.stream, l.name) for o, l in expected - held)}, extra "
                  f"{sorted((o.stream, l.name) for o, l in held - expected)}")
