"""`Monitor`: the node's monitoring HTTP listener — `/healthz`, `/varz`, `/jsz`, `/connz`, `/metrics`
(layer L5).

Owns: a plain trio TCP listener speaking just enough HTTP/1.0 (one request per connection, `GET` and
`HEAD`, JSON bodies — Prometheus text for `/metrics` —, `Connection: close`), and routing to the views,
whose bodies have nats-server's shapes (`monitor_views`, jsraft's own fields under `jsraft`):
  - `/healthz`: nats-server's `HealthStatus` and parameters: `?js-enabled-only` — 200 while the node runs
    (`mark_running` .. `mark_stopped`), the liveness the harnesses poll; `?js-server-only` — and it is
    ready (`readiness`); by default also every replica it holds has a leader and is current. 503 with
    the reason otherwise, and once the meta leader told this server it was removed (`meta_members`).
  - `/varz`: nats-server's `Varz` (server id and name, ports, limits, the `jetstream` block with its
    config, stats and API level, connections, message and byte counts, memory, cpu, uptime) — served
    only once the node has been ready (`readiness`); before that 503 with the reason.
  - `/jsz`: nats-server's `JSInfo` (`?accounts`, `?streams`, `?consumers`, `?config` add the account,
    stream and consumer details) with `meta_cluster`; under `jsraft.streams` every stream in the meta
    state with its placement, its leader as this node sees it, and this node's replica's state tuple
    (first_seq, last_seq, messages, bytes, digest), health and applied index. 503 while not running.
  - `/connz`: nats-server's `Connz`: this node's client connections, paged by `?offset` and `?limit`.
  - `/metrics`: Prometheus text format from the node's own registry (`metrics.node_registry`).
  - `/test/...`: the chaos test hooks (`test_hooks`), routed there only when the node runs with
    `test_hooks` on (else 404); `POST` is taken there only (for `/test/clock`).

Invariants:
  1. Nothing a client sends can crash or stall the node: the request head is bounded
     (`REQUEST_HEAD_BYTES_MAX`, else 431) and timed (`REQUEST_TIMEOUT_S`, else 408), a malformed request
     is answered 400, an unknown path 404, another method 405, concurrent connections are bounded
     (`CONNECTIONS_MAX`; beyond it a connection is closed at once), and any error while building a view
     is logged and answered 500.
  2. The monitor only reads node state; it never proposes, opens or closes anything (the one write, the
     test hooks' wall clock skew, exists only with the test hooks on).
  3. `/varz` answers 503 until the first time the node is seen ready, and 200 from then on: readiness is
     latched, so a meta election later on does not make the node's description disappear.
  4. With `monitor_token` every endpoint but `/healthz` answers 401 without `Authorization: Bearer
     <token>` (constant-time compare); with `monitor_tls` the port speaks HTTPS only; no view includes a
     secret. A monitor on a non-loopback address without a token is warned about at start.

Imports: stdlib, L0, trio, `server.nats.tls`, `server.groups.meta_service` (`META_GROUP`), ops siblings (it
reads the node only through `monitor_parts.MonitorParts`; must not import `server.node`). Reference:
nats-server monitoring endpoints (`/healthz`, `/varz`, `/jsz`, `/connz`); Prometheus exposition format;
DESIGN.md §10.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import time
import urllib.parse
from typing import Any

import trio

from jsraft.errors import JsraftError, naming_port
from jsraft.server.ops import monitor_views as views
from jsraft.server.groups.meta_service import META_GROUP
from jsraft.server.ops.metrics import CONTENT_TYPE, node_registry, render
from jsraft.server.ops.monitor_parts import MonitorParts
from jsraft.server.ops.monitor_views import format_uptime  # noqa: F401  (re-exported: its readers import it here)
from jsraft.server.ops.test_hooks import PREFIX as TEST_PREFIX, TestHooks
from jsraft.server.nats.tls import TlsContexts, handshake

log = logging.getLogger("jsraft.server.ops.monitor")

REQUEST_HEAD_BYTES_MAX = 8192
REQUEST_TIMEOUT_S = 5.0
CONNECTIONS_MAX = 64
# After answering, read and discard what the client still sends, this long and this much at most: closing
# a socket with unread input sends a reset, which can destroy the answer before the client reads it.
LINGER_S = 1.0
LINGER_BYTES_MAX = 1 << 20
_RECEIVE_BYTES = 4096
_REQUEST_LINE = re.compile(r"(?P<method>[A-Z]{1,16}) (?P<target>/[!-~]*) HTTP/(?P<version>1\.[01])")
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
            431: "Request Header Fields Too Large", 500: "Internal Server Error", 503: "Service Unavailable"}


ENDPOINTS = ("/healthz", "/varz", "/jsz", "/connz", "/metrics")


class Text:
    """A response body that is not JSON: bytes and their content type."""

    __slots__ = ("data", "content_type")

    def __init__(self, data: bytes, content_type: str) -> None:
        self.data = data
        self.content_type = content_type


Body = dict[str, Any] | Text


class HttpError(Exception):
    """A request the monitor refuses, with the status to answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def parse_request_head(head: bytes) -> tuple[str, str]:
    """`(method, path)` of an HTTP/1.x request head (query string dropped); `HttpError(400)` otherwise."""
    line = head.split(b"\n", 1)[0].rstrip(b"\r")
    try:
        text = line.decode("ascii")
    except UnicodeDecodeError:
        raise HttpError(400, "request line is not ASCII") from None
    match = _REQUEST_LINE.fullmatch(text)
    if match is None:
        raise HttpError(400, "malformed request line")
    path = match["target"].split("?", 1)[0].split("#", 1)[0]
    if len(path) > 1:
        path = path.rstrip("/") or "/"
    return match["method"], path


