"""The chaos history directory: its file names, a writer, and strict readers (test code, issue #7).

Owns: the on-disk format shared by the harness, the workloads and the checker
(/tmp/briefs/chaos_spec.md "History directory"):

    HISTORY_DIR/history.jsonl   client operations, one JSON object a line (`Event`)
    HISTORY_DIR/faults.jsonl    injected faults (`Fault`)
    HISTORY_DIR/final/nodes.json, probe.json, state_<node>.json, replica_<node>_<stream>.jsonl
    HISTORY_DIR/report.json     written by `jsraft.testing.checker`

Invariants:
  1. `HistoryWriter` writes whole lines under one lock and flushes after each, so a reader never sees two
     events interleaved, and everything written before a harness crash is on disk up to the last line.
  2. Readers validate every line once, at this gateway: a malformed line raises `HistoryFormatError`
     naming the file and the line number; past it, the checker trusts the types.
  3. `Event` keeps the whole decoded line (`fields`), so new optional keys need no format change.

Imports: stdlib and attrs only (no jsraft production module is needed to read or write a history).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

import attrs

HISTORY_FILE = "history.jsonl"
FAULTS_FILE = "faults.jsonl"
FINAL_DIR = "final"
NODES_FILE = "nodes.json"
PROBE_FILE = "probe.json"
REPORT_FILE = "report.json"

EVENT_TYPES = frozenset({"invoke", "ok", "fail", "info"})
FAULT_PHASES = frozenset({"start", "end", "instant"})
# Keys each (f, type) must carry beyond the common ones, with their JSON types.
_STR, _INT = (str,), (int,)
_REQUIRED: dict[tuple[str, str], dict[str, tuple[type, ...]]] = {
    ("publish", "invoke"): {"value": _STR, "hash": _STR},
    ("publish", "ok"): {"value": _STR, "seq": _INT},
    ("publish", "fail"): {"value": _STR},
    ("publish", "info"): {"value": _STR},
    ("deliver", "ok"): {"consumer": _STR, "seq": _INT, "hash": _STR},
    **{("ack", type_): {"consumer": _STR, "seq": _INT} for type_ in EVENT_TYPES},
    ("purge", "ok"): {"stream": _STR, "seq": _INT},
}
_NAMED_OPS = frozenset({"stream_create", "stream_delete", "consumer_create", "consumer_delete"})


class HistoryFormatError(ValueError):
    """A history file is missing or a line in it is malformed; the message names the file and line."""


def replica_file(node: str, stream: str) -> str:
    return f"replica_{node}_{stream}.jsonl"


def state_file(node: str) -> str:
    return f"state_{node}.json"


# --- Records --------------------------------------------------------------------------------------


@attrs.frozen
class Event:
    """One line of history.jsonl. `fields` is the whole decoded object; `line` its 1-based line number."""

    t: float
    type: str
    f: str
    process: str
    node: str | None
    line: int
    fields: Mapping[str, Any]

    @property
    def stream(self) -> str | None:
        return self.fields.get("stream")

    @property
    def value(self) -> str | None:
        return self.fields.get("value")

    @property
    def seq(self) -> int | None:
        return self.fields.get("seq")

    @property
    def hash(self) -> str | None:
        return self.fields.get("hash")

    @property
    def consumer(self) -> str | None:
        return self.fields.get("consumer")

    @property
    def name(self) -> str | None:
        return self.fields.get("name")


@attrs.frozen
class Fault:
    t: float
    kind: str
    phase: str
    nodes: tuple[str, ...]
    detail: Mapping[str, Any]


@attrs.frozen
class StoredMessage:
    """One message of one node's local store, as read back in the final phase."""

    seq: int
    value: str | None
    hash: str | None
    subject: str | None
    damaged: bool = False  # the node listed the seq but could not read it back intact


@attrs.frozen
class Replica:
    """One node's local copy of one stream; `error` set (and `messages` empty) when it could not be read."""

    node: str
    stream: str
    messages: tuple[StoredMessage, ...]
    error: str | None = None


@attrs.frozen
class Final:
    """The final/ directory: what the harness saw after healing."""

    nodes: tuple[str, ...]
    corrupted: tuple[str, ...]
    stream: str
    consumers: tuple[str, ...]
    scratch_deleted: tuple[str, ...]
    meta_expected_streams: tuple[str, ...]
    states: Mapping[str, Mapping[str, Any]]  # node -> state_<node>.json (missing file: {"errors": [...]})
    replicas: Mapping[str, Replica]  # node -> replica of the main stream
    probe: Mapping[str, Any] | None  # None when probe.json is absent


@attrs.frozen
class History:
    events: tuple[Event, ...]
    faults: tuple[Fault, ...]
    final: Final


# --- Writer ---------------------------------------------------------------------------------------


