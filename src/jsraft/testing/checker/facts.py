"""Indexes the checker derives once from a `History` (test code, issue #7): publishes by value, replica
contents, the majority content, purge floors, and which nodes are judged.

Owns: `Facts`, the read-only view every invariant module (`writes`, `replicas`, `order`, `consumers`,
`cluster`) works from, and `verdict()`, the one shape of a per-invariant result.

Invariants:
  1. A publish's status is derived from all its attempts: "acked" if any attempt completed ok; "failed"
     only if every attempt completed fail (definitely not stored); otherwise "indeterminate" (an info, or
     an invoke with no completion because the harness stopped).
  2. Only the main stream (final/nodes.json "stream") is judged for I1-I7; events without a "stream"
     field are taken to be on it.
  3. A node is *excused* (left out of I1, I2, I5 and of the majority) only when it is in
     nodes.json "corrupted", its final state says it is repairing, and it is not a leader; I10 judges it.
  4. The *final content* at a seq is the (value, hash) held there by a strict majority of all nodes.

Imports: stdlib, attrs, jsraft.testing.chaos.history.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping

import attrs

from jsraft.testing.chaos.history import Event, History

SAMPLES_MAX = 10
Entry = tuple  # (value, hash) stored at one seq


def verdict(violations: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """One invariant's result: valid iff no violations; extra fields kept.

    At most SAMPLES_MAX samples, taken round-robin over the violations' "kind"s (each kind in the order
    given), so a report shows every kind of violation even when one kind is numerous.
    """
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for v in violations:
        bucket = by_kind.setdefault(v.get("kind", ""), [])
        if len(bucket) < SAMPLES_MAX:
            bucket.append(v)
    samples: list[dict[str, Any]] = []
    for i in range(SAMPLES_MAX):
        samples += [bucket[i] for bucket in by_kind.values() if i < len(bucket)]
    return {"valid": not violations, "count": len(violations), "samples": samples[:SAMPLES_MAX], **extra}


def ranges(seqs: Iterable[int]) -> list[list[int]]:
    """[1,2,3,7,9,10] -> [[1,3],[7,7],[9,10]]."""
    out: list[list[int]] = []
    for seq in sorted(seqs):
        if out and seq == out[-1][1] + 1:
            out[-1][1] = seq
        else:
            out.append([seq, seq])
    return out


@attrs.define(slots=True)
class Publish:
    """Every attempt at one value, merged (status per invariant 1)."""

    value: str
    process: str
    invoke_t: float  # earliest invoke: the earliest moment the value could have been stored
    hashes: set[str] = attrs.Factory(set)
    invokes: int = 0
    fails: int = 0
    infos: int = 0
    oks: list[tuple[int, float]] = attrs.Factory(list)  # (seq, completion time)

    @property
    def status(self) -> str:
        if self.oks:
            return "acked"
        return "failed" if self.invokes and self.fails >= self.invokes else "indeterminate"

    @property
    def seq(self) -> int:
        return self.oks[0][0]

    @property
    def ok_t(self) -> float:
        return self.oks[0][1]


def _on_stream(event: Event, stream: str) -> bool:
    got = event.fields.get("stream")
    return got is None or got == stream


def _publishes(events: Iterable[Event], stream: str) -> dict[str, Publish]:
    pubs: dict[str, Publish] = {}
    for e in events:
        if e.f != "publish" or not _on_stream(e, stream):
            continue
        value = e.fields["value"]
        pub = pubs.get(value)
        if pub is None:
            pub = pubs[value] = Publish(value, e.process, e.t)
        if e.type == "invoke":
            pub.invokes += 1
            pub.invoke_t = min(pub.invoke_t, e.t)
            pub.hashes.add(e.fields["hash"])
        elif e.type == "ok":
            pub.oks.append((e.fields["seq"], e.t))
        elif e.type == "fail":
            pub.fails += 1
        else:
            pub.infos += 1
    return pubs


def _repairing(state: Mapping[str, Any], stream: str) -> bool:
    replica = (state.get("replicas") or {}).get(stream) or {}
    raft = (state.get("raft") or {}).get(stream) or {}
    return bool(replica.get("repairing") or raft.get("repairing"))


def is_leader(node: str, state: Mapping[str, Any], stream: str, probe: Mapping[str, Any] | None) -> bool:
    """A node leads the stream if its own replica state says so or the final probe named it."""
    replica = (state.get("replicas") or {}).get(stream) or {}
    named = ((probe or {}).get("stream_leaders") or {}).get(stream)
    return replica.get("role") == "leader" or named == node


@attrs.define(slots=True)
class Facts:
    history: History
    stream: str
    pubs: dict[str, Publish]
    purge_floor: int  # every seq below it was removed by the test itself
    contents: dict[str, dict[int, Entry]]  # judged node -> seq -> (value, hash)
    duplicates: dict[str, dict[str, list[int]]]  # judged node -> value -> its seqs (only if > 1)
    unreadable: dict[str, str]  # node -> error, for nodes not excused
    excused: list[str]
    majority: dict[int, Entry]

    @property
    def final(self):  # noqa: ANN201 - the history's Final
        return self.history.final

    def replica_state(self, node: str) -> Mapping[str, Any]:
        return (self.final.states[node].get("replicas") or {}).get(self.stream) or {}


def _content(messages: Iterable[Any]) -> tuple[dict[int, Entry], dict[str, list[int]]]:
    content: dict[int, Entry] = {}
    where: dict[str, list[int]] = {}
    for m in messages:
        content[m.seq] = (m.value, m.hash)
        if m.value is not None:
            where.setdefault(m.value, []).append(m.seq)
    return content, {v: s for v, s in where.items() if len(s) > 1}


def _majority(contents: Mapping[str, Mapping[int, Entry]], node_count: int) -> dict[int, Entry]:
    votes: Counter[tuple[int, Entry]] = Counter()
    for content in contents.values():
        votes.update(content.items())
    return {seq: entry for (seq, entry), n in votes.items() if 2 * n > node_count}


def derive(history: History) -> Facts:
    final = history.final
    stream = final.stream
    excused = [n for n in final.corrupted if n in final.states
               and _repairing(final.states[n], stream)
               and not is_leader(n, final.states[n], stream, final.probe)]
    contents, duplicates, unreadable = {}, {}, {}
    for node in final.nodes:
        replica = final.replicas[node]
        if node in excused:
            continue
        if replica.error is not None:
            unreadable[node] = replica.error
            continue
        contents[node], duplicates[node] = _content(replica.messages)
    purges = [e.fields["seq"] for e in history.events if e.f == "purge" and e.fields["stream"] == stream]
    return Facts(history=history, stream=stream, pubs=_publishes(history.events, stream),
                 purge_floor=max(purges, default=0), contents=contents, duplicates=duplicates,
                 unreadable=unreadable, excused=excused,
                 majority=_majority(contents, len(final.nodes)))