def parse_query(head: bytes) -> dict[str, str]:
    """The request target's query parameters (first value of each; `{}` when none or malformed)."""
    line = head.split(b"\n", 1)[0].rstrip(b"\r").decode("ascii", "replace")
    target = line.split(" ")[1] if line.count(" ") >= 2 else ""
    query = target.partition("?")[2].partition("#")[0]
    return {key: values[0] for key, values in urllib.parse.parse_qs(query, keep_blank_values=True).items()}


def render_response(status: int, body: Body | None, *, head_only: bool = False,
                    extra_headers: tuple[str, ...] = ()) -> bytes:
    if isinstance(body, Text):
        payload, content_type = body.data, body.content_type
    else:
        payload = (json.dumps(body, indent=2, sort_keys=False) + "\n").encode() if body is not None else b""
        content_type = "application/json"
    lines = [f"HTTP/1.0 {status} {_REASONS.get(status, 'Error')}", f"Content-Type: {content_type}",
             f"Content-Length: {len(payload)}", "Cache-Control: no-store", "Connection: close", *extra_headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (b"" if head_only else payload)


class Monitor:
    def __init__(self, parts: MonitorParts, host: str = "127.0.0.1", port: int = 0) -> None:
        self.parts = parts
        self.host, self.port = host, port
        self.address: tuple[str, int] | None = None  # the bound address, once listening
        self.running_since_s: float | None = None  # monotonic, while the node runs
        self.started_wall_s: float | None = None
        self.requests = 0
        self.refused = 0  # requests answered 4xx, and connections closed for being over the bound
        self.registry = node_registry(parts, running=lambda: self.running)  # this node's own (not global)
        self.ready_seen = False  # invariant 3
        self.http_requests: dict[str, int] = {}  # /varz `http_req_stats`
        self._limiter = trio.CapacityLimiter(CONNECTIONS_MAX)
        config = parts.config
        # `/test/` only with the node's test hooks on (test_hooks invariant 1).
        self.test_hooks = TestHooks(parts.hooks) if config.test_hooks else None
        self._token: str | None = config.monitor_token  # invariant 4
        self.tls = TlsContexts(config.monitor_tls, "monitor_tls") if config.monitor_tls else None

    def reload_tls(self) -> None:
        if self.tls is not None:
            self.tls.reload()

    # --- The node's lifecycle, as told by whoever runs it --------------------------------------------

    def mark_running(self) -> None:
        self.running_since_s = time.monotonic()
        self.started_wall_s = time.time()

    def mark_stopped(self) -> None:
        self.running_since_s = None

    @property
    def running(self) -> bool:
        return self.running_since_s is not None

    # --- Listening ------------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen, report `started(address)`, serve until cancelled."""
        with naming_port("monitoring", self.host, self.port):  # "address in use" alone does not say which
            listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        self.address = listeners[0].socket.getsockname()[:2]
        log.info("monitor for %s listening on http%s://%s:%d", self.parts.name, "s" * bool(self.tls), *self.address)
        if self._token is None and self.host not in ("127.0.0.1", "::1", "localhost"):
            log.warning("monitor on %s without a token: whoever reaches it reads the node's state", self.host)
        task_status.started(self.address)
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            self._limiter.acquire_nowait()
        except trio.WouldBlock:
            self.refused += 1
            await trio.aclose_forcefully(stream)
            return
        try:
            if self.tls is not None:
                stream = await handshake(stream, self.tls.server, server_side=True,  # type: ignore[assignment]
                                         timeout_s=self.tls.handshake_timeout_s)
            await self._serve_one(stream)
        except trio.TooSlowError:
            pass  # a TLS handshake that did not finish in time
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the client went away; nothing to answer
        except Exception:  # invariant 1: a bug in a view is logged, never raised into the node
            log.exception("monitor: error serving a request")
        finally:
            self._limiter.release()
            await trio.aclose_forcefully(stream)

    async def _serve_one(self, stream: trio.SocketStream) -> None:
        head = b""
        try:
            with trio.move_on_after(REQUEST_TIMEOUT_S) as timer:
                head = await self._read_head(stream)
        except HttpError as error:
            await self._send(stream, error.status, {"error": error.message})
            return
        if timer.cancelled_caught:
            await self._send(stream, 408, {"error": "request not received in time"})
            return
        if not head:
            return  # connected and closed without a request
        self.requests += 1
        try:
            method, path = parse_request_head(head)
            self._check_token(path, head)
            status, body = self.respond(method, path, parse_query(head))
            head_only = method == "HEAD"
            extra: tuple[str, ...] = ()
        except HttpError as error:
            status, body, head_only = error.status, {"error": error.message}, False
            extra = ("Allow: GET, HEAD",) if error.status == 405 else ()
        await self._send(stream, status, body, head_only=head_only, extra_headers=extra)

    async def _read_head(self, stream: trio.SocketStream) -> bytes:
        """The bytes up to the blank line ending the request head; `HttpError(431)` past the bound."""
        buffer = bytearray()
        while b"\r\n\r\n" not in buffer and b"\n\n" not in buffer:
            chunk = await stream.receive_some(_RECEIVE_BYTES)
            if not chunk:
                return bytes(buffer)  # EOF: a truncated head is parsed as is, and refused if malformed
            buffer += chunk
            if len(buffer) > REQUEST_HEAD_BYTES_MAX:
                raise HttpError(431, f"request head over {REQUEST_HEAD_BYTES_MAX} bytes")
        return bytes(buffer)

    async def _send(self, stream: trio.SocketStream, status: int, body: Body | None, **kwargs: Any) -> None:
        if 400 <= status < 500:
            self.refused += 1
        with trio.move_on_after(REQUEST_TIMEOUT_S):  # a client that never reads must not pin the task
            await stream.send_all(render_response(status, body, **kwargs))
            if isinstance(stream, trio.abc.HalfCloseableStream):  # not under TLS (invariant 4)
                await stream.send_eof()
        drained = 0
        with trio.move_on_after(LINGER_S):
            while drained <= LINGER_BYTES_MAX and (chunk := await stream.receive_some(_RECEIVE_BYTES * 16)):
                drained += len(chunk)

    def _check_token(self, path: str, head: bytes) -> None:
        """Invariant 4: `HttpError(401)` unless the request carries the monitor token."""
        if self._token is None or path == "/healthz":
            return
        for line in head.split(b"\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"authorization":
                scheme, _, given = value.strip().partition(b" ")
                if scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self._token.encode()):
                    return
        raise HttpError(401, "this monitor requires a token (Authorization: Bearer …)")

    # --- Routing and views -----------------------------------------------------------------------------

    def respond(self, method: str, path: str, query: dict[str, str] | None = None) -> tuple[int, Body]:
        """`(status, body)` for a parsed request; `HttpError` for a refused one (invariant 1). `POST` only
        for `/test/clock`, with the test hooks on."""
        if self.test_hooks is not None and path.startswith(TEST_PREFIX) and method in ("GET", "HEAD", "POST"):
            try:
                return self.test_hooks.respond(method, path, query or {})
            except Exception:
                log.exception("monitor: test hook %s failed", path)
                return 500, {"error": f"test hook {path} failed; see the node's log"}
        if method not in ("GET", "HEAD"):
            raise HttpError(405, f"method {method} not allowed")
        views = {"/": self.index, "/healthz": self.healthz, "/varz": self.varz, "/jsz": self.jsz,
                 "/connz": self.connz, "/metrics": self.metrics}
        view = views.get(path)
        if view is None:
            raise HttpError(404, f"no such endpoint: {path}")
        self.http_requests[path] = self.http_requests.get(path, 0) + 1
        try:
            return view(query or {})
        except Exception:
            log.exception("monitor: building %s failed", path)
            return 500, {"error": f"building {path} failed; see the node's log"}

    def index(self, query: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        return 200, {"server_name": self.parts.name, "endpoints": list(ENDPOINTS)}

    def healthz(self, query: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        return views.healthz(self.parts, self.running, query or {})

    def uptime_s(self) -> float:
        return time.monotonic() - self.running_since_s if self.running_since_s is not None else 0.0

    def varz(self, query: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        parts = self.parts
        if not self.ready_seen:  # invariant 3
            reason = parts.readiness.reason()
            if reason is not None:
                return 503, {"server_name": parts.name, "error": f"node is not ready: {reason}"}
            self.ready_seen = True
        http = (self.host, self.address[1] if self.address else self.port)
        body = views.varz(parts, http, self.started_wall_s, self.uptime_s(), self._peers(), self.http_requests)
        body["jsraft"]["running"] = self.running
        return 200, body

    def _peers(self) -> list[dict[str, Any]]:
        configured = self.parts.config.peers
        try:
            links = self.parts.peer_links()
        except JsraftError:
            links = {}
        return [{"name": name, "address": address,
                 "connected": bool(links[name].connected) if name in links else False}
                for name, address in sorted(configured.items())]

    def metrics(self, query: dict[str, str] | None = None) -> tuple[int, Text]:
        return 200, Text(render(self.registry), CONTENT_TYPE)

    def jsz(self, query: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        if not self.running:
            return 503, {"server_name": self.parts.name, "error": "node is not running"}
        try:
            self.parts.status(META_GROUP)
        except JsraftError:
            return 503, {"server_name": self.parts.name, "error": "the meta group is not open yet"}
        return 200, views.jsz(self.parts, query or {})

    def connz(self, query: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        return 200, views.connz(self.parts, query or {})
