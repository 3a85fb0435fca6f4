"""`jsraft cluster up|down|status`: a local cluster of `jsraft serve` processes (layer L6).

Owns: the port plan (node *i*, counted from 1, gets client port P+i−1, cluster port P+2000+i−1 and
monitoring port P+4000+i−1; P defaults to 4222, so the first node has nats-server's 4222/6222/8222), the
record of what `up` started (`DIR/cluster.json`), starting, waiting and stopping (processes in
`processes`). `scripts/cluster.py` is a thin wrapper around this command.

Invariants:
  1. `up` refuses before starting anything when a planned port is already held, naming every such port
     and its role (exit 1), or when a cluster recorded in DIR still runs (exit 2).
  2. `up` reports success only when every node it started is alive, is the process listening on its own
     client, cluster and monitoring ports, answers `/varz` with its own name and a connected link to every
     other node (the meta leader places a replicated stream only on peers it has a link to: without this
     an R3 create right after `up` could be refused with 10005 "peer offline"), and every node's `/jsz`
     names the same meta leader. Otherwise it stops what it started and exits 1.
  3. `down` signals only the processes `up` recorded that still run `jsraft serve` for their store
     directory (processes invariant 1).

Imports: stdlib, click, cli siblings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import click

from jsraft.cli.processes import (
    POLL_S, get_json, is_alive, is_ours, listens_on, meta_leaders, port_free, stop_nodes,
)

STATE_FILE = "cluster.json"
CLUSTER_OFFSET, MONITOR_OFFSET = 2000, 4000
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
ROLES = (("client_port", "client"), ("cluster_port", "cluster"), ("monitor_port", "monitoring"))


def _state_path(directory: str) -> str:
    return os.path.join(directory, STATE_FILE)


def load_state(directory: str) -> dict[str, Any] | None:
    try:
        with open(_state_path(directory)) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None


def plan(count: int, directory: str, port: int) -> list[dict[str, Any]]:
    """The nodes' names, directories and ports (the module's port plan)."""
    return [{"name": f"n{i + 1}", "store_dir": os.path.join(directory, f"n{i + 1}"),
             "log": os.path.join(directory, f"n{i + 1}.log"), "client_port": port + i,
             "cluster_port": port + CLUSTER_OFFSET + i, "monitor_port": port + MONITOR_OFFSET + i}
            for i in range(count)]


def held_ports(nodes: list[dict[str, Any]]) -> list[str]:
    """`"4222 (n1 client)"` for every planned port something already holds (invariant 1)."""
    return [f"{node[key]} ({node['name']} {role})" for node in nodes for key, role in ROLES
            if not port_free(node[key])]


def spawn(node: dict[str, Any], nodes: list[dict[str, Any]], python: str, cluster_name: str) -> subprocess.Popen:
    routes = ",".join(f"{other['name']}=127.0.0.1:{other['cluster_port']}" for other in nodes if other is not node)
    argv = [python, "-m", "jsraft", "serve", "--name", node["name"], "--store-dir", node["store_dir"],
            "--client-port", str(node["client_port"]), "--cluster-port", str(node["cluster_port"]),
            "--monitor-port", str(node["monitor_port"]), "--cluster-name", cluster_name]
    if routes:
        argv += ["--routes", routes]
    with open(node["log"], "ab") as log:
        # A new session: the nodes outlive this command and a ^C in its terminal does not reach them.
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)


def _log_tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])
    except OSError:
        return ""


def _impostors(nodes: list[dict[str, Any]]) -> list[str]:
    """What is wrong with any node's claim to its ports (invariant 2); empty when all is well."""
    wrong = []
    for node in nodes:
        for key, role in ROLES:
            if listens_on(node["pid"], node[key]) is False:
                wrong.append(f"{node['name']} (pid {node['pid']}) is not the process listening on its {role} "
                             f"port {node[key]}")
        status, varz = get_json(f"http://127.0.0.1:{node['monitor_port']}/varz")
        if status == 200 and isinstance(varz, dict) and varz.get("server_name") not in (None, node["name"]):
            wrong.append(f"port {node['monitor_port']} answers as {varz.get('server_name')!r}, not {node['name']}")
    return wrong


def _unlinked(nodes: list[dict[str, Any]]) -> list[str]:
    """Each node's missing links to the others, from its `/varz` (invariant 2); empty when fully linked."""
    missing = []
    for node in nodes:
        status, varz = get_json(f"http://127.0.0.1:{node['monitor_port']}/varz")
        if status != 200 or not isinstance(varz, dict):
            missing.append(f"{node['name']}'s /varz answered {status}")
            continue
        links = {peer["name"]: peer["connected"] for peer in varz["cluster"]["peers"]}
        missing += [f"{node['name']} has no link to {other['name']}" for other in nodes
                    if other is not node and not links.get(other["name"], False)]
    return missing


def wait_until_up(nodes: list[dict[str, Any]], processes: dict[str, subprocess.Popen], timeout_s: float) -> str:
    """The meta leader every node names, once invariant 2 holds; RuntimeError otherwise."""
    deadline = time.monotonic() + timeout_s
    leaders: dict[str, str | None] = {}
    problems: list[str] = []
    while time.monotonic() < deadline:
        for node in nodes:
            process = processes[node["name"]]
            if process.poll() is not None:
                raise RuntimeError(f"{node['name']} exited with status {process.returncode}; its log ends:\n"
                                   f"{_log_tail(node['log'])}")
        leaders = meta_leaders(nodes)
        agreed = set(leaders.values())
        # Agreed on a leader, and every node ready with its replicas current (its /healthz says so).
        if len(agreed) == 1 and None not in agreed and all(
                get_json(f"http://127.0.0.1:{node['monitor_port']}/healthz")[0] == 200 for node in nodes):
            problems = _impostors(nodes) or _unlinked(nodes)
            if not problems:
                return agreed.pop()
        time.sleep(POLL_S)
    raise RuntimeError("; ".join(problems) or f"no meta leader agreed within {timeout_s:g}s: {leaders}")


