"""I5 contiguity and order (test code, issue #7, ../shared/CHAOS.md).

Owns: `check_i5`: `Facts -> verdict dict`.

Invariants (of this module's judgement):
  1. Contiguity: on every judged node the stored seqs at or above the purge floor form one run with no
     hole between the lowest and the highest (a loss at either end is I1's to report, not a hole).
  2. Real-time order: if acked publish A completed (ok) before acked publish B was first invoked, then
     seq(A) < seq(B). Checked in O(n log n): B in order of first invoke, A in order of completion, with a
     running maximum of the seqs of the As completed so far.
  3. Per client: a client's acked publishes, in the order the client first invoked them, have strictly
     increasing seqs.

Imports: stdlib, jsraft.testing.checker.facts.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from jsraft.testing.checker.facts import Facts, ranges, verdict


def _holes(facts: Facts) -> list[dict[str, Any]]:
    out = []
    for node, content in sorted(facts.contents.items()):
        seqs = sorted(s for s in content if s >= facts.purge_floor)
        missing = []
        for before, after in zip(seqs, seqs[1:]):
            missing.extend(range(before + 1, after))
        for lo, hi in ranges(missing):
            out.append({"kind": "gap", "node": node, "from_seq": lo, "to_seq": hi})
    return out


def _real_time(facts: Facts) -> list[dict[str, Any]]:
    acked = [p for p in facts.pubs.values() if p.status == "acked"]
    by_completion = sorted(acked, key=lambda p: p.ok_t)
    out = []
    done, best = 0, None  # best: the completed publish with the highest seq so far
    for b in sorted(acked, key=lambda p: p.invoke_t):
        while done < len(by_completion) and by_completion[done].ok_t < b.invoke_t:
            a = by_completion[done]
            if best is None or a.seq > best.seq:
                best = a
            done += 1
        if best is not None and best.seq >= b.seq:
            out.append({"kind": "real_time", "earlier": best.value, "earlier_seq": best.seq,
                        "earlier_ok_t": best.ok_t, "later": b.value, "later_seq": b.seq,
                        "later_invoke_t": b.invoke_t})
    return out


def _per_client(facts: Facts) -> list[dict[str, Any]]:
    by_client: dict[str, list[Any]] = defaultdict(list)
    for p in facts.pubs.values():
        if p.status == "acked":
            by_client[p.process].append(p)
    out = []
    for client, pubs in sorted(by_client.items()):
        pubs.sort(key=lambda p: p.invoke_t)
        for prev, cur in zip(pubs, pubs[1:]):
            if cur.seq <= prev.seq:
                out.append({"kind": "client_order", "client": client, "earlier": prev.value,
                            "earlier_seq": prev.seq, "later": cur.value, "later_seq": cur.seq})
    return out


def check_i5(facts: Facts) -> dict[str, Any]:
    holes, real_time, client = _holes(facts), _real_time(facts), _per_client(facts)
    return verdict(holes + real_time + client, gaps=len(holes), real_time_violations=len(real_time),
                   client_order_violations=len(client))
