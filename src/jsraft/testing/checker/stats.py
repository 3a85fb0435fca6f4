"""What the checker reports besides verdicts (test code, issue #7): counts, availability gaps with the
faults active during them, and repair times.

Owns: `counts`, `availability`, `repair_times`, each `Facts -> dict`.

Invariants:
  1. An availability gap is a window with no ok publish on the main stream by a workload process: from
     the first publish invoke to the first ok, between consecutive oks, and from the last ok to the last
     publish event. The GAPS_MAX longest are reported with every fault whose window overlaps them.
  2. Entries of BRACKET_KINDS (the run itself) are not faults. A fault's window runs from its "start"
     to the next "end" of the same kind and nodes (to the end of the history if none); an "instant"
     fault's window is its own time.
  3. Repair times come from faults.jsonl: "start"/"end" pairs of kinds containing "repair", and any
     fault detail carrying a measured duration — "repair_s", or an instant repair event's "seconds" (the
     chaos runner's `repair` event: restart to whole). An instant event's own zero-length window is
     never a repair time (it read as 0.0 for every corrupted node before session 11).

Imports: stdlib, jsraft.testing.checker.facts.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from jsraft.testing.checker.facts import Facts

GAPS_MAX = 5
# Fault-log entries that bracket the whole run rather than inject anything (runner.py's "scenario").
BRACKET_KINDS = frozenset({"scenario"})


def counts(facts: Facts) -> dict[str, Any]:
    status = Counter(p.status for p in facts.pubs.values())
    events = facts.history.events
    by_f = Counter((e.f, e.type) for e in events)
    return {
        "events": len(events),
        "publishes": len(facts.pubs), "publish_attempts": by_f[("publish", "invoke")],
        "acked": status["acked"], "failed": status["failed"], "indeterminate": status["indeterminate"],
        "deliveries": by_f[("deliver", "ok")],
        "redeliveries": sum(1 for e in events if e.f == "deliver" and (e.fields.get("count") or 1) > 1),
        "acks_confirmed": by_f[("ack", "ok")], "acks_failed": by_f[("ack", "fail")],
        "acks_indeterminate": by_f[("ack", "info")],
        "faults": dict(Counter(f.kind for f in facts.history.faults
                               if f.phase != "end" and f.kind not in BRACKET_KINDS)),
        "stored_final": len(facts.majority),
    }


def fault_windows(facts: Facts) -> list[dict[str, Any]]:
    open_: dict[tuple[str, tuple[str, ...]], list[Any]] = {}
    windows = []
    for f in sorted(facts.history.faults, key=lambda f: f.t):
        if f.kind in BRACKET_KINDS:
            continue
        key = (f.kind, f.nodes)
        if f.phase == "instant":
            windows.append({"kind": f.kind, "nodes": list(f.nodes), "start": f.t, "end": f.t, "instant": True})
        elif f.phase == "start":
            open_.setdefault(key, []).append(f.t)
        elif open_.get(key):
            windows.append({"kind": f.kind, "nodes": list(f.nodes), "start": open_[key].pop(0), "end": f.t,
                            "instant": False})
    for (kind, nodes), starts in open_.items():
        windows += [{"kind": kind, "nodes": list(nodes), "start": t, "end": math.inf, "instant": False}
                    for t in starts]
    return sorted(windows, key=lambda w: w["start"])


def availability(facts: Facts) -> dict[str, Any]:
    times = [e.t for e in facts.history.events if e.f == "publish" and e.process != "probe"
             and e.fields.get("stream", facts.stream) == facts.stream]
    oks = sorted(e.t for e in facts.history.events if e.f == "publish" and e.type == "ok"
                 and e.process != "probe" and e.fields.get("stream", facts.stream) == facts.stream)
    if not times:
        return {"gaps": [], "longest_gap_s": 0.0, "duration_s": 0.0}
    points = [min(times), *oks, max(times)]
    gaps = sorted(((b - a, a, b) for a, b in zip(points, points[1:])), reverse=True)[:GAPS_MAX]
    windows = fault_windows(facts)
    out = []
    for length, start, end in gaps:
        active = [{k: w[k] for k in ("kind", "nodes")} for w in windows
                  if w["start"] <= end and w["end"] >= start]
        out.append({"start": start, "end": end, "length_s": round(length, 3), "faults": active})
    return {"gaps": out, "longest_gap_s": out[0]["length_s"] if out else 0.0,
            "duration_s": round(max(times) - min(times), 3), "ok_publishes": len(oks)}


def repair_times(facts: Facts) -> list[dict[str, Any]]:
    out = [{"kind": w["kind"], "nodes": w["nodes"], "repair_s": round(w["end"] - w["start"], 3)}
           for w in fault_windows(facts)
           if "repair" in w["kind"] and w["end"] != math.inf and not w["instant"]]
    for f in facts.history.faults:
        measured = f.detail.get("repair_s")
        if measured is None and f.phase == "instant" and "repair" in f.kind:
            measured = f.detail.get("seconds")
        if isinstance(measured, (int, float)) and not isinstance(measured, bool):
            out.append({"kind": f.kind, "nodes": list(f.nodes), "repair_s": measured})
    return out
