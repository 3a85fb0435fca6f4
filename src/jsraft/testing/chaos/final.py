"""The final phase of a chaos run (../shared/CHAOS.md "Workloads"): after every fault is healed, prove the
cluster settled, read what each node holds, drain the consumers, probe liveness, and write `final/`.

Owns: `run_final_phase(cluster, writer, ...)`, in this order:
  1. settle: poll every node's hooks until each replica of the stream is not repairing (neither its log nor
     its store, `store_standing`; a node given corrupted data may stay repairing) and all report the
     same applied index ≥ the leader's commit, every node naming the same stream leader and the same meta
     leader, each of which says it leads, on two polls in a row with the same leaders (`settled_verdict`,
     `wait_settled`; deadline `SETTLE_DEADLINE_S`);
  2. probe: `PROBES` fresh publishes (process `probe`, values `probe-<n>`, recorded like W-pub, each on the
     next node in turn, each tried at most `PROBE_TRIES` times) — `heal_to_ready_s` is the time from the
     heal to the moment the cluster had settled and every probe was acked;
  3. drain each W-cons consumer through its own pinned client (fetch, record, double-ack) until the
     consumer reports nothing pending and nothing awaiting ack (deadline `DRAIN_DEADLINE_S`);
  4. settle again (the probes and drain acks are new entries), then read the whole stream from each node's
     local store (`replica_read`, in batches) and each node's states (`replica_state` for every local
     stream, `raft_state` for meta and the stream, `meta_state`, `consumer_state` for each consumer);
  5. write `final/replica_<node>_<stream>.jsonl`, `final/state_<node>.json` and `final/probe.json` with
     the `chaos.history` writers (`final/nodes.json` is written first of all, before step 1).
Reading the stores after the probes and the drain (CHAOS.md lists them the other way round) is on purpose:
the replica files then hold every acked publish, probes included, so the checker needs no exception for
them, and the consumer states are the drained ones.

Invariants:
  1. Bounded: every wait polls with a deadline; the whole phase ends within about
     2 × SETTLE_DEADLINE_S + PROBE_DEADLINE_S + DRAIN_DEADLINE_S plus the reads.
  2. Never raises for what the cluster did: a node whose hooks fail gets `{"error": ...}` as its replica
     file and the failure in its state's `errors`; `probe.json` says `ready: false` when the cluster did
     not settle or a probe was not acked.
  3. Hooks are blocking calls (`chaos.hooks.Hooks`): they run in threads (`asyncio.to_thread`), so the
     event loop — and any client still open — keeps running.

Imports: anything (test code); never imported by production code.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from jsraft.testing.chaos import history
from jsraft.testing.chaos.clients import Recorder, close_quietly, connect_pinned, publish_recorded
from jsraft.testing.chaos.workloads import META_TIMEOUT_S, STREAM, consumer_names, fetch_and_ack

SETTLE_DEADLINE_S = 60.0
RESETTLE_UNSETTLED_S = 10.0
PROBE_DEADLINE_S = 30.0
DRAIN_DEADLINE_S = 30.0
POLL_S = 0.2
PROBES = 10
PROBE_TRIES = 3
READ_BATCH = 500
READ_PAGES_MAX = 100_000
DUMP_TRIES = 3


async def run_final_phase(cluster: Any, writer: Any, *, workload: Any = None, corrupted: Any = (), seed: int = 0,
                          stream: str = STREAM, consumers: list[str] | None = None,
                          heal_t: float | None = None) -> dict[str, Any]:
    """Run steps 1–5 of the module docstring; returns the probe summary that went to `probe.json`.
    `heal_t`: time.monotonic() of the heal (default: now)."""
    heal_t = time.monotonic() if heal_t is None else heal_t
    names = list(cluster.names)
    consumers = list(consumers if consumers is not None else
                     (workload.consumers if workload is not None else consumer_names()))
    record = Recorder(writer)
    # First, so that a phase cut short still leaves the checker what the run expected.
    _write_nodes(writer.directory, names, stream, consumers, workload, corrupted)
    settled = await wait_settled(cluster, names, stream, SETTLE_DEADLINE_S, corrupted)
    acked, sent = await _probe(cluster, names, record, stream, seed)
    ready = settled["settled"] and acked == PROBES
    heal_to_ready_s = time.monotonic() - heal_t
    drained = await _drain_all(cluster, names, record, stream, consumers)
    # A cluster that never settled gets a short second chance only: its state is read as it is.
    resettled = await wait_settled(cluster, names, stream,
                                   SETTLE_DEADLINE_S if settled["settled"] else RESETTLE_UNSETTLED_S, corrupted)
    for name in names:
        await _dump_node(cluster, name, writer.directory, stream, consumers)
    leaders = resettled if resettled["settled"] else settled
    probe = {"meta_leader": leaders["meta_leader"], "stream_leaders": {stream: leaders["leader"]},
             "probe_sent": sent, "probe_acked": acked, "drained": drained,
             "heal_to_ready_s": round(heal_to_ready_s, 3), "ready": bool(ready),
             "settled": settled["settled"], "settle_s": settled["waited_s"], "settle_detail": settled["detail"],
             "resettled": resettled["settled"], "resettle_detail": resettled["detail"]}
    history.write_final_probe(writer.directory, probe)
    return probe


def _write_nodes(directory: Any, names: list[str], stream: str, consumers: list[str], workload: Any,
                 corrupted: Any) -> None:
    expected = workload.expected_streams() if workload is not None else [stream]
    deleted = list(workload.scratch_deleted) if workload is not None else []
    history.write_final_nodes(directory, nodes=names, stream=stream, consumers=consumers,
                              corrupted=sorted(corrupted), scratch_deleted=deleted, meta_expected_streams=expected)


# --- 1. Settle ------------------------------------------------------------------------------------------

async def _hook(cluster: Any, name: str, method: str, *args: Any) -> Any:
    return await asyncio.to_thread(getattr(cluster.hooks(name), method), *args)


async def _poll_states(cluster: Any, names: list[str], stream: str) -> dict[str, Any]:
    """One round: every node's raft_state of the stream (with `store_repair`, what keeps its store from
    being whole, or None) and of meta (a failed call gives the error)."""
    async def one(name: str) -> tuple[Any, Any]:
        results = []
        for group in (stream, "meta"):
            try:
                results.append(await _hook(cluster, name, "raft_state", group))
            except Exception as error:
                results.append(error)
        if isinstance(results[0], dict):
            try:
                results[0] = dict(results[0], store_repair=store_standing(
                    await _hook(cluster, name, "replica_state", stream)))
            except Exception as error:
                results[0] = error
        return results[0], results[1]

    answers = await asyncio.gather(*(one(name) for name in names))
    return dict(zip(names, answers))


def store_standing(replica_state: dict[str, Any]) -> str | None:
    """Why a replica's store is not whole yet (a repair of the stream's store in progress: a plan from a
    restored snapshot, a resync, held entries, known faults), or None. Raft's own `repairing` is about the
    log; a store still fetching what a snapshot promised reads short, and judging it would report a
    transient state as a loss."""
    repair = replica_state.get("repair") or {}
    reasons = []
    if replica_state.get("health") not in (None, "current"):
        reasons.append(f"health {replica_state.get('health')}")
    if repair.get("state") not in (None, "idle"):
        reasons.append(f"repair {repair.get('state')}")
    if repair.get("held_entries"):
        reasons.append(f"{repair['held_entries']} entries held")
    if replica_state.get("faults"):
        reasons.append(f"faults {replica_state['faults'][:3]}")
    return "; ".join(reasons) or None


def settled_verdict(states: dict[str, tuple[Any, Any]],
                    corrupted: Any = ()) -> tuple[bool, str, str | None, str | None]:
    """(settled, why not, stream leader, meta leader) from one round of `_poll_states`: every node answers,
    all name the same stream leader and the same meta leader, each of those names itself leader, no
    replica is repairing (its log, or its store: `store_standing`, except on a node given corrupted data,
    which may stay repairing for good: I10 judges it), and all have applied the same index, at least the
    leader's commit."""
    errors = [f"{name}: {s!r}" for name, pair in states.items() for s in pair if isinstance(s, BaseException)]
    if errors:
        return False, "; ".join(errors)[:500], None, None
    leader = _agreed({name: s for name, (s, _) in states.items()})
    meta_leader = _agreed({name: m for name, (_, m) in states.items()})
    if leader is None:
        return False, "no agreed stream leader: " + _leaders(states, 0), None, meta_leader
    if meta_leader is None:
        return False, "no agreed meta leader: " + _leaders(states, 1), leader, None
    repairing = [name for name, (s, _) in states.items() if s.get("repairing")]
    if repairing:
        return False, f"repairing: {repairing}", leader, meta_leader
    stores = [f"{name}: {s['store_repair']}" for name, (s, _) in states.items()
              if s.get("store_repair") and name not in corrupted]
    if stores:
        return False, f"store repairing: {stores}", leader, meta_leader
    applied = {name: s.get("applied") for name, (s, _) in states.items()}
    commit = states[leader][0].get("commit")
    if len(set(applied.values())) != 1 or commit is None or min(applied.values()) < commit:
        return False, f"applied {applied}, leader commit {commit}", leader, meta_leader
    return True, "", leader, meta_leader


