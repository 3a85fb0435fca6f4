"""nats-py plumbing shared by the chaos workloads (`workloads.py`) and the final phase (`final.py`).

Owns: connections pinned to one node (`connect_pinned`), the classification of a client call's outcome
into the history's `ok` / `fail` / `info` (`classify`), one publish recorded as invoke + completion
(`publish_recorded`, used by W-pub and by the final phase's probes), the history recorder (`Recorder`,
over `HistoryWriter.event`), and the payload hash.

Invariants:
  1. A pinned client never talks to another node: its server pool is that node's URL only, and the
     reconnect handler always picks it (jsraft's INFO lists the other nodes in `connect_urls`, as
     nats-server's does, and nats-py adds them to the pool, but a discovered server is never chosen). Per-node behaviour is what the history shows.
  2. `fail` means *definitely not stored / not carried out*: only no-responders (no subscription took the
     request, so nothing routed it) and the err_codes in `PUBLISH_FAIL_CODES` (the server answers them
     only for a request refused before it entered any log: NoLeader 10008 — the router gave up on
     refusals, never on a timeout —, NotLeader 20101, ProposalDropped 20102, RpcRefused 20603, message
     too large 10054; for meta requests not 10008, see `META_FAIL_CODES`). Everything else — a timeout, a dropped connection, any other error — is `info`
     (unknown outcome): a wrong `fail` would make the checker call a stored message a phantom, a wrong
     `info` only weakens a check.
  3. Every invoke is followed by exactly one completion (`ok`, `fail` or `info`) for the same
     `process`, also when the call is cancelled (the completion is then `info` "cancelled").

Imports: anything (test code); never imported by production code.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

import nats
import nats.errors
import nats.js.errors

PUBLISH_TIMEOUT_S = 2.0
RECONNECT_WAIT_S = 0.25
CONNECT_TRY_S = 5.0  # one first-connect try, nats-py's own retries included
PUBLISH_FAIL_CODES = frozenset({10008, 20101, 20102, 20603, 10054})
# Meta requests: not 10008, which the meta service also answers for a change it proposed but has not seen
# applied ("was proposed but has not applied yet", "was created but is not visible here yet"); plus the
# refusals the meta leader makes before proposing (meta.leader invariant 1): name in use, not found, no
# suitable peers for placement.
META_FAIL_CODES = (PUBLISH_FAIL_CODES - {10008}) | {10058, 10059, 10014, 10013, 10148, 10005}


def payload_hash(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()[:16]


class Recorder:
    """Hands each event to `HistoryWriter.event` (chaos/history.py), which stamps `t` (time.monotonic)
    and appends one flushed line; the workloads' one way into history.jsonl."""

    def __init__(self, writer: Any) -> None:
        self.writer = writer

    def __call__(self, type_: str, f: str, process: str, node: str, **fields: Any) -> None:
        self.writer.event(type_, f, process, node, **fields)


# --- Outcomes -------------------------------------------------------------------------------------------

def classify(error: BaseException, fail_codes: frozenset[int] = PUBLISH_FAIL_CODES) -> tuple[str, dict[str, Any]]:
    """(`"fail"`, {"code"}) when `error` means the request was definitely not carried out (invariant 2),
    else (`"info"`, {"error"})."""
    if isinstance(error, (nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError)):
        return "fail", {"code": "no_responders"}
    if isinstance(error, nats.js.errors.APIError):
        if error.err_code is None and isinstance(error, nats.js.errors.ServiceUnavailableError):
            return "fail", {"code": "no_responders"}  # nats-py's name for no responders on $JS.API
        if error.err_code in fail_codes:
            return "fail", {"code": str(error.err_code)}
        return "info", {"error": f"api {error.code} {error.err_code}: {error.description}"}
    if isinstance(error, (asyncio.TimeoutError, nats.errors.TimeoutError)):
        return "info", {"error": "timeout"}
    if isinstance(error, asyncio.CancelledError):
        return "info", {"error": "cancelled"}
    if isinstance(error, (nats.errors.ConnectionClosedError, nats.errors.ConnectionReconnectingError,
                          nats.errors.StaleConnectionError, nats.errors.OutboundBufferLimitError,
                          ConnectionError, OSError)):
        return "info", {"error": f"disconnect: {type(error).__name__}"}
    return "info", {"error": f"{type(error).__name__}: {error}"[:300]}


# --- Connections ----------------------------------------------------------------------------------------

async def connect_pinned(url: str, name: str, *, deadline: float | None = None) -> Any:
    """A nats-py connection to `url` only (invariant 1). Retries the first connect (the node may be down)
    until `deadline` (time.monotonic), then raises the last error. Each try is bounded here: with
    `allow_reconnect` nats-py retries a refused *first* connect for ever itself (`_select_next_server`),
    which hung a chaos run whose nodes had crashed at start."""
    netloc = urlparse(url).netloc

    def pin(servers: list[Any], info: Mapping[str, Any]) -> tuple[Any, float]:
        chosen = next((s for s in servers if s.uri.netloc == netloc), None)
        return chosen, RECONNECT_WAIT_S

    async def quiet(error: Exception) -> None:  # disconnects are expected under faults
        return None

    while True:
        try:
            return await asyncio.wait_for(nats.connect(
                servers=[url], name=name, dont_randomize=True, allow_reconnect=True,
                max_reconnect_attempts=-1, reconnect_time_wait=RECONNECT_WAIT_S, connect_timeout=2,
                ping_interval=2, max_outstanding_pings=2, reconnect_to_server_handler=pin, error_cb=quiet),
                CONNECT_TRY_S)
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception:
            if deadline is not None and time.monotonic() >= deadline:
                raise
            await asyncio.sleep(RECONNECT_WAIT_S)


async def close_quietly(nc: Any) -> None:
    if nc is None:
        return
    try:
        await asyncio.wait_for(nc.close(), 5)
    except Exception:
        pass


# --- One recorded publish -------------------------------------------------------------------------------

async def publish_recorded(record: Recorder, js: Any, *, process: str, node: str, stream: str, subject: str,
                           value: str, payload: bytes, retry: int = 0,
                           timeout_s: float = PUBLISH_TIMEOUT_S) -> tuple[str, int | None]:
    """Publish with `Nats-Msg-Id: value`, recording invoke and its completion; (type, seq or None)."""
    base = {"stream": stream, "value": value}
    extra = {"retry": retry} if retry else {}
    record("invoke", "publish", process, node, **base, hash=payload_hash(payload), size=len(payload),
           subject=subject, **extra)
    try:
        ack = await js.publish(subject, payload, timeout=timeout_s, headers={"Nats-Msg-Id": value})
    except BaseException as error:
        kind, fields = classify(error)
        record(kind, "publish", process, node, **base, **fields, **extra)
        if isinstance(error, (asyncio.CancelledError, KeyboardInterrupt)):
            raise
        return kind, None
    fields = {"seq": ack.seq, **({"duplicate": True} if ack.duplicate else {})}
    record("ok", "publish", process, node, **base, **fields, **extra)
    return "ok", ack.seq
