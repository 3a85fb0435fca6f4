"""The runner's `repair_scope` check: a flipped bit must be repaired as its range, and only a ranged finding
at or below the flipped seq shows a store cut there.

Method: `repair_scope` reads the `repair` events a run wrote to its faults.jsonl. Here the events are
written as `Faults._observe_repair` writes them, with the advisories of real runs: S10 seed 2 on commit
e348805 (2026-11-28), where an audit landed between the background verifier finding the flipped seq 70
and the repair, so the drift advisory held an `audit_mismatch` with no range (first_seq 0) beside
`corrupt` 70..70 and `store_behind` 741..742, and the repair fetched 3 messages with no reset — the check
read the range-less finding as a cut at seq 0 and failed the run. The cut the check exists for (the
`truncate_at_corrupt` mutant: `store_behind` from the flipped seq on) must still be found, and so must
a repair that did not end whole or ended in a reset.
"""

from __future__ import annotations

import json
from pathlib import Path

from jsraft.testing.chaos.runner import repair_scope

FLIP = {"what": "flip_bits", "fault": "flip_bits", "seq": 70, "record_offset": 22476, "record_length": 3044}
AUDIT = {"kind": "audit_mismatch", "first_seq": 0, "last_seq": 0,
         "detail": "audit at index 820: the majority holds (1, 736, 736, 1597665, 1), this replica (1, 736, 735, "
                   "1597665, 2)"}


def _write(tmp_path: Path, *details: dict) -> str:
    lines = [{"t": float(i), "kind": "repair", "phase": "instant", "nodes": ["n1"], "detail": detail}
             for i, detail in enumerate(details)]
    (tmp_path / "faults.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(tmp_path)


def _repair(findings: list[dict], *, whole: bool = True, reset: bool = False, corruption: dict = FLIP) -> dict:
    return {"corruption": corruption, "whole": whole, "seconds": 1.7, "last_seq": 748,
            "advisories": [{"type": "io.jsraft.advisory.v1.stream_drift", "findings": findings},
                           {"type": "io.jsraft.advisory.v1.stream_drift_repaired", "fetched_msgs": 3,
                            "reset": reset, "findings": []}]}


def test_an_audit_mismatch_beside_a_ranged_repair_is_not_a_cut(tmp_path: Path) -> None:
    findings = [{"kind": "corrupt", "first_seq": 70, "last_seq": 70, "detail": ""}, AUDIT,
                {"kind": "store_behind", "first_seq": 741, "last_seq": 742, "detail": ""}]
    assert repair_scope(_write(tmp_path, _repair(findings))) == []


def test_a_store_cut_at_the_flipped_seq_is_still_found(tmp_path: Path) -> None:
    cut = {"kind": "store_behind", "first_seq": 70, "last_seq": 594, "detail": ""}
    found = repair_scope(_write(tmp_path, _repair([AUDIT, cut])))
    assert found == [{"node": "n1", "problem": "store cut at the flipped seq 70", "findings": [cut]}]


def test_a_repair_not_whole_or_by_reset_is_found(tmp_path: Path) -> None:
    rollback = {"what": "rollback_consumer_state", "fault": "rollback_chunks", "chunks": [[4096, 4096]]}
    found = repair_scope(_write(tmp_path, _repair([AUDIT], whole=False), _repair([], reset=True, corruption=rollback)))
    assert [f["problem"] for f in found] == ["not whole after restart", "repaired by a full reset"]
