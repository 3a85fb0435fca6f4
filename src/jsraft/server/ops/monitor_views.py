"""The bodies of `/varz`, `/jsz`, `/healthz` and `/connz` in nats-server's shapes (layer L5).

Owns: building each view from the node's state (`MonitorParts`, never the `Node`), with nats-server's field
names and units (durations in nanoseconds, times RFC 3339, `uptime` as `1h2m3s`), so its tools (the `nats`
CLI's server reports, its Prometheus exporter, surveyor) read them; jsraft's own fields (its version, Raft
settings, peer links, each replica's state tuple, health and applied index) under the key `jsraft`, never
mixed with nats-server's.

Invariants:
  1. Read-only (monitor invariant 2): nothing here proposes, opens or changes anything.
  2. Counts are this node's: streams, consumers, messages and bytes of the replicas it holds, as a
     nats-server reports what it stores.
  3. `/healthz` answers with nats-server's parameters: `js-enabled-only` (the node runs: JetStream is
     always on), `js-server-only` (and it is ready: `readiness`), and by default also every replica it
     holds has a leader and is current (not repairing); an unhealthy answer is 503 with the first reason.

Imports: stdlib, L0, `server.nats` (`client_server`), `server.api` (its JSON shapes), `server.groups`,
ops siblings. Must not import `server.node`. Reference: nats-server `server/monitor.go`
(Varz, JSInfo, HealthStatus, Connz), `server/jetstream.go` (JetStreamConfig, JetStreamStats).
"""

from __future__ import annotations

import datetime
import os
import resource
import time
from typing import TYPE_CHECKING, Any

from jsraft import __version__
from jsraft.errors import JsraftError
from jsraft.server.nats.client_server import NATS_VERSION
from jsraft.server.api.consumer_admin import info_json
from jsraft.server.api.jsapi_codec import rfc3339
from jsraft.server.api.jsapi_stream import config_json, read_state, state_json
from jsraft.server.groups.meta_service import META_GROUP
from jsraft.server.groups.versioning import ACCOUNT

if TYPE_CHECKING:
    from jsraft.server.groups.stream_replica import StreamReplica
    from jsraft.server.ops.monitor_parts import MonitorParts

SECOND_NS = 1_000_000_000
CONNZ_LIMIT = 1024  # nats-server's default page