def _agreed(group_states: dict[str, Any]) -> str | None:
    """The leader every node names, if that node is one of them and says it leads (role, when given)."""
    named = {state.get("leader") for state in group_states.values()}
    if len(named) != 1:
        return None
    leader = named.pop()
    own = group_states.get(leader)
    if own is None or own.get("role", "leader") != "leader":
        return None
    return leader


def _leaders(states: dict[str, tuple[Any, Any]], which: int) -> str:
    return ", ".join(f"{name}->{pair[which].get('leader')}" for name, pair in sorted(states.items()))


async def wait_settled(cluster: Any, names: list[str], stream: str, deadline_s: float,
                       corrupted: Any = ()) -> dict[str, Any]:
    """Poll until `settled_verdict` holds on two polls in a row with the same leaders (a leadership that
    moves every few seconds is not settled), or `deadline_s` passed."""
    started = time.monotonic()
    verdict: tuple[bool, str, str | None, str | None] = (False, "not polled", None, None)
    previous = verdict
    while True:
        verdict = settled_verdict(await _poll_states(cluster, names, stream), corrupted)
        if verdict[0] and previous[0] and verdict[2:] == previous[2:]:
            break
        if time.monotonic() - started >= deadline_s:
            verdict = (False, verdict[1] or "leaders changed between polls", *verdict[2:])
            break
        previous = verdict
        await asyncio.sleep(POLL_S)
    return {"settled": verdict[0], "detail": verdict[1], "leader": verdict[2], "meta_leader": verdict[3],
            "waited_s": round(time.monotonic() - started, 3)}