class HistoryWriter:
    """Appends history and fault lines to a history directory; safe from threads and asyncio tasks.

    Each call takes one lock, writes one line and flushes it (invariant 1). `fault` matches the harness's
    `faults_log(kind, phase, nodes, detail)` callable, so `ChaosCluster(faults_log=writer.fault)` works.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        (self.directory / FINAL_DIR).mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._history = open(self.directory / HISTORY_FILE, "a", encoding="utf-8")
        self._faults = open(self.directory / FAULTS_FILE, "a", encoding="utf-8")

    def _append(self, handle: Any, record: Mapping[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"), sort_keys=False) + "\n"
        with self._lock:
            handle.write(line)
            handle.flush()

    def event(self, type_: str, f: str, process: str, node: str | None, **fields: Any) -> None:
        if type_ not in EVENT_TYPES:
            raise ValueError(f"event type {type_!r} is not one of {sorted(EVENT_TYPES)}")
        record = {"t": time.monotonic(), "type": type_, "f": f, "process": process, "node": node}
        record.update(fields)
        self._append(self._history, record)

    def invoke(self, f: str, process: str, node: str | None, **fields: Any) -> None:
        self.event("invoke", f, process, node, **fields)

    def ok(self, f: str, process: str, node: str | None, **fields: Any) -> None:
        self.event("ok", f, process, node, **fields)

    def fail(self, f: str, process: str, node: str | None, **fields: Any) -> None:
        self.event("fail", f, process, node, **fields)

    def info(self, f: str, process: str, node: str | None, **fields: Any) -> None:
        self.event("info", f, process, node, **fields)

    def fault(self, kind: str, phase: str, nodes: Any, detail: Mapping[str, Any] | None = None) -> None:
        if phase not in FAULT_PHASES:
            raise ValueError(f"fault phase {phase!r} is not one of {sorted(FAULT_PHASES)}")
        record = {"t": time.monotonic(), "kind": kind, "phase": phase, "nodes": list(nodes),
                  "detail": dict(detail or {})}
        self._append(self._faults, record)

    def close(self) -> None:
        with self._lock:
            self._history.close()
            self._faults.close()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _final_dir(directory: str | os.PathLike[str]) -> Path:
    final = Path(directory) / FINAL_DIR
    final.mkdir(parents=True, exist_ok=True)
    return final


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def write_final_nodes(directory: str | os.PathLike[str], *, nodes: list[str], stream: str,
                      consumers: list[str], corrupted: list[str] = (), scratch_deleted: list[str] = (),
                      meta_expected_streams: list[str] = ()) -> None:  # type: ignore[assignment]
    _write_json(_final_dir(directory) / NODES_FILE, {
        "nodes": list(nodes), "corrupted": list(corrupted), "stream": stream,
        "consumers": list(consumers), "scratch_deleted": list(scratch_deleted),
        "meta_expected": {"streams": list(meta_expected_streams)},
    })


def write_final_replica(directory: str | os.PathLike[str], node: str, stream: str,
                        messages: list[Mapping[str, Any]] | None, error: str | None = None) -> None:
    """One node's local store: `messages` as dicts with seq/value/hash/subject, or `error` alone."""
    rows = [{"error": error}] if error is not None else [
        {"seq": m["seq"], "value": m.get("value"), "hash": m.get("hash"), "subject": m.get("subject"),
         **({"damaged": True} if m.get("damaged") else {})}
        for m in messages or ()]
    text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows)
    (_final_dir(directory) / replica_file(node, stream)).write_text(text, encoding="utf-8")


def write_final_state(directory: str | os.PathLike[str], node: str, state: Mapping[str, Any]) -> None:
    _write_json(_final_dir(directory) / state_file(node), dict(state))


def write_final_probe(directory: str | os.PathLike[str], probe: Mapping[str, Any]) -> None:
    _write_json(_final_dir(directory) / PROBE_FILE, dict(probe))


# --- Readers --------------------------------------------------------------------------------------


