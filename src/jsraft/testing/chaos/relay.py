"""`Relay`: a userspace TCP relay on every node-to-node link, for partitions, one-way loss and delays.

Owns: one listening socket on `host` per ordered node pair `(src, dst)`; src's `--routes` entry for dst is
`relay.peer_address(src, dst)`, and each connection accepted there is forwarded to dst's real cluster
address (`set_target(dst, "host:port")`). A connection carries two directions: the bytes src sends
travel the directed link `(src, dst)`, dst's answers travel `(dst, src)`. A cut or a delay applies to a
directed link, so to the src->dst bytes of *both* connections (the one src dialled, and the one dst
dialled through the `(dst, src)` listener). One plain thread runs a `poll` loop over non-blocking sockets.

Modes of a cut link (`net.LinkControl`):
  - "blackhole" (default): the relay stops reading that direction and holds what it had queued, so the
    sender's kernel buffers fill and its bytes go nowhere, as with dropped packets; the connection stays
    open, and whatever is still buffered flows after the heal (like TCP retransmissions). A new connection
    whose forward direction is cut is accepted but not dialled onward until the heal (a lost SYN). If an
    endpoint closes a stalled connection, the relay closes (resets) both sides: a simplification, the
    other side's own idle timeout would have closed it anyway.
  - "reject": every connection carrying the link is reset, new ones are reset on accept.

Invariants:
  1. Bounded: at most `connections_max` relayed connections (more are reset on accept) and at most
     `buffer_bytes_max` queued bytes per direction of a connection (then the relay stops reading it).
  2. Order is kept per direction: a delayed chunk is never released before an earlier one
     (due times are made non-decreasing), jitter included.
  3. Every control call takes the loop's lock; once it returns, no byte crosses a link it cut (the loop
     checks the cut set under the same lock before each read and each write). Only the loop thread
     makes and closes relayed sockets (a reject's resets happen at its next turn), so a poll event never
     lands on a reused descriptor.
  4. `close()` stops the thread and closes every socket it made; the thread is a daemon, so a forgotten
     relay never keeps the process alive.

Imports: stdlib, jsraft.errors, chaos.net (test code).
"""

from __future__ import annotations

import collections
import errno
import logging
import random
import select
import socket
import struct
import threading
import time
from collections.abc import Sequence

from jsraft.errors import invariant
from jsraft.testing.chaos.net import FaultsLog, Link, LinkControl

log = logging.getLogger("jsraft.testing.chaos.relay")
CHUNK_BYTES = 65536
POLL_MAX_S = 0.2  # the loop wakes at least this often (a lost wake-up byte costs at most this long)
_IN, _OUT, _HUP = select.POLLIN, select.POLLOUT, select.POLLHUP | select.POLLERR | select.POLLRDHUP


def _abort(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), as a refused or reset connection looks to the peer."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class _Pipe:
    """One direction of one relayed connection: bytes read from `source` and written to `sink`."""
    __slots__ = ("source", "sink", "link", "chunks", "queued_bytes", "eof", "shut", "last_due")

    def __init__(self, source: socket.socket, sink: socket.socket, link: Link) -> None:
        self.source, self.sink, self.link = source, sink, link
        self.chunks: collections.deque[list] = collections.deque()  # [due_monotonic, bytes]
        self.queued_bytes = 0
        self.eof = False  # the source finished sending (FIN read)
        self.shut = False  # ... and that FIN was passed on to the sink
        self.last_due = 0.0


class _Conn:
    __slots__ = ("pair", "client", "upstream", "state", "pipes")

    def __init__(self, pair: Link, client: socket.socket) -> None:
        self.pair, self.client = pair, client
        self.upstream: socket.socket | None = None
        self.state = "held"  # held (not dialled onward yet) -> connecting -> open
        self.pipes: list[_Pipe] = []

    def sockets(self) -> list[socket.socket]:
        return [self.client] + ([self.upstream] if self.upstream is not None else [])