# --- 2. Probes ------------------------------------------------------------------------------------------

async def _probe(cluster: Any, names: list[str], record: Recorder, stream: str, seed: int) -> tuple[int, int]:
    """PROBES publishes, probe n through node names[n % len]; (acked, sent)."""
    rng = random.Random(f"{seed}-probe")
    conns: dict[str, Any] = {}
    deadline = time.monotonic() + PROBE_DEADLINE_S
    acked = sent = 0
    try:
        for n in range(PROBES):
            node = names[n % len(names)]
            payload = rng.randbytes(rng.randint(32, 4096))
            for attempt in range(PROBE_TRIES):
                if time.monotonic() >= deadline:
                    break
                js = await _jetstream(conns, cluster, node, "probe", deadline)
                if js is None:
                    break
                sent += 1
                kind, _ = await publish_recorded(record, js, process="probe", node=node, stream=stream,
                                                 subject="chaos.probe", value=f"probe-{n}", payload=payload,
                                                 retry=attempt)
                if kind == "ok":
                    acked += 1
                    break
                await asyncio.sleep(POLL_S)
    finally:
        for nc in conns.values():
            await close_quietly(nc)
    return acked, sent


async def _jetstream(conns: dict[str, Any], cluster: Any, node: str, name: str, deadline: float) -> Any:
    if node not in conns:
        try:
            conns[node] = await connect_pinned(cluster.client_url(node), name, deadline=deadline)
        except Exception:
            return None
    return conns[node].jetstream(timeout=META_TIMEOUT_S)


# --- 3. Drain -------------------------------------------------------------------------------------------

async def _drain_all(cluster: Any, names: list[str], record: Recorder, stream: str,
                     consumers: list[str]) -> dict[str, bool]:
    results = await asyncio.gather(*(
        _drain(cluster, names[i % len(names)], f"c{i}", record, stream, consumer)
        for i, consumer in enumerate(consumers)))
    return dict(zip(consumers, results))


async def _drain(cluster: Any, node: str, process: str, record: Recorder, stream: str, consumer: str) -> bool:
    """Fetch and ack until the consumer has nothing pending and nothing awaiting ack."""
    deadline = time.monotonic() + DRAIN_DEADLINE_S
    nc = None
    try:
        nc = await connect_pinned(cluster.client_url(node), process, deadline=deadline)
        js = nc.jetstream(timeout=META_TIMEOUT_S)
        sub = await js.pull_subscribe_bind(durable=consumer, stream=stream)
        while time.monotonic() < deadline:
            try:
                delivered, _ = await fetch_and_ack(record, sub, process=process, node=node, stream=stream,
                                                   consumer=consumer, batch=256, timeout_s=1.0)
                if delivered:
                    continue
                info = await js.consumer_info(stream, consumer)
                if info.num_pending == 0 and info.num_ack_pending == 0:
                    return True
            except Exception:
                await asyncio.sleep(POLL_S)
        return False
    except Exception:
        return False
    finally:
        await close_quietly(nc)