def _iso(wall_s: float) -> str:
    return datetime.datetime.fromtimestamp(wall_s, datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def format_uptime(seconds: float) -> str:
    """nats-server's uptime spelling: `1d2h3m4s`, `5m0s`, `12s`."""
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{days}d"] if days else []
    if days or hours:
        parts.append(f"{hours}h")
    if days or hours or minutes:
        parts.append(f"{minutes}m")
    parts.append(f"{secs}s")
    return "".join(parts)


def resident_bytes() -> int:
    """The process's resident memory (`mem`): Linux's current figure, else the peak the OS reports."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class _CpuMeter:
    """Percent of one core used since the previous reading (nats-server samples `cpu` the same way)."""

    def __init__(self) -> None:
        self._at = (time.monotonic(), time.process_time())

    def percent(self) -> float:
        wall, cpu = time.monotonic(), time.process_time()
        (wall_before, cpu_before), self._at = self._at, (wall, cpu)
        return round(100.0 * (cpu - cpu_before) / (wall - wall_before), 1) if wall > wall_before else 0.0


_CPU = _CpuMeter()


def truthy(query: dict[str, str], key: str) -> bool:
    """A query flag: given as `?key`, `?key=1` or `?key=true`."""
    return key in query and query[key].lower() in ("1", "true", "")


# --- /varz -------------------------------------------------------------------------------------------------

def varz(parts: "MonitorParts", http: tuple[str, int], started_wall_s: float | None, uptime_s: float,
         peers: list[dict[str, Any]], http_requests: dict[str, int]) -> dict[str, Any]:
    config, clients = parts.config, parts.clients
    stats = clients.stats
    cluster_address = parts.cluster_address()
    cluster_port = cluster_address[1] if cluster_address else config.cluster_port
    body: dict[str, Any] = {
        "server_id": clients.server_id, "server_name": parts.name, "version": NATS_VERSION, "proto": 1,
        "host": config.client_host, "port": parts.client_port() or config.client_port,
        "max_connections": clients.options.connections_max,
        "ping_interval": config.client_ping_interval_ms * 1_000_000, "ping_max": config.client_pings_out_max,
        "http_host": http[0], "http_port": http[1], "http_base_path": "", "https_port": 0,
        "max_control_line": clients.options.max_control_line, "max_payload": config.max_payload,
        "max_pending": config.client_pending_bytes_max,
        # `name` is nats-server's; `host`, `port` and `peers` (each with its link) are jsraft's.
        "cluster": {"name": config.cluster_name, "host": config.cluster_host, "port": cluster_port, "peers": peers},
        "gateway": {}, "leaf": {}, "mqtt": {}, "websocket": {},
        "jetstream": {"config": js_config(parts), "stats": js_stats(parts), "limits": {}},
        "write_deadline": config.client_write_deadline_ms * 1_000_000,
        "start": _iso(started_wall_s) if started_wall_s is not None else None, "now": _iso(time.time()),
        "uptime": format_uptime(uptime_s), "mem": resident_bytes(), "cores": os.cpu_count() or 1,
        "cpu": _CPU.percent(), "connections": len(clients.clients),
        "total_connections": stats.connections, "routes": sum(peer["connected"] for peer in peers), "remotes": 0,
        "leafnodes": 0, "in_msgs": stats.in_msgs, "in_bytes": stats.in_bytes, "out_msgs": stats.out_msgs,
        "out_bytes": stats.out_bytes,
        # Only clients publish and receive on a jsraft node's client port (routes carry no client counts).
        "in_client_msgs": stats.in_msgs, "in_client_bytes": stats.in_bytes, "out_client_msgs": stats.out_msgs,
        "out_client_bytes": stats.out_bytes, "slow_consumers": stats.slow_consumers,
        "stale_connections": stats.stale_connections, "stalled_clients": 0, "subscriptions": len(clients.sublist),
        "slow_consumer_stats": {"clients": stats.slow_consumers, "routes": 0, "gateways": 0, "leafs": 0},
        "stale_connection_stats": {"clients": stats.stale_connections, "routes": 0, "gateways": 0, "leafs": 0},
        "http_req_stats": dict(http_requests),
        "config_load_time": _iso(started_wall_s) if started_wall_s is not None else None,
    }
    if config.clustered:
        body["jetstream"]["meta"] = meta_cluster(parts)
    body["jsraft"] = {"version": __version__, "store_dir": config.store_dir, "tick_ms": config.tick_ms,
                      "election_ticks": config.election_ticks, "uptime_s": round(uptime_s, 3),
                      "client_listener": parts.client_address() is not None}
    return body


def js_config(parts: "MonitorParts") -> dict[str, Any]:
    """nats-server `JetStreamConfig`: jsraft sets no memory or storage limit (0 here, as nats-server serves
    an unset one) and fsyncs every acknowledged write (`sync_always`)."""
    return {"max_memory": 0, "max_storage": 0, "store_dir": parts.config.store_dir, "sync_always": True,
            "strict": True}


def js_stats(parts: "MonitorParts") -> dict[str, Any]:
    """nats-server `JetStreamStats` for what this node stores."""
    memory = storage = ha_assets = 0
    for replica in list(parts.replicas.values()):
        if replica.store is None:
            continue
        stored = replica.store.state().bytes
        if str(replica.config.storage) == "memory":
            memory += stored
        else:
            storage += stored
        ha_assets += replica.config.num_replicas > 1
    total, errors = parts.api_counts()
    return {"memory": memory, "storage": storage, "reserved_memory": 0, "reserved_storage": 0, "accounts": 1,
            "ha_assets": ha_assets, "api": {"level": parts.config.api_level, "total": total,
                                            "errors": errors}}


def meta_cluster(parts: "MonitorParts") -> dict[str, Any]:
    """nats-server `MetaClusterInfo` (`name`, `leader`, `peer`, `cluster_size`) with jsraft's `term`,
    `peers` and `applied_index` beside them (their readers predate this shape)."""
    status = parts.status(META_GROUP).raft
    voters = parts.config.voters()
    return {"name": parts.config.cluster_name, "leader": status.leader_id, "peer": parts.name,
            "cluster_size": len(voters), "term": status.current_term, "peers": list(voters),
            "applied_index": parts.meta.applied_index}


# --- /jsz --------------------------------------------------------------------------------------------------

def jsz(parts: "MonitorParts", query: dict[str, str]) -> dict[str, Any]:
    """nats-server `JSInfo`; `?accounts`, `?streams`, `?consumers`, `?config` add `account_details`."""
    replicas = [replica for _, replica in sorted(parts.replicas.items()) if replica.store is not None]
    states = [replica.store.state() for replica in replicas]
    consumers = sum(len(r.adapter.consumers.entries) for r in replicas if r.adapter is not None)
    stats = js_stats(parts)
    body: dict[str, Any] = {
        **stats, "server_id": parts.clients.server_id, "now": _iso(time.time()), "config": js_config(parts),
        "limits": {}, "streams": len(replicas), "consumers": consumers,
        "messages": sum(state.msgs for state in states), "bytes": sum(state.bytes for state in states),
        "meta_cluster": meta_cluster(parts),
    }
    want_streams = truthy(query, "streams") or truthy(query, "consumers") or truthy(query, "config")
    if want_streams or truthy(query, "accounts"):
        account = {"name": ACCOUNT, "id": ACCOUNT, **stats, "accounts": 0}
        if want_streams:
            account["stream_detail"] = [stream_detail(parts, replica, query) for replica in replicas]
        body["account_details"] = [account]
        body["total"] = 1
    bulk = parts.bulk
    body["jsraft"] = {"streams": [jsraft_stream(parts, assignment) for assignment in parts.meta.streams()],
                      "bulk_get": {"local_chunks": bulk.local_chunks, "leader_chunks": bulk.leader_chunks}}
    return body


def stream_detail(parts: "MonitorParts", replica: "StreamReplica", query: dict[str, str]) -> dict[str, Any]:
    """nats-server `StreamDetail`: this node's replica of one stream (its consumers with `?consumers`)."""
    assignment = parts.meta.stream(replica.name)
    state, first_ts_ns, last_ts_ns = read_state(replica)
    entries = replica.adapter.consumers.entries if replica.adapter is not None else {}
    detail: dict[str, Any] = {"name": replica.name, "created": rfc3339(assignment.created_ns),
                              "cluster": {"leader": replica.leader_id()}}
    if truthy(query, "config"):
        detail["config"] = config_json(assignment.config_raw, assignment.required_level, parts.config.api_level,
                                       assignment.config)
    detail["state"] = state_json(state, first_ts_ns, last_ts_ns, len(entries), None)
    if truthy(query, "consumers"):
        now_ns = time.time_ns()
        detail["consumer_detail"] = [
            info_json(replica.name, entry, None, replica.store, None, now_ns, parts.config.api_level)
            for _, entry in sorted(entries.items()) if entry.config is not None]
    return detail


def jsraft_stream(parts: "MonitorParts", assignment: Any) -> dict[str, Any]:
    """jsraft's own view of one stream: placement, leader as this node sees it, and this node's replica."""
    replica = parts.replicas.get(assignment.name)
    return {"name": assignment.name, "group": assignment.group, "subjects": list(assignment.subjects),
            "replicas": list(assignment.peers), "offline_reason": assignment.offline_reason,
            "stopped_reason": replica.stopped_reason if replica is not None else None,
            "group_closed_reason": _closed_reason(parts, assignment.group),
            "leader": replica.leader_id() if replica is not None else None,
            "local": replica_view(replica) if replica is not None else None}


def _closed_reason(parts: "MonitorParts", group: str) -> str | None:
    """Why this node's runtime stopped the Raft group (a failed or halted group, `runtime.group`), or None."""
    try:
        return parts.status(group).closed_reason
    except JsraftError:
        return None  # not open here


def replica_view(replica: "StreamReplica") -> dict[str, Any] | None:
    """This node's replica of one stream: its state tuple, health and applied index (None if not open)."""
    if replica.store is None:
        return None
    state = replica.store.state()
    view: dict[str, Any] = {"first_seq": state.first_seq, "last_seq": state.last_seq, "messages": state.msgs,
                            "bytes": state.bytes, "digest": f"{state.digest:016x}"}
    if replica.machine is not None:
        view["health"] = str(replica.repair.health())
    try:
        view["applied_index"] = replica.runtime.status(replica.group).raft.applied_index
    except JsraftError:
        view["applied_index"] = None  # the group is closing or not open yet
    view["quiesced"] = replica.runtime.ticker.is_quiet(replica.group)  # not ticked here (runtime/quiesce.py)
    return view


# --- /healthz ----------------------------------------------------------------------------------------------

def healthz(parts: "MonitorParts", running: bool, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """Invariant 3: nats-server's `HealthStatus` (`status`, and `status_code` and `error` when unhealthy)."""
    problem = None
    notice = parts.removed_notice() if running else None
    if not running:
        problem = "node is not running"
    elif notice is not None:  # meta_members rule 2: this server was removed from the cluster
        problem = notice.describe()
    elif not truthy(query, "js-enabled-only"):  # JetStream is always enabled: running is enough for that
        problem = _js_problem(parts, server_only=truthy(query, "js-server-only"))
    if problem is None:
        return 200, {"status": "ok"}
    return 503, {"status": "unavailable", "status_code": 503, "error": problem}


def _js_problem(parts: "MonitorParts", *, server_only: bool) -> str | None:
    reason = parts.readiness.reason()
    if reason is not None:
        return f"JetStream is not current: {reason}"
    if server_only:
        return None
    for name, replica in sorted(parts.replicas.items()):
        closed = _closed_reason(parts, replica.group)
        if closed is not None:  # a halted group (issue #14) keeps its last leader in its frozen status
            return f"JetStream stream '{ACCOUNT} > {name}' is stopped on this node: {closed}"
        if replica.leader_id() is None:
            return f"JetStream stream '{ACCOUNT} > {name}' has no leader"
        health = replica.repair.health() if replica.machine is not None else None
        if health is not None and str(health) != "current":  # repairing too while its Raft log repairs
            return f"JetStream stream '{ACCOUNT} > {name}' is not current: {health}"
    return None


# --- /connz ------------------------------------------------------------------------------------------------

def connz(parts: "MonitorParts", query: dict[str, str]) -> dict[str, Any]:
    """nats-server `Connz`: this node's client connections by `cid`, paged by `offset` and `limit`."""
    clients = parts.clients
    conns = [conn for _, conn in sorted(clients.clients.items())]
    offset = _int(query, "offset", 0)
    limit = _int(query, "limit", CONNZ_LIMIT) or CONNZ_LIMIT
    now_ns = time.time_ns()
    return {"server_id": clients.server_id, "now": _iso(now_ns / SECOND_NS), "num_connections": len(conns),
            "total": len(conns), "offset": offset, "limit": limit,
            "connections": [connection(conn, now_ns) for conn in conns[offset:offset + limit]]}


def connection(conn: Any, now_ns: int) -> dict[str, Any]:
    host, _, port = conn.peer.rpartition(":")
    idle_s = conn.idle_s()
    info: dict[str, Any] = {
        "cid": conn.cid, "kind": "Client", "type": "nats", "ip": host, "port": int(port) if port.isdigit() else 0,
        "start": _iso(conn.start_ns / SECOND_NS), "last_activity": _iso(now_ns / SECOND_NS - idle_s),
        "uptime": format_uptime((now_ns - conn.start_ns) / SECOND_NS), "idle": format_uptime(idle_s),
        "pending_bytes": conn.pending_bytes, "in_msgs": conn.in_msgs, "out_msgs": conn.out_msgs,
        "in_bytes": conn.in_bytes, "out_bytes": conn.out_bytes, "subscriptions": len(conn.subs),
    }
    if conn.name:
        info["name"] = conn.name
    info["lang"], info["version"] = conn.lang, conn.version
    return info


def _int(query: dict[str, str], key: str, default: int) -> int:
    try:
        return max(int(query.get(key, default)), 0)
    except ValueError:
        return default
