"""`TestHooks`: the chaos test hooks a node serves under `/test/` on its monitor port (layer L5).

Owns: the views the chaos harness (`jsraft.testing.chaos`, ../shared/CHAOS.md) reads one node through —
each built from this node's LOCAL state, never through a leader — and the one thing it may change, the
wall clock's skew:
  - `GET /test/replica_read?stream=S&from_seq=N&batch=N`: the local store's messages from `from_seq`
    (deleted seqs skipped, damaged ones listed as `{"seq", "damaged": true}`), each with its subject,
    `Nats-Msg-Id` (`value`), size and `hash` (sha256 of the payload, first 16 hex digits).
  - `GET /test/replica_state?stream=S`, `GET /test/raft_state?group=meta|S`, `GET /test/meta_state` (its
    `consumers` are those of the local replicas: consumers live in their stream's group, DESIGN §7),
    `GET /test/consumer_state?stream=S&consumer=C`, `GET /test/streams`.
  - `POST /test/clock?offset_s=X&rate=Y` (`GET` reads it): the node's `SkewableClock`, and what its
    `SteadyWall` (the time messages are stamped with) reads now.

Invariants:
  1. Off unless the node runs with `test_hooks` (`jsraft serve --test-hooks`): the monitor routes `/test/`
     here only then, and answers 404 otherwise.
  2. Read-only except `/test/clock`, which changes the wall clock's offset and rate only — monotonic time,
     which paces elections and timeouts, is not touched (runtime/clock.py invariant 1).
  3. Bounded: one `replica_read` returns at most `READ_BATCH_MAX` messages and looks at most
     `READ_SCAN_SEQS_MAX` sequences; the caller continues from `next_seq`.
  4. A bad request (unknown stream, group or consumer, a malformed number) is a 4xx with the reason,
     never an exception into the monitor.
  5. The hooks read the node through `HookParts` (wired once in `server/node.py`, carried to the monitor
     inside `MonitorParts`), never through `Node`; its replicas and advisories are callables read per
     request.

Imports: stdlib, L0, L2 (`store` errors), L3 (`stream.headers`), L4 (`runtime` clock),
`server.groups.meta_service` (`META_GROUP`). Must not import `jsraft.testing`. Reference: ../shared/CHAOS.md
"Test hooks"; issue #7.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from jsraft.errors import CorruptRecord, JsraftError, NoMessageFound
from jsraft.runtime import SkewableClock
from jsraft.server.groups.meta_service import META_GROUP
from jsraft.stream.headers import parse_headers

if TYPE_CHECKING:
    from jsraft.meta import MetaStateMachine
    from jsraft.replica.advisories import AdvisoryLog
    from jsraft.runtime import GroupStatus, SteadyWall, SystemClock
    from jsraft.server.groups.stream_replica import StreamReplica

READ_BATCH_MAX = 1000
READ_SCAN_SEQS_MAX = 100_000
PREFIX = "/test/"

Answer = tuple[int, dict[str, Any]]


class HookRefused(Exception):
    """A hook request refused with `status` (invariant 4)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def payload_hash(payload: bytes) -> str:
    """The chaos history's payload hash (chaos spec): sha256, first 16 hex digits."""
    return hashlib.sha256(payload).hexdigest()[:16]


def _int(query: dict[str, str], key: str, default: int | None = None) -> int:
    text = query.get(key)
    if text is None:
        if default is None:
            raise HookRefused(400, f"query parameter {key} is required")
        return default
    try:
        return int(text)
    except ValueError:
        raise HookRefused(400, f"query parameter {key} is not an integer: {text!r}") from None


def _required(query: dict[str, str], key: str) -> str:
    value = query.get(key)
    if not value:
        raise HookRefused(400, f"query parameter {key} is required")
    return value


@attrs.frozen(kw_only=True)
class HookParts:
    """What the hooks read of the node (invariant 5)."""

    name: str
    meta: MetaStateMachine
    replicas: Callable[[], dict[str, StreamReplica]]
    advisories: Callable[[], AdvisoryLog]
    status: Callable[[str], GroupStatus]  # `NodeRuntime.status`
    clock: SystemClock | SkewableClock
    steady_clock: SteadyWall


