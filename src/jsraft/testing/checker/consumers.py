"""I7 consumer at-least-once (test code, issue #7, ../shared/CHAOS.md).

Owns: `check_i7`: `Facts -> verdict dict`, for the consumers listed in final/nodes.json "consumers".

Invariants (of this module's judgement):
  1. Start and end. W-cons consumers deliver all (deliver policy all), so a consumer's *start* is the
     first seq of the final content (the stream's first seq after every test purge); anything the test
     purged is exempt. Its *end* is the highest final-content seq published by a workload process (not
     "probe": the liveness probe may publish after the drain), or the highest seq the consumer was
     delivered if that is higher (then the probe published before the drain). Every final-content seq
     in [start, end] must be delivered at least once. When probe.json says the consumer's drain did not
     complete, this part is skipped: I9 already reports the incomplete drain.
  2. A confirmed ack (an "ack" event of type ok) is never undone: on every judged node's consumer state
     the acked seq is not pending, and, after a completed drain, ack_floor.stream_seq is at or above the
     highest confirmed-acked seq. Ack floors (stream and consumer seq) are equal on all judged nodes.
  3. No redelivery after the floor passed: the ack floor *passed* seq s at the first time T by which
     every final-content seq from start through s had a confirmed ack; a deliver event of s recorded
     more than REDELIVERY_GRACE_S after T is a violation. Two things are deliberately not flagged: a
     redelivery of s after only s's own ack (seqs below s may still be outstanding, so the server may
     legitimately still hold s as pending from an earlier ack-wait expiry), and a copy recorded within
     the grace after T (a copy the server sent before it processed the ack can sit in the client's
     subscription buffer until the next fetch; the grace is the W-cons ack wait, 2 s, plus slack).

Imports: stdlib, jsraft.testing.checker.facts.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from jsraft.testing.checker.facts import Facts, ranges, verdict

REDELIVERY_GRACE_S = 5.0


def _consumer_states(facts: Facts, consumer: str) -> dict[str, Any]:
    out = {}
    for node in facts.final.nodes:
        if node in facts.excused:
            continue
        per_stream = (facts.final.states[node].get("consumers") or {}).get(facts.stream) or {}
        out[node] = per_stream.get(consumer)
    return out


def _end(facts: Facts, delivered: set[int]) -> int:
    workload = [s for s, (value, _) in facts.majority.items()
                if (pub := facts.pubs.get(value)) is None or pub.process != "probe"]
    return max(max(workload, default=0), max(delivered, default=0))


def _floor_times(facts: Facts, acked: dict[int, float]) -> dict[int, float]:
    """seq -> the time the ack floor passed it (inf when it never did)."""
    out, running = {}, -math.inf
    for seq in sorted(facts.majority):
        running = max(running, acked.get(seq, math.inf))
        out[seq] = running
    return out


def _undelivered(facts: Facts, consumer: str, delivered: set[int]) -> list[dict[str, Any]]:
    drained = ((facts.final.probe or {}).get("drained") or {}).get(consumer, True)
    if not drained:
        return []
    end = _end(facts, delivered)
    missing = [s for s in facts.majority if s <= end and s not in delivered]
    return [{"kind": "undelivered", "consumer": consumer, "from_seq": lo, "to_seq": hi}
            for lo, hi in ranges(missing)]


def _pending_seqs(state: dict[str, Any]) -> list[int]:
    """`pending` as hooks.py gives it, [[stream_seq, delivery_count], ...]; bare seqs and
    {"stream_seq": ...} objects are read too."""
    out = []
    for item in state.get("pending") or ():
        if isinstance(item, dict):
            out.append(item.get("stream_seq"))
        else:
            out.append(item[0] if isinstance(item, (list, tuple)) else item)
    return out


def _state_problems(facts: Facts, consumer: str, acked: dict[int, float]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    states = _consumer_states(facts, consumer)
    floors = {}
    for node, state in sorted(states.items()):
        if not state:
            out.append({"kind": "consumer_state_missing", "consumer": consumer, "node": node})
            continue
        floor = state.get("ack_floor") or {}
        floors[node] = (floor.get("stream_seq"), floor.get("consumer_seq"))
        undone = sorted(s for s in _pending_seqs(state) if s in acked)
        if undone:
            out.append({"kind": "acked_pending", "consumer": consumer, "node": node, "seqs": undone[:20]})
        drained = ((facts.final.probe or {}).get("drained") or {}).get(consumer, True)
        top = max(acked, default=0)
        if drained and (floors[node][0] or 0) < top:
            out.append({"kind": "ack_floor_behind", "consumer": consumer, "node": node,
                        "ack_floor": floors[node][0], "highest_acked": top})
    if len(set(floors.values())) > 1:
        out.append({"kind": "ack_floors_differ", "consumer": consumer, "floors": floors})
    return out


def check_i7(facts: Facts) -> dict[str, Any]:
    deliveries: dict[str, list[tuple[int, float]]] = defaultdict(list)
    acked: dict[str, dict[int, float]] = defaultdict(dict)
    for e in facts.history.events:
        if e.fields.get("stream", facts.stream) != facts.stream:
            continue
        if e.f == "deliver":
            deliveries[e.fields["consumer"]].append((e.fields["seq"], e.t))
        elif e.f == "ack" and e.type == "ok":
            seqs = acked[e.fields["consumer"]]
            seqs[e.fields["seq"]] = min(seqs.get(e.fields["seq"], math.inf), e.t)
    bad: list[dict[str, Any]] = []
    for consumer in facts.final.consumers:
        mine = deliveries.get(consumer, [])
        bad += _undelivered(facts, consumer, {s for s, _ in mine})
        floor_t = _floor_times(facts, acked[consumer])
        bad += [{"kind": "redelivered_after_ack", "consumer": consumer, "seq": s, "t": t,
                 "floor_passed_t": floor_t[s]}
                for s, t in mine if t > floor_t.get(s, math.inf) + REDELIVERY_GRACE_S]
        bad += _state_problems(facts, consumer, acked[consumer])
    kinds = defaultdict(int)
    for b in bad:
        kinds[b["kind"]] += 1
    return verdict(bad, by_kind=dict(kinds), consumers=list(facts.final.consumers))