@click.group("cluster")
def cluster() -> None:
    """A local cluster of `jsraft serve` processes (start, stop, look)."""


@cluster.command("up")
@click.option("--nodes", type=click.IntRange(1), default=3, show_default=True, help="how many nodes (n1..nN)")
@click.option("--dir", "directory", required=True, metavar="DIR",
              help="where each node keeps its data (DIR/n<i>) and log (DIR/n<i>.log), and cluster.json")
@click.option("--port", type=int, default=4222, show_default=True,
              help="client port of n1; node i gets P+i-1, cluster port P+2000+i-1, monitoring P+4000+i-1")
@click.option("--cluster-name", default="local", show_default=True, help="the cluster's name")
@click.option("--timeout", type=float, default=30.0, show_default=True, help="seconds to wait for a meta leader")
@click.option("--python", default=sys.executable, show_default=True, help="the Python that has jsraft installed")
def up(nodes: int, directory: str, port: int, cluster_name: str, timeout: float, python: str) -> int:
    """Start nodes n1..nN and wait until they are up and agree on a meta leader; print one line per node."""
    directory = os.path.abspath(directory)
    state = load_state(directory)
    if state is not None and any(is_ours(n["pid"], n["store_dir"]) for n in state["nodes"]):
        click.echo(f"jsraft cluster up: a cluster recorded in {directory} is still running; run down first", err=True)
        return EXIT_USAGE
    if not 1 <= port or port + MONITOR_OFFSET + nodes - 1 > 65535:
        click.echo("jsraft cluster up: every port (up to --port + 4000 + nodes - 1) must be <= 65535", err=True)
        return EXIT_USAGE
    planned = plan(nodes, directory, port)
    held = held_ports(planned)
    if held:  # invariant 1
        click.echo(f"jsraft cluster up: port{'s' if len(held) > 1 else ''} already in use: {', '.join(held)}; "
                   "choose another --port or stop what holds them", err=True)
        return EXIT_FAILED
    os.makedirs(directory, exist_ok=True)
    processes = {node["name"]: spawn(node, planned, python, cluster_name) for node in planned}
    for node in planned:
        node["pid"] = processes[node["name"]].pid
    with open(_state_path(directory), "w") as handle:  # before waiting: `down` can clean up a failed start
        json.dump({"dir": directory, "cluster_name": cluster_name, "nodes": planned}, handle, indent=2)
    try:
        leader = wait_until_up(planned, processes, timeout)
    except RuntimeError as error:
        click.echo(f"jsraft cluster up: the cluster did not come up: {error}", err=True)
        stop_nodes(planned, 10.0)
        os.remove(_state_path(directory))
        return EXIT_FAILED
    for node in planned:
        click.echo(f"{node['name']} {node['pid']} nats://127.0.0.1:{node['client_port']} "
                   f"http://127.0.0.1:{node['monitor_port']}")
    click.echo(f"meta leader: {leader}; logs in {directory}/<name>.log", err=True)
    return EXIT_OK


@cluster.command("down")
@click.option("--dir", "directory", required=True, metavar="DIR", help="the directory given to `cluster up`")
@click.option("--timeout", type=float, default=15.0, show_default=True, help="seconds between SIGTERM and SIGKILL")
def down(directory: str, timeout: float) -> int:
    """Stop the nodes recorded in DIR/cluster.json (only while they still run jsraft serve for it)."""
    directory = os.path.abspath(directory)
    state = load_state(directory)
    if state is None:
        click.echo(f"jsraft cluster down: no cluster recorded in {directory} ({STATE_FILE} absent): nothing to stop",
                   err=True)
        return EXIT_OK
    survivors = stop_nodes(state["nodes"], timeout)
    if survivors:
        click.echo(f"jsraft cluster down: still running: {[n['pid'] for n in survivors]}", err=True)
        return EXIT_FAILED
    os.remove(_state_path(directory))
    return EXIT_OK


@cluster.command("status")
@click.option("--dir", "directory", required=True, metavar="DIR", help="the directory given to `cluster up`")
def status(directory: str) -> int:
    """Each recorded node: running or gone, its /healthz, the meta leader it names, whether it holds its port."""
    state = load_state(os.path.abspath(directory))
    if state is None:
        click.echo(f"jsraft cluster status: no cluster recorded in {directory}", err=True)
        return EXIT_FAILED
    leaders = meta_leaders(state["nodes"])
    healthy = True
    for node in state["nodes"]:
        ours = is_ours(node["pid"], node["store_dir"]) and is_alive(node["pid"])
        code, _ = get_json(f"http://127.0.0.1:{node['monitor_port']}/healthz")
        # A /healthz answer from a process that is not ours says nothing about our node.
        holds = ours and listens_on(node["pid"], node["monitor_port"]) is not False
        healthy &= ours and holds and code == 200
        answer = (code or "no answer") if holds else f"{code or 'no answer'} (not from this node)"
        click.echo(f"{node['name']} {node['pid']} {'running' if ours else 'gone'} healthz={answer} "
                   f"meta_leader={leaders[node['name']] if holds else None}")
    return EXIT_OK if healthy else EXIT_FAILED