class TestHooks:
    __test__ = False  # not a pytest class, despite the name

    def __init__(self, parts: HookParts) -> None:
        self.parts = parts

    def respond(self, method: str, path: str, query: dict[str, str]) -> Answer:
        """`(status, body)` for `/test/<hook>`; 405 for a method the hook does not take."""
        name = path[len(PREFIX):]
        views = {"replica_read": self.replica_read, "replica_state": self.replica_state,
                 "raft_state": self.raft_state, "meta_state": self.meta_state,
                 "consumer_state": self.consumer_state, "streams": self.streams, "clock": self.clock,
                 "advisories": self.advisories}
        view = views.get(name)
        if view is None:
            return 404, {"error": f"no such test hook: {path}"}
        if method == "POST" and name != "clock":
            return 405, {"error": f"{path} takes GET only"}
        try:
            return 200, view(query) if name != "clock" else self.clock(query, write=method == "POST")
        except HookRefused as refused:
            return refused.status, {"error": str(refused)}

    # --- Streams ---------------------------------------------------------------------------------------

    def _replica(self, query: dict[str, str]) -> "StreamReplica":
        stream = _required(query, "stream")
        replica = self.parts.replicas().get(stream)
        if replica is None:
            raise HookRefused(404, f"no local replica of stream {stream!r} on {self.parts.name}")
        if replica.store is None:
            raise HookRefused(503, f"the replica of {stream!r} is not open yet")
        return replica

    def streams(self, query: dict[str, str]) -> dict[str, Any]:
        return {"node": self.parts.name, "streams": sorted(self.parts.replicas())}

    def advisories(self, query: dict[str, str]) -> dict[str, Any]:
        """The stream advisories this node raised since it started (drift found, repaired: what each
        repair found and fetched), optionally for one stream — how a harness tells a ranged repair from
        a truncation."""
        stream = query.get("stream") or None
        return {"node": self.parts.name, "advisories": self.parts.advisories().entries(stream=stream)}

    def replica_read(self, query: dict[str, str]) -> dict[str, Any]:
        """Up to `batch` messages of the local store from `from_seq` (invariant 3)."""
        replica = self._replica(query)
        store = replica.store
        batch = min(max(_int(query, "batch", 100), 1), READ_BATCH_MAX)
        state = store.state()
        seq = max(_int(query, "from_seq", 1), state.first_seq, 1)
        scan_end = seq + READ_SCAN_SEQS_MAX
        damaged = {s for fault in store.faults() for s in range(max(fault.first, seq), min(fault.last + 1, scan_end))}
        messages: list[dict[str, Any]] = []
        while seq <= state.last_seq and seq < scan_end and len(messages) < batch:
            messages.extend(self._read_one(store, seq, seq in damaged))
            seq += 1
        return {"messages": messages, "last_seq": state.last_seq, "first_seq": state.first_seq,
                "next_seq": seq}

    @staticmethod
    def _read_one(store: Any, seq: int, damaged: bool) -> list[dict[str, Any]]:
        if damaged:
            return [{"seq": seq, "damaged": True}]
        try:
            msg = store.load(seq)
        except NoMessageFound:
            return []  # deleted
        except CorruptRecord:
            return [{"seq": seq, "damaged": True}]
        try:
            value = parse_headers(msg.headers).get("Nats-Msg-Id")
        except JsraftError:
            value = None
        return [{"seq": seq, "subject": msg.subject, "value": value, "hash": payload_hash(msg.payload),
                 "size": len(msg.payload), "timestamp_ns": msg.timestamp_ns}]

    def replica_state(self, query: dict[str, str]) -> dict[str, Any]:
        replica = self._replica(query)
        state = replica.store.state()
        raft = self._raft_status(replica.group)
        machine = replica.machine
        return {"first_seq": state.first_seq, "last_seq": state.last_seq, "msgs": state.msgs,
                "bytes": state.bytes, "digest": f"{state.digest:016x}",
                "applied_index": raft.applied_index if raft else None,
                "term": raft.current_term if raft else None,
                "role": str(raft.role) if raft else None,
                "repairing": bool(raft.repairing) if raft else None,
                "leader": raft.leader_id if raft else None,
                "health": str(replica.repair.health()) if machine is not None else None,
                "faults": [[fault.first, fault.last, str(fault.kind)] for fault in replica.store.faults()],
                # blocks the fast open took from the index and the background verifier has not read yet
                "unverified_blocks": len(getattr(replica.store, "unverified", ())),
                "repair": replica.repair.describe()}

    # --- Raft and meta ---------------------------------------------------------------------------------

    def _raft_status(self, group: str) -> Any:
        try:
            return self.parts.status(group).raft
        except JsraftError:
            return None  # closing, or not open yet

    def raft_state(self, query: dict[str, str]) -> dict[str, Any]:
        group = _required(query, "group")
        if group == "meta":
            name = META_GROUP
        else:
            replica = self.parts.replicas().get(group)
            if replica is None:
                raise HookRefused(404, f"no local replica of stream {group!r} on {self.parts.name}")
            name = replica.group
        status = self._raft_status(name)
        if status is None:
            raise HookRefused(503, f"raft group {name!r} is not open")
        return {"group": name, "term": status.current_term, "vote": status.voted_for,
                "commit": status.commit_index, "applied": status.applied_index, "last_index": status.last_index,
                "leader": status.leader_id, "role": str(status.role), "repairing": bool(status.repairing),
                "repair_reason": status.repair_reason, "snapshot_index": status.snapshot_index,
                "voters": list(status.voters), "halted_reason": status.halted_reason}

    def meta_state(self, query: dict[str, str]) -> dict[str, Any]:
        meta = self.parts.meta
        streams: dict[str, Any] = {}
        consumers: dict[str, list[str]] = {}
        for assignment in meta.streams():
            streams[assignment.name] = {"group": assignment.group, "peers": list(assignment.peers),
                                        "subjects": list(assignment.subjects),
                                        "offline_reason": assignment.offline_reason}
            # Consumers are replicated in their stream's group (DESIGN §7), not in the meta state: the names
            # come from the local replica; a stream without one here is left out.
            replica = self.parts.replicas().get(assignment.name)
            if replica is not None and replica.adapter is not None:
                consumers[assignment.name] = sorted(replica.adapter.consumers.entries)
        status = self._raft_status(META_GROUP)
        return {"streams": streams, "consumers": consumers, "digest": f"{meta.digest():016x}",
                "leader": status.leader_id if status else None, "applied": meta.applied_index}

    # --- Consumers -------------------------------------------------------------------------------------

    def consumer_state(self, query: dict[str, str]) -> dict[str, Any]:
        replica = self._replica(query)
        name = _required(query, "consumer")
        entry = replica.adapter.consumers.entries.get(name) if replica.adapter is not None else None
        if entry is None:
            raise HookRefused(404, f"no consumer {name!r} in the local replica of {replica.name!r}")
        state = entry.state
        pending = [[seq, state.redelivered.get(seq, 0) + 1] for seq in sorted(state.pending)]
        num_pending = max(replica.store.state().last_seq - state.delivered_stream_seq, 0)
        return {"delivered": {"consumer_seq": state.delivered_consumer_seq, "stream_seq": state.delivered_stream_seq},
                "ack_floor": {"consumer_seq": state.ack_floor_consumer_seq,
                              "stream_seq": state.ack_floor_stream_seq},
                "pending": pending, "redelivered": state.num_redelivered, "num_pending": num_pending,
                "leader": replica.leader_id()}

    # --- Clock (invariant 2) ---------------------------------------------------------------------------

    def clock(self, query: dict[str, str], *, write: bool = False) -> dict[str, Any]:
        clock = self.parts.clock
        if not isinstance(clock, SkewableClock):
            raise HookRefused(409, "the node's clock is not skewable (started without test_hooks)")
        if write:
            offset_s, rate = query.get("offset_s"), query.get("rate")
            try:
                clock.set_skew(offset_ns=round(float(offset_s) * 1e9) if offset_s not in (None, "") else None,
                               rate=float(rate) if rate not in (None, "") else None)
            except ValueError:
                raise HookRefused(400, f"bad offset_s/rate: {offset_s!r}, {rate!r}") from None
            except JsraftError as error:  # a negative rate
                raise HookRefused(400, str(error)) from None
        return {"offset_s": clock.offset_ns / 1e9, "rate": clock.rate, "wall_ns": clock.wall_ns(),
                "steady_wall_ns": self.parts.steady_clock.wall_ns()}
