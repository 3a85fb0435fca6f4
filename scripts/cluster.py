#!/usr/bin/env python3
"""Start and stop a local jsraft cluster of OS processes (one `jsraft serve` per node).

    python scripts/cluster.py up --nodes 3 --dir D [--port 4222] [--cluster-name local] [--timeout 30]
    python scripts/cluster.py status --dir D
    python scripts/cluster.py down --dir D [--timeout 15]

`up` starts nodes n1..nN as `python -m jsraft serve` with client ports P, P+1, ... (default P = 4222),
cluster ports P+2000, ... and monitoring ports P+4000, ... (so 4222/6222/8222, nats-server's defaults, for
the first node), data in D/<name> and logs in D/<name>.log. It records the processes in D/cluster.json,
waits (with a deadline) until every node's `/jsz` names the same meta leader and its `/healthz` is 200, and
prints one line per node:

    n1 12345 nats://127.0.0.1:4222 http://127.0.0.1:8222

If the cluster does not come up in time, or a node exits, `up` stops what it started and exits 1.

`down` stops exactly the processes `up` recorded in D/cluster.json: a recorded pid is signalled only if
it still runs `jsraft serve` with that node's store directory (a pid reused by another program is left
alone). SIGTERM first (a clean stop: stores closed), SIGKILL for any still running after the deadline.

Exit status: 0 done, 1 failed (did not come up, or a process survived SIGKILL), 2 usage error (already
up, bad arguments). The NATS client port is reserved by each node but not served yet (a later issue).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

STATE_FILE = "cluster.json"
CLUSTER_OFFSET, MONITOR_OFFSET = 2000, 4000
POLL_S = 0.1


# --- Processes --------------------------------------------------------------------------------------------

def _cmdline(pid: int) -> list[str]:
    """The argv of `pid`, or [] if it is gone or a zombie (whose cmdline is empty)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return [arg.decode(errors="replace") for arg in handle.read().split(b"\0") if arg]
    except OSError:
        pass
    if os.path.isdir("/proc"):
        return []
    result = subprocess.run(["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True)
    return result.stdout.split()


def is_ours(pid: int, store_dir: str) -> bool:
    """Does `pid` run `jsraft serve` for `store_dir`? Only then may `down` signal it."""
    argv = _cmdline(pid)
    if "serve" not in argv or not any(arg == "jsraft" or arg.endswith("/jsraft") for arg in argv):
        return False
    return any(argv[i] in ("--store-dir", "-sd") and argv[i + 1] == store_dir for i in range(len(argv) - 1))


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except (OSError, IndexError):
        return True


def _signal(pid: int, store_dir: str, signum: int) -> bool:
    if not is_ours(pid, store_dir):
        return False
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return False
    return True


def stop_nodes(nodes: list[dict[str, Any]], timeout_s: float) -> list[dict[str, Any]]:
    """SIGTERM every recorded node still ours, SIGKILL after `timeout_s`; return the ones still alive."""
    signalled = [node for node in nodes if _signal(node["pid"], node["store_dir"], signal.SIGTERM)]
    for node in nodes:
        if node not in signalled:
            print(f"{node['name']}: pid {node['pid']} is not running jsraft serve for {node['store_dir']}: "
                  "left alone", file=sys.stderr)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(is_alive(node["pid"]) for node in signalled):
        time.sleep(POLL_S)
    stubborn = [node for node in signalled if is_alive(node["pid"])]
    for node in stubborn:
        print(f"{node['name']}: pid {node['pid']} still running after {timeout_s:g}s: SIGKILL", file=sys.stderr)
        _signal(node["pid"], node["store_dir"], signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(is_alive(node["pid"]) for node in stubborn):
        time.sleep(POLL_S)
    for node in signalled:
        if not is_alive(node["pid"]):
            print(f"{node['name']}: pid {node['pid']} stopped", file=sys.stderr)
    return [node for node in signalled if is_alive(node["pid"])]


# --- Monitoring ------------------------------------------------------------------------------------------

def get_json(url: str, timeout_s: float = 1.0) -> tuple[int, Any]:
    """`(status, body)` of a GET; `(0, None)` if nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        try:
            return error.code, json.loads(error.read())
        except ValueError:
            return error.code, None
    except (OSError, ValueError):
        return 0, None


def meta_leaders(nodes: list[dict[str, Any]]) -> dict[str, str | None]:
    leaders = {}
    for node in nodes:
        status, body = get_json(f"http://127.0.0.1:{node['monitor_port']}/jsz")
        leaders[node["name"]] = body["meta_cluster"]["leader"] if status == 200 and body else None
    return leaders


# --- Commands --------------------------------------------------------------------------------------------

def _state_path(directory: str) -> str:
    return os.path.join(directory, STATE_FILE)


def load_state(directory: str) -> dict[str, Any] | None:
    try:
        with open(_state_path(directory)) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None


def plan(count: int, directory: str, port: int) -> list[dict[str, Any]]:
    names = [f"n{i + 1}" for i in range(count)]
    return [{"name": name, "store_dir": os.path.join(directory, name), "log": os.path.join(directory, f"{name}.log"),
             "client_port": port + i, "cluster_port": port + CLUSTER_OFFSET + i,
             "monitor_port": port + MONITOR_OFFSET + i} for i, name in enumerate(names)]


def spawn(node: dict[str, Any], nodes: list[dict[str, Any]], args: argparse.Namespace) -> subprocess.Popen:
    routes = ",".join(f"{other['name']}=127.0.0.1:{other['cluster_port']}" for other in nodes if other is not node)
    argv = [args.python, "-m", "jsraft", "serve", "--name", node["name"], "--store-dir", node["store_dir"],
            "--client-port", str(node["client_port"]), "--cluster-port", str(node["cluster_port"]),
            "--monitor-port", str(node["monitor_port"]), "--cluster-name", args.cluster_name]
    if routes:
        argv += ["--routes", routes]
    with open(node["log"], "ab") as log:
        # A new session: the nodes outlive this script and a ^C in its terminal does not reach them.
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)


def _log_tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])
    except OSError:
        return ""


def wait_for_leader(nodes: list[dict[str, Any]], processes: dict[str, subprocess.Popen], timeout_s: float) -> str:
    """The meta leader every node's /jsz names, once every /healthz is 200; raises RuntimeError if a node
    exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    leaders: dict[str, str | None] = {}
    while time.monotonic() < deadline:
        for name, process in processes.items():
            if process.poll() is not None:
                node = next(n for n in nodes if n["name"] == name)
                raise RuntimeError(f"{name} exited with status {process.returncode}; its log ends:\n"
                                   f"{_log_tail(node['log'])}")
        leaders = meta_leaders(nodes)
        agreed = set(leaders.values())
        # Agreed on a leader, and every node ready and its replicas current (its /healthz says so).
        if len(agreed) == 1 and None not in agreed and all(
                get_json(f"http://127.0.0.1:{node['monitor_port']}/healthz")[0] == 200 for node in nodes):
            return agreed.pop()
        time.sleep(POLL_S)
    raise RuntimeError(f"no meta leader agreed within {timeout_s:g}s: {leaders}")


def cmd_up(args: argparse.Namespace) -> int:
    directory = os.path.abspath(args.dir)
    state = load_state(directory)
    if state is not None and any(is_ours(n["pid"], n["store_dir"]) for n in state["nodes"]):
        print(f"cluster.py: a cluster recorded in {directory} is still running; run down first", file=sys.stderr)
        return 2
    if args.nodes < 1 or not 1 <= args.port or args.port + MONITOR_OFFSET + args.nodes - 1 > 65535:
        print("cluster.py: --nodes must be >= 1 and every port (up to --port + 4000 + nodes) <= 65535",
              file=sys.stderr)
        return 2
    os.makedirs(directory, exist_ok=True)
    nodes = plan(args.nodes, directory, args.port)
    processes = {node["name"]: spawn(node, nodes, args) for node in nodes}
    for node in nodes:
        node["pid"] = processes[node["name"]].pid
    with open(_state_path(directory), "w") as handle:  # before waiting: `down` can clean up a failed start
        json.dump({"dir": directory, "cluster_name": args.cluster_name, "nodes": nodes}, handle, indent=2)
    try:
        leader = wait_for_leader(nodes, processes, args.timeout)
    except RuntimeError as error:
        print(f"cluster.py: the cluster did not come up: {error}", file=sys.stderr)
        stop_nodes(nodes, 10.0)
        os.remove(_state_path(directory))
        return 1
    for node in nodes:
        print(f"{node['name']} {node['pid']} nats://127.0.0.1:{node['client_port']} "
              f"http://127.0.0.1:{node['monitor_port']}", flush=True)
    print(f"meta leader: {leader}; logs in {directory}/<name>.log", file=sys.stderr)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    directory = os.path.abspath(args.dir)
    state = load_state(directory)
    if state is None:
        print(f"cluster.py: no cluster recorded in {directory} ({STATE_FILE} absent): nothing to stop",
              file=sys.stderr)
        return 0
    survivors = stop_nodes(state["nodes"], args.timeout)
    if survivors:
        print(f"cluster.py: still running: {[n['pid'] for n in survivors]}", file=sys.stderr)
        return 1
    os.remove(_state_path(directory))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    state = load_state(os.path.abspath(args.dir))
    if state is None:
        print(f"cluster.py: no cluster recorded in {args.dir}", file=sys.stderr)
        return 1
    leaders = meta_leaders(state["nodes"])
    healthy = True
    for node in state["nodes"]:
        status, _ = get_json(f"http://127.0.0.1:{node['monitor_port']}/healthz")
        healthy &= status == 200
        print(f"{node['name']} {node['pid']} {'running' if is_ours(node['pid'], node['store_dir']) else 'gone'} "
              f"healthz={status or 'no answer'} meta_leader={leaders[node['name']]}")
    return 0 if healthy else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cluster.py", description="a local jsraft cluster of OS processes")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start nodes n1..nN and wait for a meta leader")
    up.add_argument("--nodes", type=int, default=3)
    up.add_argument("--dir", required=True)
    up.add_argument("--port", type=int, default=4222, help="first client port (cluster +2000, monitor +4000)")
    up.add_argument("--cluster-name", default="local")
    up.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for a meta leader")
    up.add_argument("--python", default=sys.executable, help="the Python that has jsraft installed")
    up.set_defaults(func=cmd_up)
    down = sub.add_parser("down", help="stop the nodes recorded in DIR/cluster.json")
    down.add_argument("--dir", required=True)
    down.add_argument("--timeout", type=float, default=15.0, help="seconds between SIGTERM and SIGKILL")
    down.set_defaults(func=cmd_down)
    status = sub.add_parser("status", help="each recorded node's health and meta leader")
    status.add_argument("--dir", required=True)
    status.set_defaults(func=cmd_status)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