def _json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    if not path.exists():
        raise HistoryFormatError(f"{path}: missing")
    with open(path, encoding="utf-8") as handle:
        for number, text in enumerate(handle, 1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except ValueError as exc:
                raise HistoryFormatError(f"{path}:{number}: not JSON ({exc})") from None
            if not isinstance(obj, dict):
                raise HistoryFormatError(f"{path}:{number}: not a JSON object")
            yield number, obj


def _bad(path: Path, number: int, why: str) -> HistoryFormatError:
    return HistoryFormatError(f"{path}:{number}: {why}")


def _check_event(path: Path, number: int, obj: dict[str, Any]) -> Event:
    t, type_, f, process = obj.get("t"), obj.get("type"), obj.get("f"), obj.get("process")
    if not isinstance(t, (int, float)) or isinstance(t, bool):
        raise _bad(path, number, f"'t' must be a number, got {t!r}")
    if type_ not in EVENT_TYPES:
        raise _bad(path, number, f"'type' must be one of {sorted(EVENT_TYPES)}, got {type_!r}")
    if not isinstance(f, str) or not isinstance(process, str):
        raise _bad(path, number, "'f' and 'process' must be strings")
    node = obj.get("node")
    if node is not None and not isinstance(node, str):
        raise _bad(path, number, f"'node' must be a string or null, got {node!r}")
    required = _REQUIRED.get((f, type_))
    if required is None and f in _NAMED_OPS:
        required = {"name": _STR}
    if required is None and f in ("deliver", "purge"):
        raise _bad(path, number, f"f={f!r} events must have type 'ok', got {type_!r}")
    for key, kinds in (required or {}).items():
        got = obj.get(key)
        if not isinstance(got, kinds) or isinstance(got, bool):
            raise _bad(path, number, f"f={f!r} type={type_!r} needs {key!r} ({kinds[0].__name__}), "
                                     f"got {got!r}")
    return Event(float(t), type_, f, process, node, number, obj)


def read_events(directory: str | os.PathLike[str]) -> tuple[Event, ...]:
    path = Path(directory) / HISTORY_FILE
    return tuple(_check_event(path, number, obj) for number, obj in _json_lines(path))


def read_faults(directory: str | os.PathLike[str]) -> tuple[Fault, ...]:
    """faults.jsonl; an absent file means no faults were injected."""
    path = Path(directory) / FAULTS_FILE
    if not path.exists():
        return ()
    faults = []
    for number, obj in _json_lines(path):
        t, kind, phase, nodes = obj.get("t"), obj.get("kind"), obj.get("phase"), obj.get("nodes", [])
        if not isinstance(t, (int, float)) or not isinstance(kind, str) or phase not in FAULT_PHASES:
            raise _bad(path, number, "needs 't' (number), 'kind' (string), 'phase' (start|end|instant)")
        if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
            raise _bad(path, number, "'nodes' must be a list of strings")
        detail = obj.get("detail") or {}
        if not isinstance(detail, dict):
            raise _bad(path, number, "'detail' must be an object")
        faults.append(Fault(float(t), kind, phase, tuple(nodes), detail))
    return tuple(faults)


def read_replica(directory: str | os.PathLike[str], node: str, stream: str) -> Replica:
    """One node's store dump; a missing file reads as an unreadable replica, not as an empty one."""
    path = Path(directory) / FINAL_DIR / replica_file(node, stream)
    if not path.exists():
        return Replica(node, stream, (), error=f"{path.name} missing")
    messages = []
    for number, obj in _json_lines(path):
        if "error" in obj:
            return Replica(node, stream, (), error=str(obj["error"]))
        seq, value, hash_ = obj.get("seq"), obj.get("value"), obj.get("hash")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
            raise _bad(path, number, f"'seq' must be a positive integer, got {seq!r}")
        if not (value is None or isinstance(value, str)) or not (hash_ is None or isinstance(hash_, str)):
            raise _bad(path, number, "'value' and 'hash' must be strings or null")
        messages.append(StoredMessage(seq, value, hash_, obj.get("subject"), bool(obj.get("damaged"))))
    return Replica(node, stream, tuple(messages))


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HistoryFormatError(f"{path}: missing") from None
    except ValueError as exc:
        raise HistoryFormatError(f"{path}: not JSON ({exc})") from None


def _str_list(path: Path, obj: Mapping[str, Any], key: str) -> tuple[str, ...]:
    got = obj.get(key, [])
    if not isinstance(got, list) or not all(isinstance(x, str) for x in got):
        raise HistoryFormatError(f"{path}: {key!r} must be a list of strings")
    return tuple(got)


def read_final(directory: str | os.PathLike[str]) -> Final:
    final_dir = Path(directory) / FINAL_DIR
    nodes_path = final_dir / NODES_FILE
    info = _read_json(nodes_path)
    if not isinstance(info, dict) or not isinstance(info.get("stream"), str):
        raise HistoryFormatError(f"{nodes_path}: must be an object with a 'stream' name")
    nodes = _str_list(nodes_path, info, "nodes")
    if not nodes:
        raise HistoryFormatError(f"{nodes_path}: 'nodes' is empty")
    stream = info["stream"]
    expected = info.get("meta_expected") or {}
    states: dict[str, Mapping[str, Any]] = {}
    for node in nodes:
        path = final_dir / state_file(node)
        state = _read_json(path) if path.exists() else {"errors": [f"{path.name} missing"]}
        if not isinstance(state, dict):
            raise HistoryFormatError(f"{path}: must be a JSON object")
        states[node] = state
    probe_path = final_dir / PROBE_FILE
    probe = _read_json(probe_path) if probe_path.exists() else None
    if probe is not None and not isinstance(probe, dict):
        raise HistoryFormatError(f"{probe_path}: must be a JSON object")
    return Final(
        nodes=nodes, corrupted=_str_list(nodes_path, info, "corrupted"), stream=stream,
        consumers=_str_list(nodes_path, info, "consumers"),
        scratch_deleted=_str_list(nodes_path, info, "scratch_deleted"),
        meta_expected_streams=_str_list(nodes_path, expected, "streams"),
        states=states, replicas={n: read_replica(directory, n, stream) for n in nodes}, probe=probe)


def read_history(directory: str | os.PathLike[str]) -> History:
    """The whole directory; raises `HistoryFormatError` when it cannot be judged."""
    return History(read_events(directory), read_faults(directory), read_final(directory))