class Relay(LinkControl):
    """See the module docstring. `start()` runs the thread; use as a context manager or call `close()`."""

    def __init__(self, nodes: Sequence[str], *, host: str = "127.0.0.1", faults_log: FaultsLog | None = None,
                 default_mode: str = "blackhole", seed: int = 0, connections_max: int = 256,
                 buffer_bytes_max: int = 1 << 20) -> None:
        super().__init__(nodes, faults_log=faults_log, default_mode=default_mode)
        self.connections_max, self.buffer_bytes_max = connections_max, buffer_bytes_max
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._targets: dict[str, tuple[str, int]] = {}
        self._delays: dict[Link, tuple[float, float]] = {}  # link -> (delay_s, jitter_s)
        self._conns: list[_Conn] = []
        self._live_cut: dict[Link, str] = {}  # the loop's copy of the cut set, changed under the lock
        self.forwarded_bytes: dict[Link, int] = collections.Counter()
        self.accepted = 0
        self._warned: set[str] = set()  # nodes whose missing target was logged
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._listeners: dict[Link, socket.socket] = {}
        for pair in ((a, b) for a in self.nodes for b in self.nodes if a != b):
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((host, 0))
            listener.listen(64)
            listener.setblocking(False)
            self._listeners[pair] = listener
        self._by_fd = {listener.fileno(): pair for pair, listener in self._listeners.items()}

    # --- Setup ------------------------------------------------------------------------------------------------

    def peer_address(self, src: str, dst: str) -> str:
        """What `src` must dial to reach `dst` through the relay."""
        host, port = self._listeners[(src, dst)].getsockname()[:2]
        return f"{host}:{port}"

    def set_target(self, dst: str, address: str) -> None:
        """`dst`'s real cluster listener, "host:port"; connections accepted before this are reset."""
        invariant(dst in self.nodes, f"unknown node {dst!r}")
        host, _, port = address.rpartition(":")
        with self._lock:
            self._targets[dst] = (host, int(port))
        self._wake()

    def start(self) -> "Relay":
        invariant(self._thread is None, "a relay starts once")
        self._thread = threading.Thread(target=self._run, name="chaos-relay", daemon=True)
        self._thread.start()
        return self

    def __enter__(self) -> "Relay":
        if self._thread is None:
            self.start()
        return self

    def close(self) -> None:
        with self._lock:
            self._stopping = True
        self._wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        with self._lock:
            for conn in self._conns:
                for sock in conn.sockets():
                    _abort(sock)
            self._conns.clear()
            for listener in self._listeners.values():
                listener.close()
            self._wake_r.close()
            self._wake_w.close()

    # --- Faults -------------------------------------------------------------------------------------------------

    def _apply_many(self, changes: dict[Link, str | None]) -> None:
        # One lock hold for the whole change: the loop never sees half a partition.
        with self._lock:
            live = dict(self._live_cut)
            for link, mode in changes.items():
                if mode is None:
                    live.pop(link, None)
                else:
                    live[link] = mode
            self._live_cut = live  # reject-cut connections are reset by the loop, at its next turn
        self._wake()

    def delay(self, src: str, dst: str, ms: float, jitter_ms: float = 0.0) -> None:
        """Hold every chunk flowing src->dst for `ms` plus a uniform 0..`jitter_ms` (order kept); 0 ends it."""
        self._check_link((src, dst))
        invariant(ms >= 0 and jitter_ms >= 0, "delays are not negative")
        with self._lock:
            if ms or jitter_ms:
                self._delays[(src, dst)] = (ms / 1000.0, jitter_ms / 1000.0)
            else:
                self._delays.pop((src, dst), None)
        self._wake()
        if self.faults_log is not None:
            self.faults_log("delay", "start" if ms or jitter_ms else "end", [src, dst],
                            {"op": "delay", "links": [[src, dst]], "ms": ms, "jitter_ms": jitter_ms})

    def connection_count(self) -> int:
        with self._lock:
            return len(self._conns)

    # --- The loop (relay thread) ------------------------------------------------------------------------------

    def _mode(self, link: Link) -> str | None:
        return self._live_cut.get(link)

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass  # the buffer is full (a wake-up is pending anyway) or the relay is closed

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._stopping:
                    return
                poller, timeout_s = self._interest(time.monotonic())
            events = poller.poll(timeout_s * 1000.0)
            with self._lock:
                if self._stopping:
                    return
                self._handle(dict(events), time.monotonic())

    def _interest(self, now: float) -> tuple[select.poll, float]:
        masks: dict[int, int] = {self._wake_r.fileno(): _IN}
        for fd in self._by_fd:
            masks[fd] = _IN
        timeout_s = POLL_MAX_S
        for conn in self._conns:
            if conn.state == "connecting":
                masks[conn.upstream.fileno()] = masks.get(conn.upstream.fileno(), 0) | _OUT
                continue
            if conn.state == "held":
                masks[conn.client.fileno()] = masks.get(conn.client.fileno(), 0) | select.POLLRDHUP
                continue
            for pipe in conn.pipes:
                fd_in, fd_out = pipe.source.fileno(), pipe.sink.fileno()
                if self._mode(pipe.link) is not None:
                    masks[fd_in] = masks.get(fd_in, 0) | select.POLLRDHUP  # notice a close while stalled
                    continue
                if not pipe.eof and pipe.queued_bytes < self.buffer_bytes_max:
                    masks[fd_in] = masks.get(fd_in, 0) | _IN
                if pipe.chunks:
                    wait_s = pipe.chunks[0][0] - now
                    if wait_s <= 0:
                        masks[fd_out] = masks.get(fd_out, 0) | _OUT
                    else:
                        timeout_s = min(timeout_s, wait_s)
        poller = select.poll()
        for fd, mask in masks.items():
            poller.register(fd, mask)
        return poller, max(timeout_s, 0.0)

    def _handle(self, events: dict[int, int], now: float) -> None:
        if events.pop(self._wake_r.fileno(), 0):
            try:
                while self._wake_r.recv(4096):
                    pass
            except OSError:
                pass
        for fd, pair in self._by_fd.items():
            if events.get(fd, 0) & _IN:
                self._accept(pair)
        for conn in list(self._conns):
            try:
                self._step(conn, events, now)
            except OSError:
                self._drop(conn)
        # Sockets are made and closed only in this thread, and in a turn every accept comes before any
        # close, every dial after: an event of this turn never lands on a reused descriptor.
        self._reset_rejected()
        self._dial_held()

    def _accept(self, pair: Link) -> None:
        try:
            client, _ = self._listeners[pair].accept()
        except OSError:
            return
        self.accepted += 1
        client.setblocking(False)
        rejected = any(self._mode(link) == "reject" for link in (pair, pair[::-1]))
        if pair[1] not in self._targets and pair[1] not in self._warned:
            self._warned.add(pair[1])
            log.warning("relay: no target for %s yet (set_target): its connections are reset", pair[1])
        if rejected or pair[1] not in self._targets or len(self._conns) >= self.connections_max:
            _abort(client)  # invariant 1; a reject-cut or unknown target looks like a refused connection
            return
        self._conns.append(_Conn(pair, client))

    def _dial_held(self) -> None:
        """Dial onward every held connection whose forward direction is not cut (any more)."""
        for conn in list(self._conns):
            if conn.state != "held" or self._mode(conn.pair) is not None:
                continue
            upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            upstream.setblocking(False)
            conn.upstream, conn.state = upstream, "connecting"
            code = upstream.connect_ex(self._targets[conn.pair[1]])
            if code not in (0, errno.EINPROGRESS):
                self._drop(conn)

    def _step(self, conn: _Conn, events: dict[int, int], now: float) -> None:
        if conn.state == "held":
            if events.get(conn.client.fileno(), 0) & _HUP:
                self._drop(conn)
            return
        if conn.state == "connecting":
            if events.get(conn.upstream.fileno(), 0):
                if conn.upstream.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    self._drop(conn)  # the target refused: the client sees a reset
                    return
                conn.state = "open"
                src, dst = conn.pair
                conn.pipes = [_Pipe(conn.client, conn.upstream, (src, dst)),
                              _Pipe(conn.upstream, conn.client, (dst, src))]
            return
        if any(events.get(sock.fileno(), 0) & select.POLLERR for sock in conn.sockets()):
            self._drop(conn)  # a reset or error: pass it on (and never spin on an error poll keeps reporting)
            return
        for pipe in conn.pipes:
            if self._mode(pipe.link) is not None:
                if events.get(pipe.source.fileno(), 0) & _HUP:
                    self._drop(conn)  # closed while stalled: see the module docstring
                    return
                continue
            if events.get(pipe.source.fileno(), 0) & (_IN | _HUP) and not pipe.eof:
                self._read(pipe, now)
            if pipe.chunks and pipe.chunks[0][0] <= now and events.get(pipe.sink.fileno(), 0) & _OUT:
                self._write(pipe)
            if pipe.eof and not pipe.chunks and not pipe.shut:
                pipe.shut = True
                try:
                    pipe.sink.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
        if all(pipe.eof and not pipe.chunks for pipe in conn.pipes):
            self._drop(conn, reset=False)

    def _read(self, pipe: _Pipe, now: float) -> None:
        try:
            data = pipe.source.recv(CHUNK_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        if not data:
            pipe.eof = True
            return
        delay_s, jitter_s = self._delays.get(pipe.link, (0.0, 0.0))
        due = now + delay_s + (self._rng.uniform(0.0, jitter_s) if jitter_s else 0.0)
        pipe.last_due = max(pipe.last_due, due)  # invariant 2
        pipe.chunks.append([pipe.last_due, data])
        pipe.queued_bytes += len(data)

    def _write(self, pipe: _Pipe) -> None:
        chunk = pipe.chunks[0]
        try:
            sent = pipe.sink.send(chunk[1])
        except (BlockingIOError, InterruptedError):
            return
        self.forwarded_bytes[pipe.link] += sent
        pipe.queued_bytes -= sent
        if sent == len(chunk[1]):
            pipe.chunks.popleft()
        else:
            chunk[1] = chunk[1][sent:]

    def _reset_rejected(self) -> None:
        for conn in list(self._conns):
            if any(self._mode(link) == "reject" for link in (conn.pair, conn.pair[::-1])):
                self._drop(conn)

    def _drop(self, conn: _Conn, reset: bool = True) -> None:
        for sock in conn.sockets():
            if reset:
                _abort(sock)
            else:
                sock.close()
        if conn in self._conns:
            self._conns.remove(conn)
