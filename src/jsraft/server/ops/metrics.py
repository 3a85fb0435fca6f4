"""The node's Prometheus metrics (`/metrics`) and its readiness rule (`/varz`) (layer L5).

Owns: `NodeCollector`, which reads one node's state at each scrape and yields it as Prometheus metric
families — every Raft group's role, term, commit, applied, last and snapshot index, repair and proposal
counts; every local stream replica's messages, bytes, first/last sequence, health, faults, leadership and
repair/audit counters; the client port's connections and message counters; the JetStream API's request
counters — and `node_registry(parts)`, a registry of its own per node (several nodes run in one process in
tests, so the global default registry is never used). It reads the node through `MonitorParts`, never the
`Node`.

Invariants:
  1. Read-only: collecting never proposes, opens, closes or waits for anything (monitor invariant 2),
     and runs synchronously on the node's trio thread, so one scrape sees one moment of the node.
  2. Nothing is cached or pre-aggregated: each scrape reads the node's own numbers, so two scrapes can
     only differ because the node changed. Counters (`_total`) are the node's monotonic counters.
  3. A part of the node that is not open yet (a replica's store before it opens, a group closing) is
     left out of the scrape, never an error: the scrape still answers.
  4. `jsraft_node_ready` is `Node.wait_ready`'s condition, without the waiting: `readiness.Readiness`,
     the one definition of readiness (a meta leader known, this node caught up once in its term).

Not here: fsync or group-commit cycle counts (the runtime keeps none today), and publish-ack counts (the
publish path keeps none); both need a counter where the work is done.

Imports: stdlib, L0, L1 (`raft` status), L3 (`stream` health), prometheus_client, ops siblings
(`monitor_parts`). Must not import `server.node`.
Reference: Prometheus exposition format; nats-server `/varz` and `/jsz` for what is worth exporting.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from jsraft import __version__
from jsraft.errors import JsraftError
from jsraft.raft.status import Role
from jsraft.stream.results import Health

if TYPE_CHECKING:
    from jsraft.server.groups.stream_replica import StreamReplica
    from jsraft.server.ops.monitor_parts import MonitorParts

CONTENT_TYPE = CONTENT_TYPE_LATEST
_RAFT_GAUGES = (  # (metric suffix, Status field, help)
    ("term", "current_term", "Raft term this replica is in"),
    ("commit_index", "commit_index", "highest log index known committed"),
    ("applied_index", "applied_index", "highest log index applied to the state machine"),
    ("last_index", "last_index", "highest log index in this replica's log"),
    ("snapshot_index", "snapshot_index", "log index of this replica's latest snapshot"),
)
_STREAM_GAUGES = (  # (metric suffix, StoreState field, help)
    ("messages", "msgs", "messages stored in this node's replica"),
    ("bytes", "bytes", "bytes stored in this node's replica"),
    ("first_seq", "first_seq", "first sequence in this node's replica"),
    ("last_seq", "last_seq", "last sequence in this node's replica"),
    ("deleted", "num_deleted", "deleted sequences between first_seq and last_seq"),
    ("subjects", "num_subjects", "distinct subjects in this node's replica"),
)
_CLIENT_COUNTERS = (  # (metric name without _total, ClientStats field, help)
    ("jsraft_client_connections", "connections", "client connections accepted"),
    ("jsraft_client_messages_in", "in_msgs", "messages published by clients"),
    ("jsraft_client_messages_out", "out_msgs", "messages delivered to clients"),
    ("jsraft_client_slow_consumers", "slow_consumers", "client connections closed as slow consumers"),
    ("jsraft_client_stale_connections", "stale_connections", "client connections closed as stale"),
    ("jsraft_client_protocol_errors", "protocol_errors", "client connections closed for protocol errors"),
    ("jsraft_client_internal_dropped", "internal_dropped", "internal messages dropped: handlers busy"),
)


class NodeCollector:
    """A Prometheus collector for one node (`collect` is called at each scrape)."""

    def __init__(self, parts: "MonitorParts", running: Callable[[], bool] | None = None) -> None:
        self.parts = parts
        self._running = running

    def collect(self) -> Iterator[Metric]:
        yield from self._node_families()
        yield from self._raft_families()
        yield from self._stream_families()
        yield from self._client_families()

    def _node_families(self) -> Iterator[Metric]:
        parts = self.parts
        info = GaugeMetricFamily("jsraft_node_info", "this node: name, cluster and version (always 1)",
                                 labels=["server_name", "cluster", "version"])
        info.add_metric([parts.name, parts.config.cluster_name, __version__], 1)
        yield info
        yield GaugeMetricFamily("jsraft_node_ready", "1 once a meta leader is known and this node caught up",
                                value=1 if parts.readiness.reason() is None else 0)
        if self._running is not None:
            yield GaugeMetricFamily("jsraft_node_running", "1 while the node runs (0 while stopping)",
                                    value=1 if self._running() else 0)
        yield GaugeMetricFamily("jsraft_meta_streams", "streams in this node's meta state",
                                value=len(parts.meta.streams()))
        yield GaugeMetricFamily("jsraft_meta_streams_offline", "streams loaded offline (DESIGN §9)",
                                value=len(parts.meta.offline()))

    def _group_statuses(self) -> list[tuple[str, Any]]:
        found = []
        for name in self.parts.group_names():
            try:
                found.append((name, self.parts.status(name)))
            except JsraftError:
                continue  # closed between listing and reading
        return found

    def _raft_families(self) -> Iterator[Metric]:
        statuses = self._group_statuses()
        labels = ["group"]
        for suffix, field, help_text in _RAFT_GAUGES:
            family = GaugeMetricFamily(f"jsraft_raft_{suffix}", help_text, labels=labels)
            for name, status in statuses:
                family.add_metric([name], getattr(status.raft, field))
            yield family
        role = GaugeMetricFamily("jsraft_raft_role", "1 for this replica's current role, 0 for the others",
                                 labels=["group", "role"])
        flags = {name: GaugeMetricFamily(f"jsraft_raft_{name}", help_text, labels=labels) for name, help_text in (
            ("leader_known", "1 when this replica knows a leader"),
            ("repairing", "1 while this replica repairs its log and does not vote"),
            ("halted", "1 when too many voters are repairing to elect a leader"),
            ("closed", "1 when the runtime stopped this group (storage or state machine failure)"))}
        counts = {name: GaugeMetricFamily(f"jsraft_raft_{name}", help_text, labels=labels) for name, help_text in (
            ("voters", "voters in this replica's configuration"),
            ("proposals_in_flight", "proposals admitted and not yet settled"),
            ("proposals_waiting", "proposals in the log waiting to be applied"),
            ("inbox_messages", "Raft messages queued for this group"))}
        for name, status in statuses:
            raft = status.raft
            for each in Role:
                role.add_metric([name, str(each)], 1 if raft.role is each else 0)
            for flag, value in (("leader_known", raft.leader_id is not None), ("repairing", raft.repairing),
                                ("halted", raft.halted_reason is not None),
                                ("closed", status.closed_reason is not None)):
                flags[flag].add_metric([name], 1 if value else 0)
            for count, value in (("voters", len(raft.voters)), ("proposals_in_flight", status.proposals_in_flight),
                                 ("proposals_waiting", status.proposals_waiting),
                                 ("inbox_messages", status.inbox_messages)):
                counts[count].add_metric([name], value)
        yield role
        yield from flags.values()
        yield from counts.values()

    def _replicas(self) -> list["StreamReplica"]:
        return [replica for _, replica in sorted(self.parts.replicas.items()) if replica.store is not None]

    def _stream_families(self) -> Iterator[Metric]:
        replicas = self._replicas()
        labels = ["stream"]
        states = [(replica, replica.store.state()) for replica in replicas]
        for suffix, field, help_text in _STREAM_GAUGES:
            family = GaugeMetricFamily(f"jsraft_stream_{suffix}", help_text, labels=labels)
            for replica, state in states:
                family.add_metric([replica.name], getattr(state, field))
            yield family
        health = GaugeMetricFamily("jsraft_stream_health", "1 for this replica's health, 0 for the others",
                                   labels=["stream", "health"])
        leader = GaugeMetricFamily("jsraft_stream_leader", "1 when this node leads the stream's group", labels=labels)
        faults = GaugeMetricFamily("jsraft_stream_faults", "damaged or missing records this replica knows of",
                                   labels=labels)
        repairs = CounterMetricFamily("jsraft_stream_repairs", "repair episodes completed", labels=labels)
        fetched = CounterMetricFamily("jsraft_stream_repair_fetched_messages", "messages fetched from peers by repairs",
                                      labels=labels)
        verdicts = CounterMetricFamily("jsraft_stream_audit_verdicts", "audit verdicts reached", labels=labels)
        for replica in replicas:
            shown = replica.repair.health() if replica.machine is not None else None
            for each in Health:
                health.add_metric([replica.name, str(each)], 1 if shown is each else 0)
            leader.add_metric([replica.name], 1 if replica.leader_id() == self.parts.name else 0)
            faults.add_metric([replica.name], len(replica.store.faults()))
            repairs.add_metric([replica.name], replica.repair.repairs)
            fetched.add_metric([replica.name], replica.repair.fetched_msgs)
            verdicts.add_metric([replica.name], replica.audit.verdicts)
        yield from (health, leader, faults, repairs, fetched, verdicts)

    def _client_families(self) -> Iterator[Metric]:
        clients = self.parts.clients
        yield GaugeMetricFamily("jsraft_client_connections_open", "client connections open now",
                                value=len(clients.clients))
        yield GaugeMetricFamily("jsraft_client_subscriptions", "subscriptions in the node's subject index",
                                value=len(clients.sublist))
        for name, field, help_text in _CLIENT_COUNTERS:
            yield CounterMetricFamily(name, help_text, value=getattr(clients.stats, field))
        total, errors = self.parts.api_counts()
        yield CounterMetricFamily("jsraft_jsapi_requests", "JetStream API requests answered", value=total)
        yield CounterMetricFamily("jsraft_jsapi_errors", "JetStream API requests answered with an error", value=errors)


def node_registry(parts: "MonitorParts", running: Callable[[], bool] | None = None) -> CollectorRegistry:
    """A registry of the node's own (never the process-wide default registry)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(parts, running))  # type: ignore[arg-type]  # duck-typed Collector
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """The registry in Prometheus text format (`CONTENT_TYPE`)."""
    return generate_latest(registry)
