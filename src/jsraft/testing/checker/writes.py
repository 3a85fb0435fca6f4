"""Invariants about written values (test code, issue #7, ../shared/CHAOS.md): I1 no lost acked write,
I3 sequence is a function, I4 no phantoms.

Owns: `check_i1`, `check_i3`, `check_i4`, each `Facts -> verdict dict`.

Invariants (of this module's judgement):
  1. I1 (over the judged, readable nodes; an unreadable node is reported by I2): an acked publish
     (value, seq) is *present* on a node iff that node stores, at that seq, that
     value with one of the payload hashes its invokes recorded. Seqs below the test's purge floor are
     exempt. Losses are classified per (node, client) over the client's acked values ordered by seq:
     *prefix* (no present value of the client before it), *middle* (present values both before and
     after), *postfix* (present before, none after); a client with no present value at all on a node has
     all its losses counted as postfix. Any loss is a violation; lost-middle is also reported as fatal.
     A "failed" publish (every attempt failed) stored anywhere and an "indeterminate" one stored twice on
     one node are I1 violations too.
  2. I3: no two different values acked with one seq; no value acked at two different seqs; no acked value
     stored at more than one seq on a node (reported as duplicates).
  3. I4: every stored value was invoked by some publish (probe values included, since the probe records
     its publishes), with a recorded payload hash; a message without a value is a phantom. A wrong hash
     on an *acked* value at its seq is left to I1 (it is a loss there), so one fault is flagged once; so
     is a damaged record (value and hash both null, as final.py writes a seq the node could not read).

Imports: stdlib, jsraft.testing.checker.facts.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from jsraft.testing.checker.facts import Facts, verdict


def _acked_by_client(facts: Facts) -> dict[str, list[tuple[int, str, set[str]]]]:
    by_client: dict[str, list[tuple[int, str, set[str]]]] = defaultdict(list)
    for pub in facts.pubs.values():
        if pub.status == "acked" and pub.seq >= facts.purge_floor:
            by_client[pub.process].append((pub.seq, pub.value, pub.hashes))
    for items in by_client.values():
        items.sort()
    return by_client


def _classify(present: list[bool]) -> list[str | None]:
    """Per acked value of one client (by seq): None when present, else prefix/middle/postfix."""
    first = next((i for i, p in enumerate(present) if p), None)
    if first is None:
        return ["postfix"] * len(present)
    last = max(i for i, p in enumerate(present) if p)
    return [None if p else "prefix" if i < first else "postfix" if i > last else "middle"
            for i, p in enumerate(present)]


def _losses(facts: Facts) -> list[dict[str, Any]]:
    out = []
    for client, items in sorted(_acked_by_client(facts).items()):
        for node, content in sorted(facts.contents.items()):
            present = []
            for seq, value, hashes in items:
                entry = content.get(seq)
                # No recorded invoke (history cut at its start): the hash cannot be checked.
                present.append(entry is not None and entry[0] == value and (not hashes or entry[1] in hashes))
            for (seq, value, _), cls in zip(items, _classify(present)):
                if cls is not None:
                    out.append({"kind": "lost", "class": cls, "node": node, "client": client,
                                "value": value, "seq": seq, "found": content.get(seq)})
    return out


def check_i1(facts: Facts) -> dict[str, Any]:
    lost = _losses(facts)
    bad: list[dict[str, Any]] = []
    for node, content in sorted(facts.contents.items()):
        for seq, (value, _) in sorted(content.items()):
            pub = facts.pubs.get(value) if value is not None else None
            if pub is not None and pub.status == "failed":
                bad.append({"kind": "failed_present", "node": node, "value": value, "seq": seq})
        for value, seqs in sorted(facts.duplicates[node].items()):
            pub = facts.pubs.get(value)
            if pub is not None and pub.status == "indeterminate":
                bad.append({"kind": "indeterminate_duplicated", "node": node, "value": value, "seqs": seqs})
    by_client: dict[str, dict[str, int]] = defaultdict(lambda: {"prefix": 0, "middle": 0, "postfix": 0})
    on_replica: dict[str, int] = defaultdict(int)
    for loss in lost:
        by_client[loss["client"]][loss["class"]] += 1
        on_replica[loss["node"]] += 1
    middle = sum(c["middle"] for c in by_client.values())
    # Middle losses first in the samples: they are the fatal kind.
    ordered = sorted(lost, key=lambda x: x["class"] != "middle") + bad
    return verdict(ordered, lost=len(lost), lost_middle=middle, fatal=middle > 0,
                   lost_by_client=dict(by_client), lost_on_replica=dict(on_replica),
                   failed_present=sum(b["kind"] == "failed_present" for b in bad),
                   indeterminate_duplicated=sum(b["kind"] == "indeterminate_duplicated" for b in bad),
                   nodes_judged=sorted(facts.contents))


def check_i3(facts: Facts) -> dict[str, Any]:
    by_seq: dict[int, set[str]] = defaultdict(set)
    bad: list[dict[str, Any]] = []
    for pub in facts.pubs.values():
        seqs = sorted({seq for seq, _ in pub.oks})
        for seq in seqs:
            by_seq[seq].add(pub.value)
        if len(seqs) > 1:
            bad.append({"kind": "value_two_seqs", "value": pub.value, "seqs": seqs})
    bad += [{"kind": "seq_reused", "seq": seq, "values": sorted(values)}
            for seq, values in sorted(by_seq.items()) if len(values) > 1]
    duplicates = []
    for node, dups in sorted(facts.duplicates.items()):
        for value, seqs in sorted(dups.items()):
            pub = facts.pubs.get(value)
            if pub is not None and pub.status == "acked":
                duplicates.append({"kind": "duplicate", "node": node, "value": value, "seqs": seqs})
    return verdict(bad + duplicates, seq_reused=sum(b["kind"] == "seq_reused" for b in bad),
                   value_two_seqs=sum(b["kind"] == "value_two_seqs" for b in bad),
                   duplicates=len(duplicates))


def check_i4(facts: Facts) -> dict[str, Any]:
    bad: list[dict[str, Any]] = []
    for node, content in sorted(facts.contents.items()):
        for seq, (value, hash_) in sorted(content.items()):
            if value is None and hash_ is None:
                continue  # a damaged record (value and hash unreadable): I1/I2 report it, not I4
            pub = facts.pubs.get(value) if value is not None else None
            if pub is None:
                bad.append({"kind": "phantom", "node": node, "seq": seq, "value": value})
            elif pub.status != "acked" and pub.hashes and hash_ not in pub.hashes:
                bad.append({"kind": "phantom_content", "node": node, "seq": seq, "value": value,
                            "hash": hash_})
    return verdict(bad)
