"""Tests for the chaos checker (`jsraft.testing.checker`) and the history format (`chaos.history`).

Method: a small builder (`Hist`) makes a synthetic, internally consistent history directory — publishes
from a few clients (acked, one failed, one indeterminate that was stored, one that was not), liveness
probes, one durable consumer that delivered and acked everything, scratch streams created and deleted,
three replicas with identical content and states derived from that content, a healthy probe.json. The
clean history must pass (valid, exit 0). Each violation test applies exactly one fault to it and checks
that the checker flags exactly the invariants that fault implies — usually one; where a fault necessarily
breaks two (a seq lost on one replica is both a loss and a disagreement), the test says why. A Hypothesis
test checks that random clean histories pass and that a random single mutation is caught. The CLI runs
once as a subprocess; the readers are checked to reject malformed lines naming file and line.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jsraft.testing.chaos import history
from jsraft.testing.checker import check
from jsraft.testing.checker.__main__ import main as checker_main

NODES = ("n1", "n2", "n3")
STREAM = "CHAOS"
CONSUMER = "d1"


def h16(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Hist:
    """A synthetic history under construction; `write(dir)` derives what the test did not override."""

    def __init__(self, clients: int = 3, per_client: int = 5, probes: int = 3) -> None:
        self.events: list[dict[str, Any]] = []
        self.faults: list[dict[str, Any]] = []
        self.acked: dict[str, int] = {}  # value -> seq
        self.hashes: dict[str, str] = {}
        self.seq = 0
        self.t = 0.0
        self._stream_ops()
        for k in range(clients * per_client):
            if k == 3:
                self.t += 8.0  # an availability gap, during the kill below
            self.publish(f"p{k % clients}", f"c{k % clients}-{k // clients}")
            if k == 2:
                self.publish("p0", "fail-1", outcome="fail")
            if k == 4:
                self.publish("p1", "info-stored", outcome="info", stored=True)
                self.publish("p2", "info-lost", outcome="info", stored=False)
        for k in range(probes):
            self.publish("probe", f"probe-{k}")
        self.stored = {n: dict(self.content) for n in NODES}
        self.deliveries: list[dict[str, Any]] | None = None
        self.acks: list[dict[str, Any]] = []
        self.meta_streams = {n: [STREAM, "S2"] for n in NODES}
        self.meta_expected = [STREAM, "S2"]  # what the harness says must exist (nodes.json)
        self.meta_digest: dict[str, str] = {}
        self.replica_patch: dict[str, dict[str, Any]] = {n: {} for n in NODES}
        self.consumer_patch: dict[str, dict[str, Any]] = {n: {} for n in NODES}
        self.repairing: set[str] = set()
        self.leader = "n1"
        self.corrupted: list[str] = []
        self.probe = {"meta_leader": "n1", "stream_leaders": {STREAM: "n1"}, "probe_sent": probes,
                      "probe_acked": probes, "drained": {CONSUMER: True}, "heal_to_ready_s": 2.5,
                      "ready": True}
        self.faults += [{"t": 6.0, "kind": "kill", "phase": "start", "nodes": ["n2"], "detail": {}},
                        {"t": 9.0, "kind": "kill", "phase": "end", "nodes": ["n2"], "detail": {}},
                        {"t": 3.5, "kind": "repair", "phase": "start", "nodes": ["n2"], "detail": {}},
                        {"t": 4.0, "kind": "repair", "phase": "end", "nodes": ["n2"], "detail": {}}]

    # --- history ---

    def ev(self, t: float, type_: str, f: str, process: str, **fields: Any) -> dict[str, Any]:
        event = {"t": t, "type": type_, "f": f, "process": process, "node": "n1", **fields}
        self.events.append(event)
        return event

    def _stream_ops(self) -> None:
        for f, name, t in (("stream_create", STREAM, -3.0), ("stream_create", "S1", -2.5),
                           ("stream_delete", "S1", -2.0), ("stream_create", "S2", -1.5)):
            self.ev(t, "invoke", f, "m0", name=name)
            self.ev(t + 0.1, "ok", f, "m0", name=name)
        self.ev(-1.0, "invoke", "consumer_create", "m0", name=CONSUMER, stream=STREAM)
        self.ev(-0.9, "ok", "consumer_create", "m0", name=CONSUMER, stream=STREAM)

    @property
    def content(self) -> dict[int, tuple[str, str]]:
        return getattr(self, "_content", {})

    def publish(self, process: str, value: str, outcome: str = "ok", stored: bool = True) -> None:
        """A sequential publish: invoked after the previous one completed."""
        self.t += 1.0
        hash_ = self.hashes[value] = h16(value)
        self.ev(self.t, "invoke", "publish", process, stream=STREAM, value=value, hash=hash_, size=40,
                subject=f"chaos.{process}")
        if outcome == "fail":
            self.ev(self.t + 0.5, "fail", "publish", process, stream=STREAM, value=value, code="10008")
            return
        if stored:
            self.seq += 1
            self._content = {**self.content, self.seq: (value, hash_)}
        if outcome == "info":
            self.ev(self.t + 0.5, "info", "publish", process, stream=STREAM, value=value, error="timeout")
        else:
            self.acked[value] = self.seq
            self.ev(self.t + 0.5, "ok", "publish", process, stream=STREAM, value=value, seq=self.seq)

    def ok_event(self, value: str) -> dict[str, Any]:
        return next(e for e in self.events
                    if e["f"] == "publish" and e["type"] == "ok" and e["value"] == value)

    def swap_seqs(self, a: str, b: str) -> None:
        """Swap the seqs of two acked values, in the history and in every replica (stays consistent)."""
        sa, sb = self.acked[a], self.acked[b]
        self.ok_event(a)["seq"], self.ok_event(b)["seq"] = sb, sa
        for content in self.stored.values():
            content[sa], content[sb] = content[sb], content[sa]

    # --- derived parts ---

    def majority(self) -> dict[int, tuple[str, str]]:
        votes: dict[tuple[int, tuple[str, str]], int] = {}
        for content in self.stored.values():
            for item in content.items():
                votes[item] = votes.get(item, 0) + 1
        return {seq: entry for (seq, entry), n in votes.items() if 2 * n > len(NODES)}

    def build_consumer(self) -> None:
        """Deliver and ack every message of the final content once, after all publishes."""
        self.deliveries, t = [], self.t + 10.0
        for cseq, (seq, (value, hash_)) in enumerate(sorted(self.majority().items()), 1):
            self.deliveries.append({"t": t, "type": "ok", "f": "deliver", "process": "c0", "node": "n1",
                                    "stream": STREAM, "consumer": CONSUMER, "seq": seq, "cseq": cseq,
                                    "count": 1, "value": value, "hash": hash_})
            if cseq == 1:  # a redelivery before the ack was confirmed: allowed
                self.deliveries.append({**self.deliveries[-1], "t": t + 0.05, "count": 2})
            self.acks += [{"t": t + 0.1, "type": "invoke", "f": "ack", "process": "c0", "node": "n1",
                           "stream": STREAM, "consumer": CONSUMER, "seq": seq},
                          {"t": t + 0.2, "type": "ok", "f": "ack", "process": "c0", "node": "n1",
                           "stream": STREAM, "consumer": CONSUMER, "seq": seq}]
            t += 1.0

    def replica_state(self, node: str) -> dict[str, Any]:
        content = self.stored[node]
        seqs = sorted(content)
        digest = hashlib.sha256(json.dumps(sorted(content.items())).encode()).hexdigest()[:16]
        state = {"first_seq": seqs[0] if seqs else 0, "last_seq": seqs[-1] if seqs else 0,
                 "msgs": len(seqs), "bytes": 40 * len(seqs), "digest": digest, "applied_index": 99,
                 "term": 2, "role": "leader" if node == self.leader else "follower",
                 "repairing": node in self.repairing, "leader": self.leader}
        return {**state, **self.replica_patch[node]}

    def consumer_state(self, node: str) -> dict[str, Any]:
        delivered = [d for d in self.deliveries or () if d["count"] == 1]
        top = (delivered[-1]["cseq"], delivered[-1]["seq"]) if delivered else (0, 0)
        floor = {"consumer_seq": top[0], "stream_seq": top[1]}
        state = {"delivered": floor, "ack_floor": floor, "pending": [], "redelivered": 0, "num_pending": 0,
                 "leader": self.leader}
        return {**state, **self.consumer_patch[node]}

    def meta_state(self, node: str) -> dict[str, Any]:
        names = self.meta_streams[node]
        digest = self.meta_digest.get(node) or h16(",".join(sorted(names)))
        return {"streams": {n: {} for n in names}, "consumers": {STREAM: [CONSUMER]}, "digest": digest,
                "leader": "n1", "applied": 50}

    def write(self, directory: Path) -> Path:
        if self.deliveries is None:
            self.build_consumer()
        directory.mkdir(parents=True, exist_ok=True)
        events = sorted(self.events + (self.deliveries or []) + self.acks, key=lambda e: e["t"])
        (directory / history.HISTORY_FILE).write_text("".join(json.dumps(e) + "\n" for e in events))
        (directory / history.FAULTS_FILE).write_text("".join(json.dumps(f) + "\n" for f in self.faults))
        history.write_final_nodes(directory, nodes=list(NODES), stream=STREAM, consumers=[CONSUMER],
                                  corrupted=self.corrupted, scratch_deleted=["S1"],
                                  meta_expected_streams=self.meta_expected)
        for node in NODES:
            history.write_final_replica(directory, node, STREAM, [
                {"seq": s, "value": v, "hash": h, "subject": "chaos.x"}
                for s, (v, h) in sorted(self.stored[node].items())])
            history.write_final_state(directory, node, {
                "replicas": {STREAM: self.replica_state(node)},
                "raft": {STREAM: {"term": 2, "leader": self.leader, "repairing": node in self.repairing}},
                "meta": self.meta_state(node), "consumers": {STREAM: {CONSUMER: self.consumer_state(node)}},
                "errors": []})
        history.write_final_probe(directory, self.probe)
        return directory


def violated(report: dict[str, Any]) -> set[str]:
    return {name for name, v in report["invariants"].items() if not v["valid"]}


def judge(h: Hist, tmp_path: Path) -> dict[str, Any]:
    return check(h.write(tmp_path / "h"))


# --- Clean histories -------------------------------------------------------------------------------


def test_clean_history_is_valid(tmp_path: Path) -> None:
    report = judge(Hist(), tmp_path)
    assert violated(report) == set(), json.dumps(report["invariants"], indent=1)
    assert report["valid"] is True
    counts = report["counts"]
    assert (counts["acked"], counts["failed"], counts["indeterminate"]) == (18, 1, 2)
    assert counts["deliveries"] == 18 + 1 + 1  # every stored message, plus one early redelivery
    assert report["repair_times"] == [{"kind": "repair", "nodes": ["n2"], "repair_s": 0.5}]
    gap = report["availability"]["gaps"][0]
    assert gap["length_s"] == 10.0 and {"kind": "kill", "nodes": ["n2"]} in gap["faults"]


def test_an_instant_repair_event_reports_its_measured_seconds_not_a_zero_window(tmp_path: Path) -> None:
    # The chaos runner logs a corrupted node's repair as one instant event whose detail carries the time
    # from its restart to whole (`testing/chaos/faults.py`, `_observe_repair`); its zero-length window
    # used to be read as a repair of 0.0 s.
    h = Hist()
    h.faults.append({"t": 7.0, "kind": "repair", "phase": "instant", "nodes": ["n3"],
                     "detail": {"whole": True, "seconds": 2.25}})
    assert judge(h, tmp_path)["repair_times"] == [
        {"kind": "repair", "nodes": ["n2"], "repair_s": 0.5}, {"kind": "repair", "nodes": ["n3"], "repair_s": 2.25}]


def test_corrupted_node_that_is_still_repairing_and_not_leading_is_excused(tmp_path: Path) -> None:
    h = Hist()
    h.corrupted, h.repairing = ["n3"], {"n3"}
    h.stored["n3"] = {s: e for s, e in h.stored["n3"].items() if s < 5}
    report = judge(h, tmp_path)
    assert violated(report) == set()
    assert report["invariants"]["I10"]["corrupted"] == {"n3": "repairing"}


def test_corrupted_node_that_repaired_itself_is_judged_and_passes(tmp_path: Path) -> None:
    h = Hist()
    h.corrupted = ["n2"]
    report = judge(h, tmp_path)
    assert violated(report) == set()
    assert report["invariants"]["I10"]["corrupted"] == {"n2": "repaired"}


def test_damaged_record_on_one_node_is_a_loss_and_a_disagreement_not_a_phantom(tmp_path: Path) -> None:
    h = Hist()
    h.stored["n2"][2] = (None, None)  # final.py writes a seq the node could not read back this way
    assert violated(judge(h, tmp_path)) == {"I1", "I2"}


# --- One violation at a time -----------------------------------------------------------------------


def drop(h: Hist, seqs: list[int], nodes: tuple[str, ...] = NODES) -> None:
    for node in nodes:
        for seq in seqs:
            h.stored[node].pop(seq)


def lost_prefix(h: Hist) -> None:
    drop(h, [1])  # c0's first acked value, on every node; the stream now starts at 2: no hole


def lost_middle_overwritten(h: Hist) -> None:
    # c0's second acked value is replaced everywhere by a publish that never completed (no hole).
    seq = h.acked["c0-1"]
    for content in h.stored.values():
        content[seq] = ("info-lost", h.hashes["info-lost"])


def lost_postfix(h: Hist) -> None:
    last_workload = max(h.acked[v] for v in h.acked if not v.startswith("probe"))
    drop(h, list(range(last_workload, h.seq + 1)))


def tail_lost_on_one_replica(h: Hist) -> None:
    drop(h, [h.seq], nodes=("n3",))


def divergent_content(h: Hist) -> None:
    # n2 holds the other (never stored) indeterminate value where the others hold the stored one.
    seq = next(s for s, (v, _) in h.stored["n2"].items() if v == "info-stored")
    h.stored["n2"][seq] = ("info-lost", h.hashes["info-lost"])


def divergent_digest(h: Hist) -> None:
    h.replica_patch["n2"] = {"digest": "0" * 16}


def two_values_one_seq(h: Hist) -> None:
    # A concurrent publish (invoked first, completed last) acked with an existing seq, never stored.
    h.ev(-5.0, "invoke", "publish", "p9", stream=STREAM, value="c9-0", hash=h16("c9-0"), size=40)
    h.ev(h.t + 100.0, "ok", "publish", "p9", stream=STREAM, value="c9-0", seq=h.acked["c0-1"])


def duplicate_value(h: Hist) -> None:
    for content in h.stored.values():
        content[h.seq + 1] = ("c1-1", h.hashes["c1-1"])


def phantom(h: Hist) -> None:
    for content in h.stored.values():
        content[h.seq + 1] = ("zz-1", h16("zz-1"))


def failed_present(h: Hist) -> None:
    for content in h.stored.values():
        content[h.seq + 1] = ("fail-1", h.hashes["fail-1"])


def info_twice(h: Hist) -> None:
    for content in h.stored.values():
        content[h.seq + 1] = ("info-stored", h.hashes["info-stored"])


def gap(h: Hist) -> None:
    # The stored indeterminate publish vanishes everywhere: no acked value is lost, but a hole remains.
    drop(h, [next(s for s, (v, _) in h.stored["n1"].items() if v == "info-stored")])


def real_time_order(h: Hist) -> None:
    h.swap_seqs("c1-1", "c2-1")  # c1-1 completed before c2-1 was invoked, yet gets the higher seq


def client_order(h: Hist) -> None:
    h.swap_seqs("c1-1", "c1-2")


def unstable_read(h: Hist) -> None:
    h.build_consumer()
    h.deliveries[3]["hash"] = "f" * 16


def undelivered(h: Hist) -> None:
    h.build_consumer()
    h.deliveries = [d for d in h.deliveries if d["seq"] != 6]
    h.acks = [a for a in h.acks if a["seq"] != 6]


def redelivered_after_ack(h: Hist) -> None:
    h.build_consumer()
    # Seq 1's ack floor passed long before; a copy within REDELIVERY_GRACE_S (5 s) would be excused.
    h.deliveries.append({**h.deliveries[0], "t": h.deliveries[0]["t"] + 1.0 + 5.5, "count": 3})


def ack_undone(h: Hist) -> None:
    h.build_consumer()
    h.consumer_patch["n2"] = {"pending": [[4, 1]]}


def ack_floors_differ(h: Hist) -> None:
    h.build_consumer()
    h.consumer_patch["n3"] = {"ack_floor": {"consumer_seq": 3, "stream_seq": 3}}


def meta_disagreement(h: Hist) -> None:
    h.meta_digest["n2"] = "1" * 16


def stream_vanished(h: Hist) -> None:
    h.meta_streams = {n: [STREAM] for n in NODES}


def liveness_probe_not_acked(h: Hist) -> None:
    h.probe["probe_acked"] = 1
    h.probe["ready"] = False


def liveness_slow_heal(h: Hist) -> None:
    h.probe["heal_to_ready_s"] = 31.0


def corrupted_leader_bad_digest(h: Hist) -> None:
    h.corrupted, h.leader = ["n3"], "n3"
    h.probe["stream_leaders"] = {STREAM: "n3"}
    h.replica_patch["n3"] = {"digest": "b" * 16}


CASES: dict[str, tuple[Callable[[Hist], None], set[str]]] = {
    "lost_prefix": (lost_prefix, {"I1"}),
    "lost_middle_overwritten": (lost_middle_overwritten, {"I1"}),
    # Removing a middle value from the stream necessarily also leaves a hole in the seqs.
    "lost_middle_removed": (lambda h: drop(h, [h.acked["c0-2"]]), {"I1", "I5"}),
    "lost_postfix": (lost_postfix, {"I1"}),
    # A seq missing on one replica is a loss there and a disagreement between replicas.
    "lost_on_one_replica": (tail_lost_on_one_replica, {"I1", "I2"}),
    "divergent_content": (divergent_content, {"I2"}),
    "divergent_digest": (divergent_digest, {"I2"}),
    # Two acked values at one seq: at most one of them can be stored there, so the other is lost.
    "two_values_one_seq": (two_values_one_seq, {"I1", "I3"}),
    "duplicate_value": (duplicate_value, {"I3"}),
    "phantom": (phantom, {"I4"}),
    "failed_publish_present": (failed_present, {"I1"}),
    "info_publish_twice": (info_twice, {"I1"}),
    "gap_in_seqs": (gap, {"I5"}),
    "real_time_order": (real_time_order, {"I5"}),
    "client_order": (client_order, {"I5"}),
    "unstable_read": (unstable_read, {"I6"}),
    "undelivered_seq": (undelivered, {"I7"}),
    "redelivered_after_ack": (redelivered_after_ack, {"I7"}),
    "ack_undone": (ack_undone, {"I7"}),
    "ack_floors_differ": (ack_floors_differ, {"I7"}),
    "meta_disagreement": (meta_disagreement, {"I8"}),
    "stream_vanished_without_delete": (stream_vanished, {"I8"}),
    "liveness_probe_not_acked": (liveness_probe_not_acked, {"I9"}),
    "liveness_slow_heal": (liveness_slow_heal, {"I9"}),
    # The leader's digest differs from the others': the replicas disagree (I2) and it leads (I10).
    "corrupted_leader_bad_digest": (corrupted_leader_bad_digest, {"I2", "I10"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_violation_is_flagged_by_exactly_its_invariants(case: str, tmp_path: Path) -> None:
    mutate, expected = CASES[case]
    h = Hist()
    mutate(h)
    report = judge(h, tmp_path)
    assert violated(report) == expected, json.dumps(
        {k: v for k, v in report["invariants"].items() if not v["valid"]}, indent=1)
    assert report["valid"] is False
    assert all(report["invariants"][name]["samples"] for name in expected)


def test_loss_classes_and_counts(tmp_path: Path) -> None:
    # lost_postfix drops p2's last value and every probe after it: the probe keeps none, so its three
    # losses count as postfix too.
    for mutate, cls, lost in ((lost_prefix, "prefix", {"p0": 1}),
                              (lost_middle_overwritten, "middle", {"p0": 1}),
                              (lost_postfix, "postfix", {"p2": 1, "probe": 3})):
        h = Hist()
        mutate(h)
        i1 = judge(h, tmp_path / cls)["invariants"]["I1"]
        assert {c: n[cls] for c, n in i1["lost_by_client"].items()} == {c: 3 * k for c, k in lost.items()}, i1
        assert sum(sum(n.values()) for n in i1["lost_by_client"].values()) == 3 * sum(lost.values())
        assert i1["lost_on_replica"] == {n: sum(lost.values()) for n in NODES}
        assert {s["class"] for s in i1["samples"]} == {cls}
        assert i1["fatal"] is (cls == "middle")
    h = Hist()
    tail_lost_on_one_replica(h)
    i1 = judge(h, tmp_path / "one")["invariants"]["I1"]
    assert i1["lost_on_replica"] == {"n3": 1} and i1["lost"] == 1


def test_divergence_is_reported_as_ranges_with_samples(tmp_path: Path) -> None:
    h = Hist()
    for seq in (3, 4, 5, 9):
        value, _ = h.stored["n2"][seq]
        h.stored["n2"][seq] = (value, "d" * 16)
    i2 = judge(h, tmp_path)["invariants"]["I2"]
    assert i2["divergent_ranges"] == [[3, 5], [9, 9]] and i2["divergent_seqs"] == 4
    kinds = {s["kind"] for s in i2["samples"]}
    assert kinds == {"divergent", "state_differs"}  # n2's digest differs too
    sample = next(s for s in i2["samples"] if s["kind"] == "divergent")
    assert sample["entries"]["n2"][1] == "d" * 16 and sample["entries"]["n1"] != sample["entries"]["n2"]


def test_order_violations_are_told_apart(tmp_path: Path) -> None:
    h = Hist()
    real_time_order(h)
    i5 = judge(h, tmp_path / "rt")["invariants"]["I5"]
    assert (i5["real_time_violations"], i5["client_order_violations"], i5["gaps"]) == (1, 0, 0)
    h = Hist()
    client_order(h)
    i5 = judge(h, tmp_path / "co")["invariants"]["I5"]
    assert i5["client_order_violations"] == 1 and i5["gaps"] == 0


def test_a_late_copy_within_the_grace_is_not_a_redelivery_after_ack(tmp_path: Path) -> None:
    h = Hist()
    h.build_consumer()
    h.deliveries.append({**h.deliveries[0], "t": h.deliveries[0]["t"] + 3.0, "count": 2})
    assert violated(judge(h, tmp_path)) == set()


def test_stream_ops_with_unknown_outcome_allow_either_end_state(tmp_path: Path) -> None:
    h = Hist()
    h.ev(-0.5, "invoke", "stream_create", "m0", name="S3")  # never completed
    h.ev(-0.4, "invoke", "stream_delete", "m0", name="S2")
    h.ev(-0.3, "info", "stream_delete", "m0", name="S2", error="timeout")
    h.meta_streams = {n: [STREAM, "S3"] for n in NODES}
    h.meta_expected = [STREAM]  # the harness did not know whether S2 was deleted
    assert violated(judge(h, tmp_path / "a")) == set()
    h.meta_streams = {n: [STREAM, "S4"] for n in NODES}  # S4: nothing in the history explains it
    i8 = judge(h, tmp_path / "b")["invariants"]["I8"]
    assert {s["kind"] for s in i8["samples"]} == {"phantom_stream"}


def test_purged_seqs_may_be_absent(tmp_path: Path) -> None:
    h = Hist()
    drop(h, [1, 2, 3, 4, 5])
    h.ev(h.t + 1, "ok", "purge", "m0", stream=STREAM, seq=6)
    assert violated(judge(h, tmp_path)) == set()


# --- Random histories (Hypothesis) -----------------------------------------------------------------

def still_acked(h: Hist) -> list[int]:
    return sorted(seq for seq in h.acked.values() if seq in h.stored["n1"])


MUTATIONS: dict[str, tuple[Callable[[Hist, Any], None], str]] = {
    "drop_acked_on_one_node": (lambda h, r: drop(h, [r.choice(still_acked(h))], nodes=(r.choice(NODES),)),
                               "I1"),
    "rehash_one_entry": (lambda h, r: h.stored[r.choice(NODES)].update(
        {(s := r.choice(sorted(h.stored["n1"]))): (h.stored["n1"][s][0], "e" * 16)}), "I2"),
    "phantom": (lambda h, r: phantom(h), "I4"),
    "unstable_read": (lambda h, r: (h.build_consumer(), h.deliveries[r.randrange(len(h.deliveries))]
                                    .update(seq=10_000)), "I6"),
    "meta": (lambda h, r: meta_disagreement(h), "I8"),
    "not_ready": (lambda h, r: h.probe.update(ready=False), "I9"),
}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(clients=st.integers(3, 5), per_client=st.integers(2, 8), probes=st.integers(1, 3),
       purged=st.integers(0, 4), mutation=st.sampled_from([None, *sorted(MUTATIONS)]),
       rng=st.randoms(use_true_random=False))
def test_random_clean_histories_pass_and_single_mutations_are_caught(
        tmp_path_factory: Any, clients: int, per_client: int, probes: int, purged: int,
        mutation: str | None, rng: Any) -> None:
    h = Hist(clients=clients, per_client=per_client, probes=probes)
    if purged:  # the test itself purged the first `purged` messages
        drop(h, list(range(1, purged + 1)))
        h.ev(h.t + 1, "ok", "purge", "m0", stream=STREAM, seq=purged + 1)
    if mutation is not None:
        MUTATIONS[mutation][0](h, rng)
    report = check(h.write(tmp_path_factory.mktemp("hyp")))
    if mutation is None:
        assert report["valid"], violated(report)
    else:
        assert MUTATIONS[mutation][1] in violated(report)


# --- CLI, writer and readers -----------------------------------------------------------------------


def test_cli_subprocess_exit_codes_and_report(tmp_path: Path) -> None:
    good = Hist().write(tmp_path / "good")
    run = subprocess.run([sys.executable, "-m", "jsraft.testing.checker", str(good), "--json"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["valid"] is True
    assert json.loads((good / history.REPORT_FILE).read_text())["valid"] is True
    bad_hist = Hist()
    lost_middle_overwritten(bad_hist)
    bad = bad_hist.write(tmp_path / "bad")
    assert checker_main([str(bad)]) == 1
    assert json.loads((bad / history.REPORT_FILE).read_text())["violated"] == ["I1"]
    with (good / history.HISTORY_FILE).open("a") as handle:
        handle.write('{"t": 1, "type": "ok"\n')
    assert checker_main([str(good)]) == 2
    assert "history.jsonl:" in json.loads((good / history.REPORT_FILE).read_text())["unusable"]
    # A state the checker cannot read is "unusable" too, never a violation (exit 1) or a crash.
    odd = Hist().write(tmp_path / "odd")
    history.write_final_state(odd, "n2", {"replicas": "garbage"})
    assert checker_main([str(odd)]) == 2
    assert "checker error" in json.loads((odd / history.REPORT_FILE).read_text())["unusable"]


@pytest.mark.parametrize("line, why", [
    ("not json", "not JSON"),
    ('{"t": "x", "type": "ok", "f": "publish", "process": "p0"}', "'t' must be a number"),
    ('{"t": 1, "type": "done", "f": "publish", "process": "p0"}', "'type' must be one of"),
    ('{"t": 1, "type": "ok", "f": "publish", "process": "p0", "value": "a"}', "needs 'seq'"),
    ('{"t": 1, "type": "invoke", "f": "deliver", "process": "c0"}', "must have type 'ok'"),
])
def test_reader_rejects_malformed_lines_naming_file_and_line(tmp_path: Path, line: str, why: str) -> None:
    good = '{"t": 1, "type": "invoke", "f": "publish", "process": "p0", "value": "a", "hash": "h"}'
    (tmp_path / history.HISTORY_FILE).write_text(good + "\n" + line + "\n")
    with pytest.raises(history.HistoryFormatError, match=f"history.jsonl:2: .*{why}"):
        history.read_events(tmp_path)


def test_writer_is_thread_safe_and_reads_back(tmp_path: Path) -> None:
    writer = history.HistoryWriter(tmp_path)

    def client(n: int) -> None:
        for k in range(200):
            writer.invoke("publish", f"p{n}", "n1", stream=STREAM, value=f"c{n}-{k}", hash="h" * 16)
            writer.ok("publish", f"p{n}", "n1", stream=STREAM, value=f"c{n}-{k}", seq=k + 1)
    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    writer.fault("pause", "start", ["n2"], {"why": "test"})
    writer.close()
    events = history.read_events(tmp_path)
    assert len(events) == 1600 and {e.type for e in events} == {"invoke", "ok"}
    assert [e.line for e in events] == list(range(1, 1601))
    faults = history.read_faults(tmp_path)
    assert faults[0].kind == "pause" and faults[0].nodes == ("n2",) and faults[0].detail == {"why": "test"}
    with pytest.raises(ValueError):
        history.HistoryWriter(tmp_path).event("done", "publish", "p0", "n1")
