"""The chaos workloads (W-pub, W-cons, W-meta) and the final phase against a real three-node cluster.

Method: the chaos harness's `ChaosCluster` — three `python -m jsraft serve` OS processes with test hooks
and the shadow disk, on free loopback ports — and the workloads run for a few seconds in one asyncio loop with nats-py clients pinned to single nodes, then the
final phase runs; the history directory it leaves is read back with the checker's strict readers
(`chaos.history.read_history`, which rejects any malformed line) and checked: every invoke has exactly one
completion, every ok publish carries a seq, every acked (value, seq, hash) is in every node's replica
file, each client only ever talked to its own node, the probes were acked and the consumers drained. In
the middle of the run one node is SIGKILLed and restarted (its clients must record only fail/info while it
is down, never ok, and must come back to it). The outcome classifier and the settle rule are also checked
on their own, without processes. Waits poll with deadlines; nothing sleeps and hopes.
"""

from __future__ import annotations

import asyncio
import collections
import json
import time

import nats.errors
import nats.js.errors
import pytest

from jsraft.testing.chaos import history
from jsraft.testing.chaos.clients import CONNECT_TRY_S, META_FAIL_CODES, classify, connect_pinned
from jsraft.testing.chaos.final import dump_torn, run_final_phase, settled_verdict, store_standing, wait_settled
from jsraft.testing.chaos.cluster import ChaosCluster
from jsraft.testing.chaos.workloads import Rates, Workload, create_stream

RUN_S = 8.0
START_DEADLINE_S = 30.0


# --- Without processes ----------------------------------------------------------------------------------

def api_error(code: int, err_code: int | None) -> nats.js.errors.APIError:
    kind = nats.js.errors.ServiceUnavailableError if code == 503 else nats.js.errors.APIError
    return kind(code=code, err_code=err_code, description="x")


@pytest.mark.parametrize("error, kind, detail", [
    (nats.errors.NoRespondersError(), "fail", {"code": "no_responders"}),
    (nats.js.errors.NoStreamResponseError(), "fail", {"code": "no_responders"}),
    (api_error(503, None), "fail", {"code": "no_responders"}),
    (api_error(503, 10008), "fail", {"code": "10008"}),       # NoLeader: the router gave up on refusals
    (api_error(500, 20101), "fail", {"code": "20101"}),       # NotLeader: never entered a log
    (api_error(503, 20602), "info", None),                    # RpcTimeout: may have been carried out
    (api_error(503, 20620), "info", None),                    # link went down before the reply
    (api_error(400, 10003), "info", None),                    # a malformed batch answer: unknown
    (api_error(503, 10077), "info", None),                    # store failed: unknown
    (nats.errors.TimeoutError(), "info", {"error": "timeout"}),
    (asyncio.TimeoutError(), "info", {"error": "timeout"}),
    (nats.errors.ConnectionClosedError(), "info", None),
    (ConnectionResetError(), "info", None),
    (RuntimeError("anything else"), "info", None),
])
def test_only_definite_refusals_classify_as_fail(error, kind, detail):
    got_kind, got = classify(error)
    assert got_kind == kind
    if detail is not None:
        assert got == detail
    assert ("code" in got) == (kind == "fail") and ("error" in got) == (kind == "info")


def test_a_meta_request_answered_no_leader_may_have_been_carried_out():
    # The meta service answers 10008 also for a stream it proposed but has not seen applied yet.
    assert classify(api_error(503, 10008), META_FAIL_CODES)[0] == "info"
    assert classify(api_error(404, 10059), META_FAIL_CODES) == ("fail", {"code": "10059"})
    assert classify(api_error(400, 10005), META_FAIL_CODES) == ("fail", {"code": "10005"})  # placement
    assert classify(api_error(503, None), META_FAIL_CODES) == ("fail", {"code": "no_responders"})


def test_a_store_read_is_judged_only_as_a_consistent_cut():
    state = {"first_seq": 1, "last_seq": 3, "msgs": 3, "digest": "ab", "faults": []}
    rows = [{"seq": s, "value": f"v{s}"} for s in (1, 2, 3)]
    assert dump_torn(state, dict(state), rows) is None
    assert "changed during the read" in dump_torn(state, dict(state, last_seq=4, msgs=4, digest="cd"), rows)
    assert "read 2 messages" in dump_torn(state, dict(state), rows[:2])  # a hole the store does not have
    damaged = dict(state, faults=[[2, 2, "damaged"]])
    assert dump_torn(damaged, dict(damaged), rows) is None
    assert dump_torn(None, state, rows) == "a state is missing"


def test_connect_pinned_to_a_dead_node_gives_up_at_its_deadline():
    import socket
    with socket.socket() as sock:  # a port nobody listens on once this socket is closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(Exception):
        asyncio.run(connect_pinned(f"nats://127.0.0.1:{port}", "dead", deadline=time.monotonic() + 0.5))
    assert time.monotonic() - started < CONNECT_TRY_S + 3.0  # not nats-py's retry-for-ever


