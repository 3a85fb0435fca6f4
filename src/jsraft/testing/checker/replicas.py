"""Invariants about replicas (test code, issue #7, ../shared/CHAOS.md): I2 replicas agree, I6 stable
reads, I10 honest repair.

Owns: `check_i2`, `check_i6`, `check_i10`, each `Facts -> verdict dict`.

Invariants (of this module's judgement):
  1. I2: every judged node (facts invariant 3) is readable, holds the same (value, hash) at every seq, and
     reports the same first_seq, last_seq, msgs, bytes and digest for the stream. Divergent seqs are
     reported compressed into ranges, with per-node samples.
  2. I6: every deliver event on the stream shows the final content at its seq (facts invariant 4). A seq
     below the purge floor is exempt; a seq some node holds but no majority agrees on is left to I2; a
     delivered seq that no judged node holds any more is a violation ("vanished").
  3. I10: each node in nodes.json "corrupted" is either excused (repairing and not leading: facts
     invariant 3) or *repaired*: its content equals the final content and its digest the majority's.
     Independently, no node that leads the stream may report a digest other than the one a strict
     majority of nodes reports, and no repairing node may lead.

Imports: stdlib, jsraft.testing.checker.facts.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from jsraft.testing.checker.facts import Facts, is_leader, ranges, verdict

STATE_FIELDS = ("first_seq", "last_seq", "msgs", "bytes", "digest")


def _divergent(facts: Facts) -> list[int]:
    contents = list(facts.contents.values())
    if len(contents) < 2:
        return []
    first, rest = contents[0], contents[1:]
    seqs = set(first)
    for content in rest:
        seqs.update(content)
    return sorted(s for s in seqs if any(c.get(s) != first.get(s) for c in rest) or s not in first)


def _state_differences(facts: Facts) -> list[dict[str, Any]]:
    judged = [n for n in facts.final.nodes if n not in facts.excused]
    states = {n: facts.replica_state(n) for n in judged}
    out = [{"kind": "state_missing", "node": n} for n, s in states.items() if not s]
    present = {n: s for n, s in states.items() if s}
    for field in STATE_FIELDS:
        values = {n: s.get(field) for n, s in present.items()}
        if len(set(map(repr, values.values()))) > 1:
            out.append({"kind": "state_differs", "field": field, "values": values})
    return out


def check_i2(facts: Facts) -> dict[str, Any]:
    bad: list[dict[str, Any]] = [{"kind": "unreadable", "node": n, "error": e}
                                 for n, e in sorted(facts.unreadable.items())]
    divergent = _divergent(facts)
    states = _state_differences(facts)
    samples = [{"kind": "divergent", "seq": s,
                "entries": {n: c.get(s) for n, c in sorted(facts.contents.items())}} for s in divergent]
    # Put one sample of each kind first, so a report shows every kind of disagreement.
    ordered = bad + states + samples
    return verdict(ordered, divergent_seqs=len(divergent), divergent_ranges=ranges(divergent)[:100],
                   state_differences=len(states), unreadable=sorted(facts.unreadable))


def check_i6(facts: Facts) -> dict[str, Any]:
    held = set()
    for content in facts.contents.values():
        held.update(content)
    bad: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    checked = 0
    for e in facts.history.events:
        if e.f != "deliver" or e.fields.get("stream", facts.stream) != facts.stream:
            continue
        seq, got = e.fields["seq"], (e.fields.get("value"), e.fields["hash"])
        if seq < facts.purge_floor:
            continue
        checked += 1
        final = facts.majority.get(seq)
        key = (seq, got)
        if final == got or key in seen or (final is None and seq in held):
            continue
        seen.add(key)
        bad.append({"kind": "vanished" if final is None else "changed", "consumer": e.fields["consumer"],
                    "seq": seq, "delivered": list(got), "final": final, "t": e.t})
    return verdict(bad, deliveries_checked=checked)


def _majority_digest(facts: Facts) -> str | None:
    digests = Counter(facts.replica_state(n).get("digest") for n in facts.final.nodes
                      if n not in facts.excused)
    digest, n = digests.most_common(1)[0] if digests else (None, 0)
    return digest if digest is not None and 2 * n > len(facts.final.nodes) else None


def _repaired(facts: Facts, node: str, digest: str | None) -> bool:
    content = facts.contents.get(node)
    if content is None:
        return False
    floor = facts.purge_floor
    mine = {s: e for s, e in content.items() if s >= floor}
    final = {s: e for s, e in facts.majority.items() if s >= floor}
    return mine == final and facts.replica_state(node).get("digest") == digest


def check_i10(facts: Facts) -> dict[str, Any]:
    digest = _majority_digest(facts)
    status: dict[str, str] = {}
    bad: list[dict[str, Any]] = []
    for node in facts.final.corrupted:
        if node in facts.excused:
            status[node] = "repairing"
        elif _repaired(facts, node, digest):
            status[node] = "repaired"
        else:
            status[node] = "damaged"
            bad.append({"kind": "not_repaired", "node": node})
    for node in facts.final.nodes:
        state = facts.final.states[node]
        if not is_leader(node, state, facts.stream, facts.final.probe):
            continue
        mine = facts.replica_state(node)
        if mine.get("repairing"):
            bad.append({"kind": "repairing_leader", "node": node})
        if digest is not None and mine.get("digest") != digest:
            bad.append({"kind": "leader_digest_differs", "node": node, "digest": mine.get("digest"),
                        "majority_digest": digest})
    return verdict(bad, corrupted=status, majority_digest=digest)
