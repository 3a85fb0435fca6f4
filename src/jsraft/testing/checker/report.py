"""Runs every invariant over one history and assembles the report (test code, issue #7).

Owns: `check(directory)`, `check_history(history)`, `summary(report)`, `INVARIANTS`.

Invariants:
  1. The report is {"valid", "invariants": {"I1".."I10": verdict}, "counts", "availability",
     "repair_times", "checker": {...}}; "valid" is true iff every invariant's verdict is valid.
  2. Every value in the report is plain JSON (no NaN or Infinity), so other tools can read report.json.

Imports: stdlib, jsraft.testing.chaos.history, jsraft.testing.checker.*.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Callable

from jsraft.testing.chaos.history import History, read_history
from jsraft.testing.checker import cluster, consumers, order, replicas, stats, writes
from jsraft.testing.checker.facts import Facts, derive

INVARIANTS: dict[str, tuple[str, Callable[..., dict[str, Any]]]] = {
    "I1": ("no lost acked write", writes.check_i1),
    "I2": ("replicas agree", replicas.check_i2),
    "I3": ("sequence is a function", writes.check_i3),
    "I4": ("no phantoms", writes.check_i4),
    "I5": ("contiguity and order", order.check_i5),
    "I6": ("stable reads", replicas.check_i6),
    "I7": ("consumer at-least-once", consumers.check_i7),
    "I8": ("meta agreement, no destruction", cluster.check_i8),
    "I9": ("liveness after heal", cluster.check_i9),
    "I10": ("honest repair", replicas.check_i10),
}


def _run(facts: Facts, heal_to_ready_max_s: float) -> dict[str, dict[str, Any]]:
    out = {}
    for name, (title, check_fn) in INVARIANTS.items():
        result = (check_fn(facts, heal_to_ready_max_s) if name == "I9" else check_fn(facts))
        out[name] = {"title": title, **result}
    return out


def jsonable(obj: Any) -> Any:
    """Invariant 2: tuples become lists, non-finite floats (from NaN/Infinity in an input file) strings."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    return obj


def check_history(history: History, *,
                  heal_to_ready_max_s: float = cluster.HEAL_TO_READY_MAX_S) -> dict[str, Any]:
    started = time.monotonic()
    facts = derive(history)
    verdicts = _run(facts, heal_to_ready_max_s)
    return jsonable({
        "valid": all(v["valid"] for v in verdicts.values()),
        "violated": [name for name, v in verdicts.items() if not v["valid"]],
        "invariants": verdicts,
        "counts": stats.counts(facts),
        "availability": stats.availability(facts),
        "repair_times": stats.repair_times(facts),
        "checker": {"stream": facts.stream, "excused_nodes": facts.excused,
                    "purge_floor": facts.purge_floor, "check_s": round(time.monotonic() - started, 3)},
    })


def check(directory: str | os.PathLike[str], *,
          heal_to_ready_max_s: float = cluster.HEAL_TO_READY_MAX_S) -> dict[str, Any]:
    """Read and judge a history directory; raises HistoryFormatError when it cannot be judged."""
    return check_history(read_history(directory), heal_to_ready_max_s=heal_to_ready_max_s)


def summary(report: dict[str, Any]) -> str:
    """A few lines for humans: the verdict, the counts, one line per invariant, the longest gaps."""
    c = report["counts"]
    lines = [f"verdict: {'VALID' if report['valid'] else 'INVALID'}"
             + (f" (violated: {', '.join(report['violated'])})" if report["violated"] else ""),
             f"publishes: {c['acked']} acked, {c['failed']} failed, {c['indeterminate']} indeterminate "
             f"({c['publish_attempts']} attempts); deliveries {c['deliveries']}, "
             f"acks confirmed {c['acks_confirmed']}; faults {c['faults'] or 'none'}"]
    for name, v in report["invariants"].items():
        mark = "ok  " if v["valid"] else "FAIL"
        lines.append(f"  {mark} {name:<3} {v['title']}: {v['count']} violation(s)")
        for sample in v["samples"][:3]:
            lines.append(f"         e.g. {sample}")
    i1 = report["invariants"]["I1"]
    lines.append(f"lost acked writes: {i1['lost']} (middle {i1['lost_middle']}); "
                 f"divergent seqs: {report['invariants']['I2']['divergent_seqs']}")
    for gap in report["availability"]["gaps"][:3]:
        kinds = sorted({f["kind"] for f in gap["faults"]}) or ["no fault"]
        lines.append(f"  gap {gap['length_s']:.3f}s at t={gap['start']:.3f} during {', '.join(kinds)}")
    if report["repair_times"]:
        lines.append(f"repair times (s): {[r['repair_s'] for r in report['repair_times']]}")
    return "\n".join(lines)
