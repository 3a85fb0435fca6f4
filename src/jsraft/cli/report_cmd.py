"""`jsraft stream report` and `jsraft server report`: the cluster at a glance (layer L6).

Owns: the stream report (every stream from the JetStream API: storage, consumers, messages, bytes,
deleted, replicas with the leader starred and lagging ones marked; then, when the nodes' monitoring
endpoints are known, each replica's own state tuple — first, last, messages, bytes, digest — its lag
behind the leader's last sequence, and its repair status), and the server report (each node's `/varz`
and `/jsz`: name, health, meta leader and term, streams it holds, and how many of them are not current).

The monitoring endpoints come from `--monitor URL,...` or from `--dir D` (the nodes `jsraft cluster up
--dir D` recorded).

Invariants:
  1. A replica whose node does not answer is reported as such ("no answer"), never left out: a missing
     replica is what an operator most needs to see.
  2. Lag is the leader's replica's last sequence minus this replica's, from the same report round.

Imports: stdlib, click, cli siblings.
"""

from __future__ import annotations

from typing import Any

import click

from jsraft.cli.cluster_cmd import load_state
from jsraft.cli.processes import get_json
from jsraft.cli.session import Output, Session, client_command
from jsraft.cli.stream_cmd import stream


def monitor_urls(monitor: str | None, directory: str | None) -> list[str]:
    if monitor:
        return [url.strip().rstrip("/") for url in monitor.split(",") if url.strip()]
    if directory:
        state = load_state(directory)
        if state is None:
            raise click.UsageError(f"no cluster recorded in {directory} (cluster.json absent)")
        return [f"http://127.0.0.1:{node['monitor_port']}" for node in state["nodes"]]
    return []


def _monitor_options(function: Any) -> Any:
    function = click.option("--dir", "directory", metavar="DIR",
                            help="read the nodes' monitoring ports from DIR/cluster.json (jsraft cluster up)")(function)
    return click.option("--monitor", metavar="URL[,URL...]",
                        help="the nodes' monitoring endpoints, e.g. http://127.0.0.1:8222")(function)


def jsz_streams(urls: list[str]) -> dict[str, dict[str, Any] | None]:
    """node URL -> its /jsz body (None: no answer), with `server_name` set (from /varz if /jsz lacks it)."""
    found: dict[str, dict[str, Any] | None] = {}
    for url in urls:
        code, body = get_json(f"{url}/jsz", timeout_s=2.0)
        if code != 200 or not isinstance(body, dict):
            found[url] = None
            continue
        if not body.get("server_name"):
            _, varz = get_json(f"{url}/varz", timeout_s=2.0)
            body["server_name"] = (varz or {}).get("server_name") or (body.get("meta_cluster") or {}).get("peer") or url
        found[url] = body
    return found


def stream_views(body: dict[str, Any]) -> list[dict[str, Any]]:
    """jsraft's own per-stream views in a /jsz body: under `jsraft.streams` (the nats-server-shaped /jsz,
    whose top-level `streams` is a count) or, from an older node, the top-level `streams` list."""
    nested = body.get("jsraft")
    if isinstance(nested, dict) and isinstance(nested.get("streams"), list):
        return nested["streams"]
    top = body.get("streams")
    return top if isinstance(top, list) else []


def replica_rows(name: str, answers: dict[str, dict[str, Any] | None]) -> list[tuple[Any, ...]]:
    """One row per node's replica of stream `name` (invariants 1 and 2)."""
    local: dict[str, dict[str, Any]] = {}
    leader = None
    silent = []
    for url, body in answers.items():
        if body is None:
            silent.append(url)
            continue
        for entry in stream_views(body):
            if entry.get("name") == name and isinstance(entry.get("local"), dict):
                local[str(body.get("server_name", url))] = entry["local"]
                leader = entry.get("leader") or leader
    leader_last = (local.get(leader) or {}).get("last_seq")
    rows: list[tuple[Any, ...]] = []
    for node, state in sorted(local.items()):
        lag = leader_last - state["last_seq"] if isinstance(leader_last, int) else "?"
        rows.append((name, node + ("*" if node == leader else ""), state.get("first_seq"), state.get("last_seq"),
                     state.get("messages"), state.get("bytes"), state.get("digest"), lag, state.get("health", "?")))
    rows.extend((name, url, "", "", "", "", "", "", "no answer") for url in silent)
    return rows


@stream.command("report")
@_monitor_options
@client_command
async def stream_report(session: Session, monitor: str | None, directory: str | None) -> None:
    """Every stream: storage, consumers, messages, bytes, replicas; with --dir or --monitor, each replica's
    state tuple (first, last, messages, bytes, digest), its lag and repair status."""
    infos = await session.pages("STREAM.LIST", "streams")
    urls = monitor_urls(monitor, directory)
    answers = jsz_streams(urls) if urls else {}
    if session.out.as_json:
        return session.out.json({"streams": infos, "replicas": {
            info["config"]["name"]: replica_rows(info["config"]["name"], answers) for info in infos}})
    rows = []
    for info in infos:
        config, state, cluster = info["config"], info["state"], info.get("cluster") or {}
        replicas = [f"{cluster.get('leader')}*"] if cluster.get("leader") else []
        replicas += [r["name"] + ("" if r.get("current") else "!") for r in cluster.get("replicas") or []]
        rows.append((config["name"], config.get("storage"), state.get("consumer_count", 0), state["messages"],
                     state["bytes"], state.get("num_deleted", 0), ", ".join(replicas)))
    session.out.table("Stream Report", ("Stream", "Storage", "Consumers", "Messages", "Bytes", "Deleted",
                                        "Replicas"), rows)
    if answers:
        table = [row for info in infos for row in replica_rows(info["config"]["name"], answers)]
        session.out.table("Replica State", ("Stream", "Replica", "First", "Last", "Messages", "Bytes", "Digest",
                                            "Lag", "Status"), table)


@click.group("server")
def server() -> None:
    """Server (node) reports."""


@server.command("report")
@_monitor_options
@click.option("-j", "--json", "as_json", is_flag=True, help="print the nodes' /jsz answers")
def server_report(monitor: str | None, directory: str | None, as_json: bool) -> int:
    """Each node: health, meta leader and term, streams held and how many are not current."""
    urls = monitor_urls(monitor, directory)
    if not urls:
        raise click.UsageError("give --dir DIR (a `jsraft cluster up` directory) or --monitor URL,...")
    answers = jsz_streams(urls)
    out = Output(as_json)
    if as_json:
        out.json(answers)
        return 0
    rows = []
    for url, body in answers.items():
        code, _ = get_json(f"{url}/healthz")
        if body is None:
            rows.append((url, "no answer", code or "no answer", "", "", "", ""))
            continue
        meta = body.get("meta_cluster") or {}
        streams = stream_views(body)
        behind = [s["name"] for s in streams if (s.get("local") or {}).get("health", "current") != "current"]
        rows.append((body.get("server_name", url), url, code, meta.get("leader"), meta.get("term"), len(streams),
                     ", ".join(behind) or "none"))
    out.table("Server Report", ("Server", "Monitor", "Health", "Meta Leader", "Term", "Streams", "Not Current"), rows)
    return 0 if all(body is not None for body in answers.values()) else 1