# --- 4, 5. Read each node -------------------------------------------------------------------------------

async def _dump_node(cluster: Any, name: str, directory: Any, stream: str, consumers: list[str]) -> None:
    """Read the node's store and states; again (up to `DUMP_TRIES`) while the read was not a consistent
    cut: the store's state tuple moved during the read, or the read holds another count than it says."""
    for attempt in range(DUMP_TRIES):
        messages, error = None, None
        try:
            before = await asyncio.to_thread(lambda: cluster.hooks(name).replica_state(stream))
            messages = await asyncio.to_thread(read_replica, cluster.hooks(name), stream)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        state = await asyncio.to_thread(read_state, cluster.hooks(name), stream, consumers)
        torn = dump_torn(before, state["replicas"].get(stream), messages) if error is None else f"read failed: {error}"
        if torn is None or attempt == DUMP_TRIES - 1:
            break
        await asyncio.sleep(1.0)
    if torn is not None:
        state["errors"].append(f"replica_read: not a consistent cut after {DUMP_TRIES} reads: {torn}")
    history.write_final_replica(directory, name, stream, messages, **({"error": error} if error else {}))
    history.write_final_state(directory, name, state)


def dump_torn(before: dict[str, Any] | None, after: dict[str, Any] | None,
              messages: list[dict[str, Any]] | None) -> str | None:
    """Why a store read between two `replica_state` answers is not a consistent cut, or None. A store that
    changes while it is read (a repair that starts, an entry applied late) can show a hole or a mix of two
    states: that is the harness reading badly, not the replica disagreeing."""
    if before is None or after is None or messages is None:
        return "a state is missing"
    keys = ("first_seq", "last_seq", "msgs", "digest")
    if tuple(before.get(k) for k in keys) != tuple(after.get(k) for k in keys):
        return f"the store changed during the read: {[before.get(k) for k in keys]} -> {[after.get(k) for k in keys]}"
    if not after.get("faults") and len(messages) != after.get("msgs"):  # a damaged seq is listed, maybe not counted
        return f"read {len(messages)} messages, the store says {after.get('msgs')}"
    return None


def read_replica(hooks: Any, stream: str) -> list[dict[str, Any]]:
    """Every message of the node's local store (blocking), in seq order; damaged ones as
    {"seq", "damaged": true} (their value and hash null)."""
    messages: list[dict[str, Any]] = []
    seq = 1
    for _ in range(READ_PAGES_MAX):
        page = hooks.replica_read(stream, seq, READ_BATCH)
        messages.extend(page["messages"])
        next_seq = page["next_seq"]
        if not page["messages"] or next_seq > page["last_seq"] or next_seq <= seq:
            return messages
        seq = next_seq
    raise RuntimeError(f"replica_read({stream}): more than {READ_PAGES_MAX} pages")


def read_state(hooks: Any, stream: str, consumers: list[str]) -> dict[str, Any]:
    """state_<node>.json (blocking): each hook that fails leaves its slot out and adds to `errors`."""
    state: dict[str, Any] = {"replicas": {}, "raft": {}, "meta": None, "consumers": {stream: {}}, "errors": []}

    def attempt(what: str, call: Any) -> Any:
        try:
            return call()
        except Exception as error:
            state["errors"].append(f"{what}: {type(error).__name__}: {error}"[:500])
            return None

    local = attempt("streams", hooks.streams) or []
    for name in local:
        answer = attempt(f"replica_state {name}", lambda name=name: hooks.replica_state(name))
        if answer is not None:
            state["replicas"][name] = answer
    for group in ("meta", stream):
        answer = attempt(f"raft_state {group}", lambda group=group: hooks.raft_state(group))
        if answer is not None:
            state["raft"][group] = answer
    state["meta"] = attempt("meta_state", hooks.meta_state)
    for consumer in consumers:
        answer = attempt(f"consumer_state {consumer}", lambda consumer=consumer: hooks.consumer_state(stream, consumer))
        if answer is not None:
            state["consumers"][stream][consumer] = answer
    return state
