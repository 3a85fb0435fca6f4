"""`ChaosCluster`: N real `jsraft serve` processes on loopback, and the faults the chaos scenarios inject
into them from the outside — kill, restart (also a kill during startup replay), pause/resume, a power cut
of one node or all at once on the shadow disk, wall clock skew — each recorded through `faults_log`.

Method: ports (client, cluster, monitor per node) are picked up front and kept across restarts, so peers
find a restarted node where they left it. Each node gets a JSON config file (`base_dir/configs/<name>.json`:
test mode, test hooks, its ports, its routes) and runs as `python -m jsraft serve --config FILE` — or
through the mutant launcher (`mutants.py`) when `mutant` is given — in its own process group
(`procs.NodeProcess`), logging to `base_dir/logs/<name>.log`, its data in `base_dir/data/<name>`. With
`shadow_disk` the node runs with `JSRAFT_TEST_SHADOW_DISK=1`: its `OsDisk` (rooted at the data directory)
records what was fsynced, and `power_cut` rolls the directory back to that after the SIGKILL
(`jsraft.disk.power_cut`). State is read through each node's test hooks (`hooks.Hooks`), never through
a leader; every wait polls with a deadline.

Optional: `hosts` — one bind address per node (127.0.0.11.. in the network-namespace mode): client,
cluster and monitor listeners bind there, and so do the node's outgoing cluster connections (the node
binds them to its cluster host when its test hooks are on). `relay` — an object with
`peer_address(src, dst) -> "host:port"`: each node's route to a peer goes there instead (H7's relay).

Invariants:
  1. Every process started is in `procs.REGISTRY` until reaped; `stop()` (and the context manager's exit)
     stops them all; a crash of the harness or Ctrl-C kills them through the registry's exit hooks.
  2. A power cut kills every named node first (one tight SIGKILL loop) and only then rolls any data
     directory back, so no node runs while another's files are rewritten.
  3. Every loop here is bounded in time (`timeout_s`) and every fault is logged before `…` returns.

Imports: anything in jsraft (test kit); never imported by production code.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from jsraft.cli.local_cluster import free_ports as local_free_ports
from jsraft.disk import power_cut as disk_power_cut
from jsraft.testing.chaos.hooks import HookError, Hooks
from jsraft.testing.chaos.procs import NodeProcess, jsraft_argv, kill_groups

FaultsLog = Callable[[str, str, list[str], dict[str, Any]], None]
POLL_S = 0.1


def free_ports(hosts: Sequence[str]) -> list[int]:
    """One port per entry of `hosts`, all distinct, below the OS's ephemeral range (kept across restarts:
    see `cli.local_cluster.free_ports`)."""
    ports: list[int] = []
    for host in hosts:
        while True:
            port = local_free_ports(1, host)[0]
            if port not in ports:
                ports.append(port)
                break
    return ports


class ChaosCluster:
    def __init__(self, base_dir: str | os.PathLike[str], *, nodes: int = 3, seed: int = 0, shadow_disk: bool = True,
                 hosts: Sequence[str] | None = None, relay: Any = None, faults_log: FaultsLog | None = None,
                 env: dict[str, str] | None = None, node_args: Sequence[str] | None = None,
                 mutant: str | None = None, tick_ms: int = 50, election_ticks: int = 20,
                 config: dict[str, Any] | None = None) -> None:
        self.base_dir = os.path.abspath(os.fspath(base_dir))
        self.names = [f"n{i + 1}" for i in range(nodes)]
        if hosts is not None and len(hosts) != nodes:
            raise ValueError(f"hosts: {nodes} addresses needed, got {len(hosts)}")
        self.hosts = {name: hosts[i] if hosts else "127.0.0.1" for i, name in enumerate(self.names)}
        self.rng = random.Random(seed)
        self.shadow_disk = shadow_disk
        self.relay = relay
        self.faults_log = faults_log
        self.env = dict(env or {})
        self.node_args = list(node_args or [])
        self.mutant = mutant
        self.tick_ms, self.election_ticks = tick_ms, election_ticks
        self.extra_config = dict(config or {})
        kinds = ("client", "cluster", "monitor")
        ports = iter(free_ports([self.hosts[name] for name in self.names for _ in kinds]))
        self.ports = {name: {kind: next(ports) for kind in kinds} for name in self.names}
        self.procs: dict[str, NodeProcess | None] = {name: None for name in self.names}

    # --- Lifecycle ------------------------------------------------------------------------------------

    def __enter__(self) -> "ChaosCluster":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> "ChaosCluster":
        for directory in ("configs", "logs", "data"):
            os.makedirs(os.path.join(self.base_dir, directory), exist_ok=True)
        try:
            for name in self.names:
                self.start_node(name)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop every node cleanly (SIGTERM, SIGKILL after `timeout_s`); paused ones are resumed first."""
        for name, process in self.procs.items():
            if process is not None and process.alive():
                process.terminate(timeout_s)
            elif process is not None:
                process.wait(timeout_s)  # exited on its own: reap it (and close its log)
            self.procs[name] = None

    def config_for(self, name: str) -> dict[str, Any]:
        host, ports = self.hosts[name], self.ports[name]
        peers = {}
        for peer in self.names:
            if peer != name:
                peers[peer] = (self.relay.peer_address(name, peer) if self.relay is not None
                               else f"{self.hosts[peer]}:{self.ports[peer]['cluster']}")
        return {"name": name, "store_dir": self.data_dir(name), "cluster_name": "chaos",
                "cluster_host": host, "cluster_port": ports["cluster"], "client_host": host,
                "client_port": ports["client"], "monitor_host": host, "monitor_port": ports["monitor"],
                "peers": peers, "tick_ms": self.tick_ms, "election_ticks": self.election_ticks,
                "test_mode": True, "test_hooks": True, **self.extra_config}

    def argv(self, name: str) -> list[str]:
        path = os.path.join(self.base_dir, "configs", f"{name}.json")
        with open(path, "w") as handle:
            json.dump(self.config_for(name), handle, indent=2)
        # Every logger at info: a failed run is read from these logs (`serve` alone is quiet after startup).
        serve = ["serve", "--config", path, "--log-level", "info", *self.node_args]
        if self.mutant is not None:
            return jsraft_argv(self.mutant, *serve, module="jsraft.testing.chaos.mutants")
        return jsraft_argv(*serve)

    # --- Addresses and state ---------------------------------------------------------------------------

    def wipe(self, name: str) -> None:
        """Remove a stopped node's data directory (and its shadow-disk state): it starts as a new disk."""
        import shutil

        process = self.procs.get(name)
        if process is not None and process.alive():
            raise RuntimeError(f"wiping {name} while it runs")
        shutil.rmtree(self.data_dir(name), ignore_errors=True)
        shutil.rmtree(self.data_dir(name).rstrip("/") + ".shadow", ignore_errors=True)
        self._log("wipe", "instant", [name], {})

    def data_dir(self, name: str) -> str:
        return os.path.join(self.base_dir, "data", name)

    def log_path(self, name: str) -> str:
        return os.path.join(self.base_dir, "logs", f"{name}.log")

    def stream_dir(self, name: str, stream: str) -> str:
        """The stream replica's directory on `name` (its store, WAL, snapshots and config)."""
        return os.path.join(self.data_dir(name), "streams", stream)

    def store_dir(self, name: str, stream: str) -> str:
        """The stream's message store (FileStore blocks) on `name`."""
        return os.path.join(self.data_dir(name), "streams", stream, "msgs")

    def wal_dir(self, name: str, stream: str) -> str:
        """The stream group's Raft WAL, hard state and snapshots on `name`."""
        return os.path.join(self.data_dir(name), "streams", stream, "raft")

    def client_url(self, name: str) -> str:
        """The node's client URL, with the first configured user's credentials (or the token) in it when
        the nodes require authentication: every workload client connects through here."""
        auth = self.extra_config.get("client_auth") or {}
        user = (auth.get("users") or [{}])[0]
        credentials = f"{user['user']}:{user['password']}@" if user.get("password") else \
            f"{auth['token']}@" if auth.get("token") else ""
        return f"nats://{credentials}{self.hosts[name]}:{self.ports[name]['client']}"

    def monitor_url(self, name: str) -> str:
        return f"http://{self.hosts[name]}:{self.ports[name]['monitor']}"

    def hooks(self, name: str, timeout_s: float = 5.0) -> Hooks:
        return Hooks(self.monitor_url(name), timeout_s=timeout_s)

    def alive(self, name: str) -> bool:
        process = self.procs[name]
        return process is not None and process.alive()

    def paused(self, name: str) -> bool:
        process = self.procs[name]
        return process is not None and process.paused

    def _log(self, kind: str, phase: str, nodes: Iterable[str], detail: dict[str, Any] | None = None) -> None:
        if self.faults_log is not None:
            self.faults_log(kind, phase, list(nodes), detail or {})

    # --- Faults ----------------------------------------------------------------------------------------

    def start_node(self, name: str) -> NodeProcess:
        if self.alive(name):
            raise RuntimeError(f"{name} is already running")
        previous = self.procs[name]
        if previous is not None:
            previous.wait()  # it exited (killed, or on its own): reap it before its successor starts
        env = {**self.env, **({"JSRAFT_TEST_SHADOW_DISK": "1"} if self.shadow_disk else {})}
        process = NodeProcess(name, self.argv(name), self.log_path(name), env=env)
        self.procs[name] = process
        return process

    def kill(self, name: str) -> None:
        """SIGKILL the node's process group (a crash: nothing more is written)."""
        process = self.procs[name]
        if process is not None:
            process.kill()
        self._log("kill", "instant", [name], {"pid": process.pid if process else None})

    def restart(self, name: str, delay_s: float = 0.0) -> None:
        """Kill (if running), wait `delay_s` (the fault's own down time), start again."""
        if self.alive(name):
            self.kill(name)
        if delay_s > 0:
            time.sleep(delay_s)
        self.start_node(name)
        self._log("restart", "instant", [name], {"delay_s": delay_s})

    def kill_during_replay(self, name: str, delay_max_s: float = 0.5) -> float:
        """Restart `name`, then kill it again after a random 0..`delay_max_s` (mid startup replay), and
        leave it down; the delay used."""
        delay = self.rng.uniform(0.0, delay_max_s)
        if self.alive(name):
            self.kill(name)
        self.start_node(name)
        time.sleep(delay)
        process = self.procs[name]
        if process is not None:
            process.kill()
        self._log("kill", "instant", [name], {"during_replay": True, "after_s": round(delay, 3)})
        return delay

    def pause(self, name: str) -> None:
        process = self.procs[name]
        if process is not None:
            process.pause()
        self._log("pause", "start", [name])

    def resume(self, name: str) -> None:
        process = self.procs[name]
        if process is not None:
            process.resume()
        self._log("pause", "end", [name])

    def power_cut(self, names: Sequence[str], mode: str = "drop", seed: int | None = None) -> dict[str, Any]:
        """Kill every node in `names` at the same instant, then roll each data directory back to what it
        had fsynced (invariant 2). Leaves them down; `start_node`/`restart` brings them back."""
        if not self.shadow_disk:
            raise RuntimeError("power_cut needs shadow_disk=True (the nodes must record what is durable)")
        seed = self.rng.randrange(1 << 30) if seed is None else seed
        kill_groups([p for p in (self.procs[name] for name in names) if p is not None and p.alive()])
        changes = {name: disk_power_cut(self.data_dir(name), mode, seed + i) for i, name in enumerate(names)}
        detail = {"mode": mode, "seed": seed, "changes": changes}
        self._log("power_cut", "instant", names, detail)
        return detail

    def set_clock(self, name: str, offset_s: float | None = None, rate: float | None = None, *,
                  log: bool = True) -> dict[str, Any]:
        """Skew the node's wall clock (its test hooks' `SkewableClock`); `log=False` for a strobe's steps."""
        answer = self.hooks(name).set_clock(offset_s=offset_s, rate=rate)
        if log:
            self._log("clock", "instant", [name], {"offset_s": offset_s, "rate": rate})
        return answer

    def stream_stepdown(self, stream: str, timeout_s: float = 10.0) -> dict[str, Any]:
        """Ask the stream's leader to step down (`$JS.API.STREAM.LEADER.STEPDOWN.<stream>`, sent to any
        running node: the request is routed to the leader). Blocking (nats-py in its own asyncio loop)."""
        import nats  # the harness's other users need no NATS client

        target = next((n for n in self.names if self.alive(n) and not self.paused(n)), None)
        if target is None:
            raise RuntimeError("no running node to send the stepdown to")

        async def request() -> dict[str, Any]:
            nc = await nats.connect(self.client_url(target), connect_timeout=timeout_s, allow_reconnect=False)
            try:
                msg = await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", b"", timeout=timeout_s)
                return json.loads(msg.data)
            finally:
                await nc.close()

        answer = asyncio.run(request())
        self._log("stepdown", "instant", [target], {"stream": stream, "answer": answer})
        return answer

    # --- Waiting and reading ---------------------------------------------------------------------------

    def _poll(self, name: str, what: Callable[[Hooks], Any]) -> Any:
        """`what(hooks)` for a running, unpaused node; None if it is down, paused or does not answer."""
        if not self.alive(name) or self.paused(name):
            return None
        try:
            return what(self.hooks(name, timeout_s=2.0))
        except HookError:
            return None

    def meta_leader(self) -> str | None:
        """The meta leader, if a running node says it leads and every other running node that knows a
        leader names the same one."""
        states = {name: self._poll(name, lambda h: h.raft_state("meta")) for name in self.names}
        leaders = {state["leader"] for state in states.values() if state is not None and state["leader"]}
        if len(leaders) != 1:
            return None
        leader = leaders.pop()
        state = states.get(leader)
        return leader if state is not None and state["role"] == "leader" else None

    def stream_leader(self, stream: str) -> str | None:
        """The stream's leader, on the same terms as `meta_leader`."""
        states = {name: self._poll(name, lambda h: h.replica_state(stream)) for name in self.names}
        leaders = {state["leader"] for state in states.values() if state is not None and state["leader"]}
        if len(leaders) != 1:
            return None
        leader = leaders.pop()
        state = states.get(leader)
        return leader if state is not None and state["role"] == "leader" else None

    def running(self) -> list[str]:
        """The nodes whose process runs and is not paused."""
        return [name for name in self.names if self.alive(name) and not self.paused(name)]

    def not_ready(self, streams: Iterable[str] | None = None) -> str | None:
        """Why the cluster is not ready (None when it is): every running node answers its hooks and names
        the same meta leader, which says it leads; the same for every stream the meta leader knows (or
        `streams`) among the running nodes its assignment places a replica on, each with it open."""
        running = self.running()
        states = {name: self._poll(name, lambda h: h.raft_state("meta")) for name in running}
        silent = [name for name, state in states.items() if state is None]
        if silent:
            return f"{','.join(silent)} do(es) not answer its test hooks"
        leaders = {state["leader"] for state in states.values()}
        leader = next(iter(leaders)) if len(leaders) == 1 else None
        if leader is None or leader not in states or states[leader]["role"] != "leader":
            return f"no agreed meta leader (running nodes name {sorted(map(str, leaders))})"
        meta = self._poll(leader, lambda h: h.meta_state())
        if meta is None:
            return f"meta leader {leader} does not answer meta_state"
        for stream in (list(meta["streams"]) if streams is None else streams):
            if stream not in meta["streams"]:
                return f"stream {stream} is not in the meta leader's state"
            peers = [name for name in running if name in meta["streams"][stream]["peers"]]
            replicas = {name: self._poll(name, lambda h: h.replica_state(stream)) for name in peers}
            if any(state is None for state in replicas.values()):
                return f"not every running replica of {stream} has it open"
            leaders = {state["leader"] for state in replicas.values()}
            leader = next(iter(leaders)) if len(leaders) == 1 else None
            if leader is None or leader not in replicas or replicas[leader]["role"] != "leader":
                return f"no agreed leader for stream {stream} (replicas name {sorted(map(str, leaders))})"
        return None

    def wait_ready(self, timeout_s: float = 60.0, streams: Iterable[str] | None = None) -> None:
        """Poll (bounded by `timeout_s`) until `not_ready` is None; `TimeoutError` with the last reason."""
        deadline = time.monotonic() + timeout_s
        streams = list(streams) if streams is not None else None
        while True:
            reason = self.not_ready(streams)
            if reason is None:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"cluster not ready after {timeout_s} s: {reason}")
            time.sleep(POLL_S)

    def wait_up(self, name: str, timeout_s: float = 30.0) -> None:
        """Poll until the node's monitor answers `/healthz` (the process serves; not that it is ready)."""
        deadline = time.monotonic() + timeout_s
        while not self.hooks(name, timeout_s=2.0).healthz():
            if not self.alive(name):
                raise RuntimeError(f"{name} exited while starting; see {self.log_path(name)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} not up after {timeout_s} s; see {self.log_path(name)}")
            time.sleep(POLL_S)