def raft(leader, commit, applied, repairing=False, role="follower"):
    return {"leader": leader, "commit": commit, "applied": applied, "repairing": repairing, "role": role}


def test_settled_needs_agreed_leaders_no_repair_and_equal_applied_at_least_the_leaders_commit():
    meta = {"n1": {"leader": "n1", "role": "leader"}, "n2": {"leader": "n1"}, "n3": {"leader": "n1"}}
    good = {n: (raft("n2", 10, 10, role="leader" if n == "n2" else "follower"), meta[n]) for n in meta}
    assert settled_verdict(good)[:4] == (True, "", "n2", "n1")
    lagging = dict(good, n3=(raft("n2", 10, 9), meta["n3"]))
    assert not settled_verdict(lagging)[0]
    behind_commit = {n: (dict(s, commit=11), m) for n, (s, m) in good.items()}
    assert not settled_verdict(behind_commit)[0]
    repairing = dict(good, n1=(raft("n2", 10, 10, repairing=True), meta["n1"]))
    assert "repairing" in settled_verdict(repairing)[1]
    no_meta = {n: (s, {"leader": None}) for n, (s, _) in good.items()}
    assert "no agreed meta leader" in settled_verdict(no_meta)[1]
    # Two nodes follow n3, which itself follows n1: applied indexes agree, but nobody leads.
    nobody = {"n1": (raft("n3", 10, 10), meta["n1"]), "n2": (raft("n3", 10, 10), meta["n2"]),
              "n3": (raft("n1", 10, 10), meta["n3"])}
    assert "no agreed stream leader" in settled_verdict(nobody)[1]
    self_named_follower = {n: (raft("n2", 10, 10), meta[n]) for n in meta}
    assert not settled_verdict(self_named_follower)[0]
    down = dict(good, n3=(OSError("refused"), OSError("refused")))
    assert not settled_verdict(down)[0]
    # A store still fetching what a restored snapshot promised: its log is settled, its store is not.
    fetching = dict(good, n3=(dict(good["n3"][0], store_repair="repair fetching; 12 entries held"), meta["n3"]))
    assert "store repairing" in settled_verdict(fetching)[1]
    assert settled_verdict(fetching, corrupted={"n3"})[0]  # given corrupted data: I10 judges it instead


def test_store_standing_names_what_keeps_a_store_from_being_whole():
    whole = {"health": "current", "faults": [], "repair": {"state": "idle", "held_entries": 0}}
    assert store_standing(whole) is None
    assert store_standing(dict(whole, health="repairing")) == "health repairing"
    assert store_standing(dict(whole, repair={"state": "fetching", "held_entries": 3})) == \
        "repair fetching; 3 entries held"
    assert store_standing(dict(whole, faults=[[5, 5, "damaged"]])) == "faults [[5, 5, 'damaged']]"


class FlappingHooks:
    """raft_state answers in which the stream leader moves on every call when `flap` (a fake node)."""

    def __init__(self, name: str, calls: list[int], flap: bool) -> None:
        self.name, self.calls, self.flap = name, calls, flap

    def raft_state(self, group: str) -> dict:
        if group == "meta":
            return {"leader": "n1", "role": "leader" if self.name == "n1" else "follower"}
        self.calls[0] += 1
        leader = f"n{self.calls[0] // 3 % 3 + 1}" if self.flap else "n2"
        return raft(leader, 5, 5, role="leader" if self.name == leader else "follower")

    def replica_state(self, stream: str) -> dict:
        return {"health": "current", "faults": [], "repair": {"state": "idle", "held_entries": 0}}


class FakeCluster:
    names = ["n1", "n2", "n3"]

    def __init__(self, flap: bool) -> None:
        self.calls, self.flap = [0], flap

    def hooks(self, name: str) -> FlappingHooks:
        return FlappingHooks(name, self.calls, self.flap)


@pytest.mark.parametrize("flap", [False, True])
def test_wait_settled_wants_the_same_leaders_on_two_polls(flap):
    cluster = FakeCluster(flap)
    result = asyncio.run(wait_settled(cluster, cluster.names, "CHAOS", 1.0))
    assert result["settled"] is (not flap), result
    if not flap:
        assert result["leader"] == "n2" and result["meta_leader"] == "n1"


# --- Against real processes -----------------------------------------------------------------------------

