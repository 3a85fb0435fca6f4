"""Helpers for the stream tests: configs, NATS headers, stores of both kinds, and a tiny in-process group.

Method: `Group` plays the part of Raft and the runtime, deterministically: an entry is "committed" by
giving it the next index and applying it on every replica's `StreamStateMachine` (or on a chosen subset,
to make one replica miss it). Everything else is the real stream code on a real `MemStore` or `FileStore`
(on `OsDisk` in a pytest tmp_path).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from jsraft.disk import OsDisk
from jsraft.jsapi.stream_config import parse_stream_config
from jsraft.store.base import StoreConfig, StreamStore
from jsraft.store.filestore import FileStore
from jsraft.store.memstore import MemStore
from jsraft.stream import catchup_wire
from jsraft.stream.catchup import CatchupSession, serve_catchup
from jsraft.stream.leader import StreamLeader
from jsraft.stream.machine import StreamStateMachine
from jsraft.stream.store_config import store_config_for

STORE_KINDS = ["mem", "file"]
SMALL_BLOCK_BYTES = 64 * 1024
NOW = 1_700_000_000_000_000_000  # a fixed "now" in ns: tests pass time explicitly


def config_json(name: str = "ORDERS", **fields) -> bytes:
    data = {"name": name, "subjects": [f"{name.lower()}.>"], **fields}
    return json.dumps(data).encode()


def nats_headers(**pairs: str) -> bytes:
    """`Nats_Msg_Id="a"` -> `NATS/1.0\\r\\nNats-Msg-Id: a\\r\\n\\r\\n` (underscores become dashes)."""
    lines = "".join(f"{key.replace('_', '-')}: {value}\r\n" for key, value in pairs.items())
    return f"NATS/1.0\r\n{lines}\r\n".encode()


def pub(subject: str, payload: bytes = b"x", **headers: str) -> tuple[str, bytes, bytes]:
    return subject, nats_headers(**headers) if headers else b"", payload


class StoreMaker:
    """Fresh stores of one kind; FileStores live in their own directories under `root`."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind, self.root = kind, root
        self._numbers = itertools.count()
        self.opened: list[StreamStore] = []
        self.paths: dict[int, Path] = {}

    def make(self, config: StoreConfig) -> StreamStore:
        if self.kind == "mem":
            store: StreamStore = MemStore(config)
        else:
            path = self.root / f"store{next(self._numbers)}"
            store = FileStore.open(OsDisk(str(path)), config)
            self.paths[id(store)] = path
        self.opened.append(store)
        return store

    def reopen(self, store: StreamStore, *, use_index: bool = False) -> StreamStore:
        """Close and reopen a FileStore from its directory (a restart; `use_index=False` scans every record)."""
        path = self.paths.pop(id(store))
        config = store.config
        store.close()
        reopened = FileStore.open(OsDisk(str(path)), config, use_index=use_index)
        self.paths[id(reopened)] = path
        self.opened.append(reopened)
        return reopened

    def close_all(self) -> None:
        for store in self.opened:
            try:
                store.close()
            except Exception:  # already closed
                pass


def make_machine(maker: StoreMaker, raw: bytes | None = None) -> StreamStateMachine:
    raw = raw if raw is not None else config_json()
    config, raw = parse_stream_config(raw)
    store = maker.make(store_config_for(config, StoreConfig(name=config.name, block_size=SMALL_BLOCK_BYTES)))
    return StreamStateMachine(store, config, raw)


class Group:
    """Replicas of one stream applying the same log; `leader` names the one that decides."""

    def __init__(self, machines: dict[str, StreamStateMachine], leader: str) -> None:
        self.machines = machines
        self.leader_name = leader
        self.leader = StreamLeader(machines[leader])
        self.index = 0
        self.log: list[bytes] = []

    def commit(self, entry: bytes, only: set[str] | None = None) -> dict:
        self.index += 1
        self.log.append(entry)
        return {name: machine.apply(self.index, entry) for name, machine in self.machines.items()
                if only is None or name in only}

    def commit_each(self, entry_by_name: dict[str, bytes]) -> dict:
        """Commit one index with a different entry per replica: how a replica's store comes to differ."""
        self.index += 1
        self.log.append(entry_by_name[self.leader_name])
        return {name: self.machines[name].apply(self.index, entry) for name, entry in entry_by_name.items()}

    def publish(self, publishes, now_ns: int = NOW):
        decision = self.leader.decide(publishes, now_ns)
        results = [self.commit(entry) for entry in decision.entries]
        return decision, results

    def publish_many(self, count: int, subject: str = "orders.new", start_ns: int = NOW, per_entry: int = 100):
        """Publish `count` messages with distinct payloads, `per_entry` per decide call."""
        sent = 0
        while sent < count:
            size = min(per_entry, count - sent)
            publishes = [pub(subject, f"payload-{sent + i}".encode()) for i in range(size)]
            self.publish(publishes, start_ns + sent)
            sent += size


def catch_up(follower: StreamStateMachine, leader: StreamStateMachine, plan, *, reset_store=None,
             bytes_max: int = 64 * 1024, full: bool = False, store_may_be_ahead: bool = False):
    """Run a follower's repair against a leader, every message through the wire encoding."""
    session = CatchupSession(follower, plan.group, snapshot_index=leader.applied_index, reset_store=reset_store,
                             bytes_max=bytes_max, store_may_be_ahead=store_may_be_ahead)
    request = session.start(plan, full=full)
    rounds = 0
    while request is not None:
        rounds += 1
        assert rounds < 10_000, "catch-up does not converge"
        wire_request = catchup_wire.decode_catchup(catchup_wire.encode_request(request))
        answer = serve_catchup(leader, wire_request)
        if isinstance(answer, catchup_wire.CatchupRefusal):
            session.on_refusal(answer)
        answer = catchup_wire.decode_catchup(catchup_wire.encode_chunk(answer))
        request = session.on_chunk(answer)
    return session
