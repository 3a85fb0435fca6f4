"""Cluster-wide invariants (test code, issue #7, ../shared/CHAOS.md): I8 meta agreement and no
destruction, I9 liveness after heal.

Owns: `check_i8`, `check_i9`, each `Facts -> verdict dict`; `HEAL_TO_READY_MAX_S`.

Invariants (of this module's judgement):
  1. I8: every node's final state has a meta state, and all report the same meta digest and the same set
     of stream names. The expected set is derived from the history: walking the stream_create /
     stream_delete completions in time order, ok makes a name required (create) or forbidden (delete),
     info makes it optional (either outcome is allowed), fail changes nothing, and an invoke that never
     completed (the harness stopped) makes it optional too; then the main stream and
     nodes.json meta_expected.streams are required and scratch_deleted forbidden unless required. A
     required stream missing from a node's meta is a "stream vanished without a committed delete"; a
     forbidden one present is a delete undone; a name nothing explains is a phantom stream. Every node
     must also hold a replica state of the main stream unless excused (facts invariant 3).
  2. I9: probe.json exists and says ready, names a meta leader and a leader for every stream it lists and
     for the main stream, probe_acked == probe_sent > 0, every listed consumer's drain completed, and
     heal_to_ready_s <= the limit (HEAL_TO_READY_MAX_S unless the caller gives another).

Imports: stdlib, jsraft.testing.checker.facts.
"""

from __future__ import annotations

from typing import Any

from jsraft.testing.checker.facts import Facts, verdict

HEAL_TO_READY_MAX_S = 30.0


def _expected_streams(facts: Facts) -> tuple[set[str], set[str], set[str]]:
    """(required, forbidden, optional) stream names."""
    status: dict[str, str] = {}
    open_ops: dict[str, int] = {}  # name -> invokes not yet completed
    ops = [e for e in facts.history.events if e.f in ("stream_create", "stream_delete")]
    for e in sorted(ops, key=lambda e: e.t):
        name = e.fields["name"]
        open_ops[name] = open_ops.get(name, 0) + (1 if e.type == "invoke" else -1)
        if e.type == "ok":
            status[name] = "required" if e.f == "stream_create" else "forbidden"
        elif e.type == "info":
            status[name] = "optional"
    for name, n in open_ops.items():
        if n > 0:
            status[name] = "optional"  # an operation the history never saw complete
    for name in facts.final.scratch_deleted:
        status.setdefault(name, "forbidden")
    for name in (*facts.final.meta_expected_streams, facts.stream):
        status[name] = "required"
    pick = lambda want: {n for n, s in status.items() if s == want}  # noqa: E731
    return pick("required"), pick("forbidden"), pick("optional")


def _meta_agreement(metas: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    digests = {n: m.get("digest") for n, m in metas.items()}
    if len(set(map(repr, digests.values()))) > 1:
        out.append({"kind": "meta_digest_differs", "digests": digests})
    names = {n: sorted(m.get("streams") or {}) for n, m in metas.items()}
    if len(set(map(tuple, names.values()))) > 1:
        out.append({"kind": "meta_streams_differ", "streams": names})
    return out


def check_i8(facts: Facts) -> dict[str, Any]:
    bad: list[dict[str, Any]] = []
    metas = {}
    for node in facts.final.nodes:
        meta = facts.final.states[node].get("meta")
        if not isinstance(meta, dict):
            bad.append({"kind": "meta_missing", "node": node})
        else:
            metas[node] = meta
    bad += _meta_agreement(metas)
    required, forbidden, optional = _expected_streams(facts)
    for node, meta in sorted(metas.items()):
        have = set(meta.get("streams") or {})
        bad += [{"kind": "stream_vanished", "node": node, "stream": s} for s in sorted(required - have)]
        bad += [{"kind": "delete_undone", "node": node, "stream": s} for s in sorted(have & forbidden)]
        bad += [{"kind": "phantom_stream", "node": node, "stream": s}
                for s in sorted(have - required - forbidden - optional)]
    for node in facts.final.nodes:
        if node not in facts.excused and not facts.replica_state(node):
            bad.append({"kind": "stream_data_missing", "node": node, "stream": facts.stream})
    return verdict(bad, required_streams=sorted(required), forbidden_streams=sorted(forbidden))


def check_i9(facts: Facts, heal_to_ready_max_s: float = HEAL_TO_READY_MAX_S) -> dict[str, Any]:
    probe = facts.final.probe
    if probe is None:
        return verdict([{"kind": "probe_missing"}])
    bad: list[dict[str, Any]] = []
    if probe.get("ready") is not True:
        bad.append({"kind": "not_ready"})
    if not probe.get("meta_leader"):
        bad.append({"kind": "no_meta_leader"})
    leaders = dict(probe.get("stream_leaders") or {})
    leaders.setdefault(facts.stream, None)
    bad += [{"kind": "no_stream_leader", "stream": s} for s, n in sorted(leaders.items()) if not n]
    sent, acked = probe.get("probe_sent"), probe.get("probe_acked")
    if not isinstance(sent, int) or sent <= 0 or acked != sent:
        bad.append({"kind": "probe_not_acked", "probe_sent": sent, "probe_acked": acked})
    drained = probe.get("drained") or {}
    bad += [{"kind": "drain_incomplete", "consumer": c} for c in facts.final.consumers
            if drained.get(c) is not True]
    heal = probe.get("heal_to_ready_s")
    if not isinstance(heal, (int, float)) or heal > heal_to_ready_max_s:
        bad.append({"kind": "slow_heal", "heal_to_ready_s": heal, "limit_s": heal_to_ready_max_s})
    return verdict(bad, heal_to_ready_s=heal, limit_s=heal_to_ready_max_s)