async def run_workloads(cluster: ChaosCluster, writer: history.HistoryWriter) -> tuple[dict, list[tuple[float, float]]]:
    await create_stream(cluster)
    workload = Workload(seed=7, rates=Rates(publish_per_s=8.0, meta_interval_s=1.0), duration_s=60.0)
    await workload.start(cluster, writer)
    await asyncio.sleep(RUN_S / 2)  # the workload's own run time: nothing is awaited on it
    down_at = time.monotonic()
    await asyncio.to_thread(cluster.kill, "n3")
    await asyncio.sleep(1.5)  # the fault's own down time, not a wait for anything
    await asyncio.to_thread(cluster.start_node, "n3")
    up_at = time.monotonic()
    await asyncio.to_thread(cluster.wait_ready, START_DEADLINE_S, ["CHAOS"])
    await asyncio.sleep(RUN_S / 2)
    await workload.stop()
    probe = await run_final_phase(cluster, writer, workload=workload, seed=7, heal_t=time.monotonic())
    return {"probe": probe, "counts": workload.summary()}, [(down_at, up_at)]


def completions_follow_invokes(events: tuple[history.Event, ...]) -> None:
    """Per (process, f, key): invoke, then exactly one completion, before the next invoke."""
    open_calls: dict[tuple, history.Event] = {}
    for event in events:
        if event.f == "deliver":
            continue
        key = (event.process, event.f, event.fields.get("value"), event.fields.get("consumer"),
               event.seq if event.f == "ack" else None, event.fields.get("name"))
        if event.type == "invoke":
            assert key not in open_calls, f"second invoke before completion: line {event.line}"
            open_calls[key] = event
        else:
            assert open_calls.pop(key, None) is not None, f"completion without invoke: line {event.line}"
    assert not open_calls, f"invokes never completed: {list(open_calls.values())[:3]}"


def test_workloads_and_final_phase_leave_a_consistent_history(tmp_path):
    out_dir = str(tmp_path / "history")
    started = time.monotonic()
    with history.HistoryWriter(out_dir) as writer, \
            ChaosCluster(tmp_path / "cluster", nodes=3, seed=7, faults_log=writer.fault) as cluster:
        cluster.wait_ready(START_DEADLINE_S)
        result, outages = asyncio.run(asyncio.wait_for(run_workloads(cluster, writer), 150))
    run = history.read_history(out_dir)  # strict: every line well-formed
    events = run.events
    completions_follow_invokes(events)
    invokes = {(e.process, e.value): e for e in events if e.f == "publish" and e.type == "invoke"}
    acked = [e for e in events if e.f == "publish" and e.type == "ok"]
    assert len(acked) > 50, result
    assert all(isinstance(e.seq, int) and e.seq > 0 for e in acked)
    # Each client talks to its own node only: p0..p5 over n1..n3 twice, c0..c2 one each.
    pins = collections.defaultdict(set)
    for event in events:
        pins[event.process].add(event.node)
    for i in range(6):
        assert pins[f"p{i}"] == {f"n{i % 3 + 1}"}, pins
    for i in range(3):
        assert pins[f"c{i}"] == {f"n{i % 3 + 1}"}, pins
    # While n3 was down its publishers never got ok, and they came back to it afterwards.
    (down_at, up_at), = outages
    on_n3 = [e for e in acked if e.node == "n3"]
    assert not [e for e in on_n3 if down_at + 0.5 < e.t < up_at], "ok from a killed node"
    assert [e for e in on_n3 if e.t > up_at], "n3's publishers never recovered"
    # Every acked publish is on every replica with the payload it was sent with.
    final = run.final
    assert final.probe["ready"] and final.probe["probe_acked"] == 10, final.probe
    assert all(final.probe["drained"].values()), final.probe
    for node in final.nodes:
        replica = final.replicas[node]
        assert replica.error is None, replica.error
        stored = {m.seq: m for m in replica.messages}
        for ok in acked:
            message = stored.get(ok.seq)
            assert message is not None and message.value == ok.value, (node, ok.fields)
            assert message.hash == invokes[(ok.process, ok.value)].hash, (node, ok.fields)
    assert len({tuple(final.replicas[n].messages) for n in final.nodes}) == 1
    # The consumers saw and acked; their delivered values are the stored ones.
    stored = {m.seq: m for m in final.replicas["n1"].messages}
    deliveries = [e for e in events if e.f == "deliver"]
    assert {e.consumer for e in deliveries} == {"C0", "C1", "C2"}
    assert all(stored[e.seq].value == e.value and stored[e.seq].hash == e.hash for e in deliveries)
    assert sum(1 for e in events if e.f == "ack" and e.type == "ok") >= len(acked)
    # W-meta created and deleted scratch streams; the end state names what must exist.
    assert any(e.f == "stream_create" and e.type == "ok" for e in events)
    assert final.scratch_deleted and "CHAOS" in final.meta_expected_streams
    for node in final.nodes:
        state = final.states[node]
        assert not state["errors"], state["errors"]
        assert set(state["consumers"]["CHAOS"]) == {"C0", "C1", "C2"}
    assert json.loads((tmp_path / "history" / "final" / "probe.json").read_text())["heal_to_ready_s"] >= 0
    assert time.monotonic() - started < 90
