"""`Node`: one jsraft node — disk, identity, transport, runtime, the meta group and its stream groups (L5).

Owns: wiring the layers together and their lifecycle (`run`, `open_node`), the node's message
dispatch (Raft messages by group name, stamping when each peer was last heard per group in
`raft_heard_ns` for stream info's `active`; `$rpc` frames to the request layer, `$route` frames and link
changes to the NATS cluster routes), and the two routes a request can take: to the meta leader (admin)
or to a stream's leader (data). The JetStream API on top is in `jetstream`; the NATS client port
(`clients`, `url`) in `client_server` and `stream_publish`, its interest and messages between nodes in
`routes`. Each service gets the narrow parts it uses, wired here once — `LocalStreams`, the call
signatures of `stream_lookup`, the router, `ApiParts` for the JetStream API, callables for `Readiness`,
`MonitorParts` for the monitoring views, metrics and test hooks — never the `Node`.

Invariants:
  1. The store directory is locked for this node (`disk.lock`: a second process, or a second `Node` in
     this one, is refused with `StoreLocked`), then its identity is checked, before anything else
     touches it (identity invariant 2). The lock is released when `run` ends, after the stores closed —
     also after `kill()`, as the kernel drops it when a crashed process dies.
  2. Group names starting with `$` are reserved for the node (`$meta`, `$rpc`, `$route`); stream groups
     are `S-<name>-<index>`, so no stream can shadow them.
  3. Stopping: cancelling `run` stops the runtime first (it closes every group and waits for its fsync
     threads), then the stream stores are closed — unless the node was killed (`kill()`), which models
     a crash: nothing is closed or flushed beyond what was already durable.

Imports: stdlib, L0–L4 (L3½ `replica` included), trio, every server subpackage. Reference: DESIGN.md §1 (L5),
§2, §5, §10.
"""

from __future__ import annotations

import logging
import random
import time
from functools import partial
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import trio

from jsraft.disk import OsDisk
from jsraft.disk.lock import StoreLock, acquire_store_lock
from jsraft.errors import invariant, naming_port
from jsraft.meta import MetaStateMachine
from jsraft.raft.config import RaftConfig
from jsraft.raft.messages import Message
from jsraft.runtime import NodeRuntime, SkewableClock, SteadyWall, SystemClock
from jsraft.runtime.group_record import GroupRecord
from jsraft.server.nats.client_server import ClientServer
from jsraft.server.settings.config import NodeConfig
from jsraft.server.groups import publish_batch
from jsraft.server.groups.handlers import Handlers
from jsraft.server.api.api_parts import ApiParts
from jsraft.server.api.jsapi_handlers import JsApi
from jsraft.server.ops.monitor_parts import MonitorParts
from jsraft.server.ops.readiness import Readiness
from jsraft.server.ops.test_hooks import HookParts
from jsraft.server.settings.identity import IDENTITY_FILE, NodeIdentity, load_or_format
from jsraft.replica.meta_adapter import MetaAdapter
from jsraft.server.groups.meta_service import META_GROUP, MetaService
from jsraft.server.nats.route_wire import ROUTE_GROUP
from jsraft.server.groups.router import Router
from jsraft.server.nats import route_gossip
from jsraft.server.nats.routes import Routes
from jsraft.server.groups.rpc import RPC_GROUP, Rpc
from jsraft.server.groups.stream_options import StreamOptions
from jsraft.server.groups.stream_publish import client_service
from jsraft.server.groups.stream_lookup import LocalStreams, require_stream
from jsraft.server.groups.streams import StreamManager
from jsraft.server.nats.cluster_urls import ClusterUrls
from jsraft.server.groups.versioning import log_banner
from jsraft.server.nats.tls import TlsContexts
from jsraft.runtime.quiesce import BEAT_GROUP
from jsraft.transport import Transport, TransportConfig, decode_message, encode_message_parts, start_seed
from jsraft.transport.cluster_auth import ClusterAuth

if TYPE_CHECKING:
    from jsraft.server.api.jetstream import JetStreamContext

log = logging.getLogger("jsraft.server")

_TEST_TRANSPORT = TransportConfig(handshake_timeout_s=2.0, dial_timeout_s=1.0, keepalive_s=0.2,
                                  idle_timeout_s=2.0, backoff_initial_s=0.02, backoff_max_s=0.2,
                                  link_stable_s=0.2)


class Node:
    def __init__(self, config: NodeConfig) -> None:
        self.config = config.validate()
        self.name = config.name
        self.tick_s = config.tick_ms / 1000
        self.identity: NodeIdentity | None = None
        self._lock: StoreLock | None = None
        self.cluster_address: tuple[str, int] | None = None
        self.client_address: tuple[str, int] | None = None
        self.killed = False
        # Raft group -> peer -> monotonic ns of the last Raft message from it: what a leader last heard.
        self.raft_heard_ns: dict[str, dict[str, int]] = {}
        self.meta = MetaStateMachine(clustered=config.clustered, api_level=config.api_level,
                                     max_streams=config.account_limits.max_streams)
        # The node's clock: with the test hooks on, a wall clock the hooks can skew at run time (its
        # monotonic time, which paces every timeout and election, is the system's, untouched).
        self.clock: SystemClock | SkewableClock = SkewableClock() if config.test_hooks else SystemClock()
        # What the node stamps and ages messages and consumer deliveries with: that wall clock with its
        # steps slewed away (runtime/clock.py invariant 3), so a clock stepped minutes forward cannot
        # age every message id out of the duplicate window at once.
        self.steady_clock = SteadyWall(self.clock)
        # The parts the readiness rule reads are built later (`_build`): until then it says "not open".
        self.readiness = Readiness(self.name, self.meta,
                                   meta_status=lambda: self.runtime.status(META_GROUP).raft,
                                   noop_term=lambda: self.meta_adapter.noop_term,
                                   streams_pending=lambda: self.streams.pending)
        self._scope = trio.CancelScope()

    def raft_config(self, *, prompt_commit: bool = True) -> RaftConfig:
        """The meta group's; a stream group's with `prompt_commit=False`: its commit rides the next append or
        heartbeat, reads being the leader's (`raft.replication` invariant 5, `RaftConfig.prompt_commit`)."""
        return RaftConfig(node_id=self.name, election_ticks=self.config.election_ticks, heartbeat_ticks=1,
                          prompt_commit=prompt_commit)

    async def run(self, *, task_status: trio.TaskStatus["Node"] = trio.TASK_STATUS_IGNORED) -> None:
        """Start everything, report `started(self)`, serve until cancelled (invariant 3)."""
        config = self.config
        if self.identity is None:
            await self.prepare()
        disk = self._disk
        with self._scope:
            try:
                async with trio.open_nursery() as nursery:
                    listen = partial(self.transport.run, listen=config.listens_for_cluster)
                    self.cluster_address = await nursery.start(listen)
                    await nursery.start(self.runtime.run)
                    await nursery.start(self.rpc.run)
                    await nursery.start(self.routes.run)
                    log_banner(config)
                    await self.meta_service.open(self.raft_config(), disk.sub("meta"))
                    # A lost group record: the meta log's last index now is the floor below which every
                    # assigned group counts as started here (runtime.group_record decision 2).
                    last_index = self.runtime.status(META_GROUP).raft.last_index
                    await trio.to_thread.run_sync(self.runtime.group_record.set_lost_floor, last_index)
                    await nursery.start(self.streams.run)
                    nursery.start_soon(self.meta_service.run)
                    with naming_port("client", config.client_host, config.client_port):
                        self.client_address = await nursery.start(self.clients.run)
                    # Bare routes are dialed once the client URL peers will ask for is bound (route_gossip).
                    for seed in config.seed_addresses():
                        start_seed(self.transport, seed)
                    nursery.start_soon(self.cluster_urls.run)  # INFO's connect_urls
                    log.info("node %s up: cluster %s at %s", self.name, config.cluster_name, self.cluster_address)
                    task_status.started(self)
            finally:
                try:
                    await self.streams.close_all(clean=not self.killed)
                finally:
                    self.release_lock()

    async def prepare(self) -> None:
        """Lock the store directory, check (or format) its identity and build the parts; raises
        `StoreLocked` or `IdentityMismatch` before anything runs (invariant 1). `run` calls it when not
        done yet."""
        config = self.config
        self._lock = await trio.to_thread.run_sync(acquire_store_lock, config.store_dir)
        try:
            disk = await trio.to_thread.run_sync(OsDisk, config.store_dir)
            existed = await trio.to_thread.run_sync(disk.exists, IDENTITY_FILE)
            self.identity = await trio.to_thread.run_sync(load_or_format, disk, config.name, config.cluster_name)
            record = await trio.to_thread.run_sync(lambda: GroupRecord.open(disk, node_existed=existed))
            self._disk = disk
            self._build(disk, record)
        except BaseException:
            self.release_lock()
            raise

    def release_lock(self) -> None:
        """Give the store directory up (invariant 1); safe to call more than once."""
        if self._lock is not None:
            self._lock.release()

    def _build(self, disk: OsDisk, record: GroupRecord) -> None:
        config = self.config
        invariant(self.identity is not None, "identity is checked before the node is built (invariant 1)")
        self.runtime = NodeRuntime(self.name, disk, self.steady_clock, random.Random(), self._send_raft,
                                   tick_ms=config.tick_ms, group_record=record, send_beat=self._send_beat,
                                   liveness_ticks=config.election_ticks)
        self.streams = StreamManager(node_id=self.name, disk=disk.sub("streams"), runtime=self.runtime, meta=self.meta,
                                     raft_config=lambda: self.raft_config(prompt_commit=False), tick_s=self.tick_s,
                                     options=StreamOptions.of(config),
                                     call_peer=lambda *args, **kwargs: self.rpc.call(*args, **kwargs))
        self.meta_adapter = MetaAdapter(self.meta, self.streams.on_applied, self.streams.on_restored,
                                        snapshot_ready=self.streams.caught_up)
        self.transport = Transport(
            self.name, config.cluster_name, self.identity.storage_uuid, config.cluster_host, config.cluster_port,
            config.peer_addresses(), on_message=self._on_message, on_link=self._on_link,
            config=_TEST_TRANSPORT if config.test_mode else None, bind_host=self._outgoing_host(),
            auth=ClusterAuth(config.cluster_secret, config.cluster_name) if config.cluster_secret else None,
            tls=TlsContexts(config.cluster_tls, "cluster_tls", mutual=True) if config.cluster_tls else None,
            open_membership=bool(config.seed_routes))
        call_peer = partial(_call_peer, self)  # the request layer is built after the parts that use it
        self.meta_service = MetaService(node_id=self.name, voters=config.voters(), runtime=self.runtime,
                                        meta=self.meta, adapter=self.meta_adapter, online=self.online, tick_s=self.tick_s,
                                        snapshot_every_entries=config.meta_snapshot_every_entries or None,
                                        storage_uuid=str(self.identity.storage_uuid),
                                        online_uuids=self.online_storage_uuids, call_peer=call_peer)
        self.meta_service.prepare_stream = self.streams.prepare  # a create's directory built while it commits
        local = LocalStreams(name=self.name, replicas=self.streams.replicas, meta=self.meta)
        self.handlers = Handlers(local=local, meta_service=self.meta_service, status=self.runtime.status,
                                 call_peer=call_peer)
        self.rpc = Rpc(self.transport.send, self.handlers.handle, before_send=lambda peer: self.routes.send_pending(peer))
        self.router = Router(self.name, self.rpc, self.handlers.handle, tick_s=self.tick_s,
                             deadline_s=10.0, attempt_timeout_s=2.0 if config.test_mode else 5.0)
        self.clients: ClientServer = client_service(config, self.identity.storage_uuid, local=local,
                                                    router=self.router, rpc=self.rpc, call_stream=self.call_stream)
        self.runtime.progress.after_cycle.append(self.clients.flush_queued)  # a cycle's answers leave with it
        # `msg.publish_batch`, served at a stream's leader; queued as its frame is read (rpc invariant 5).
        self.handlers.table[publish_batch.METHOD] = partial(publish_batch.publish_batch, local)
        self.rpc.starters[publish_batch.METHOD] = partial(publish_batch.start_publish_batch, local)
        self.api_parts = ApiParts(
            local=local, config=config, call_meta=self.call_meta, call_stream=self.call_stream, call_peer=call_peer,
            handle=self.handlers.handle, runtime=self.runtime, online=self.online, raft_heard_ns=self.raft_heard_ns,
            meta_ready=self.meta_service.ready, advisories=self.streams.advisories,
            flush_routes=lambda: self.routes.flush(),  # the routes are built last (api_parts invariant 2)
            peer_interest=lambda subject: bool(self.routes.interested_peers(subject)))
        self.jsapi = JsApi(self.api_parts, self.clients, self.handlers.table)  # `$JS.API.>` on the client port
        for service in (self.jsapi.consumer_hub, self.jsapi.group_ops):  # consumer.next, ..., group.status, ...
            service.register(self.handlers.table)
        self.streams.consumer_port = self.jsapi.consumer_hub  # push consumers publish and ask interest there
        self.cluster_urls = ClusterUrls(clients=self.clients, client_address=lambda: self.client_address,
                                        route_peers=self.route_peers, ask_peer=self.rpc.call,
                                        enabled=config.clustered or bool(config.seed_routes),
                                        refresh_s=0.2 if config.test_mode else 1.0)
        self.cluster_urls.register(self.handlers.table)  # node.client_url
        self.meta_service.lame_ducks = self.cluster_urls.lame_ducks  # no new replica there (meta_service 5)
        # Interest and messages between nodes; a short digest interval in tests bounds a lost interest frame.
        self.routes = Routes(self.name, self.clients, self.transport.send,
                             digest_interval_s=0.2 if config.test_mode else 1.0)
        if config.seed_routes:
            route_gossip.install(self.name, self.transport, self.routes, lambda: self.cluster_address, self.route_peers)
        self.monitor_parts = self._monitor_parts()

    def _monitor_parts(self) -> MonitorParts:
        """What `server.ops.monitor` (its views, metrics and test hooks) reads of this node."""
        streams, runtime, jsapi = self.streams, self.runtime, self.jsapi
        hooks = HookParts(name=self.name, meta=self.meta, replicas=lambda: streams.replicas,
                          advisories=lambda: streams.advisories, status=runtime.status, clock=self.clock,
                          steady_clock=self.steady_clock)
        return MonitorParts(
            name=self.name, config=self.config, meta=self.meta, replicas=streams.replicas, readiness=self.readiness,
            status=runtime.status, group_names=runtime.group_names, clients=self.clients,
            removed_notice=lambda: self.meta_service.members.notice, api_counts=lambda: (jsapi.total, jsapi.errors),
            bulk=jsapi.bulk, peer_links=self.transport.peer_status, cluster_address=lambda: self.cluster_address,
            client_address=lambda: self.client_address, hooks=hooks)

    def _outgoing_host(self) -> str | None:
        """The address outgoing cluster connections are bound to: with the test hooks on and a specific
        cluster host, that host — the chaos harness's network-namespace mode tells nodes apart by source
        address (127.0.0.11..13); otherwise the OS picks."""
        host = self.config.cluster_host
        return host if self.config.test_hooks and host not in ("", "0.0.0.0", "::") else None

    async def wait_ready(self, timeout_s: float = 10.0) -> None:
        """Wait until the node is ready (`readiness.Readiness`: the one definition `/varz`, `/healthz`
        and every harness share)."""
        with trio.fail_after(timeout_s):
            while self.readiness.reason() is not None:
                await trio.sleep(self.tick_s / 2)

    @property
    def client_port(self) -> int | None:
        """The NATS client port bound (`client_port` 0 picks one), once running."""
        return self.client_address[1] if self.client_address else None

    @property
    def url(self) -> str | None:
        """`nats://host:port` for any NATS client, once running."""
        return f"nats://{self.client_address[0]}:{self.client_address[1]}" if self.client_address else None

    def reload_tls(self) -> None:
        """Reload the certificate files of the client port and the cluster links (SIGHUP): new
        connections use them; a reload that fails keeps the old ones (tls invariant 1)."""
        for tls in (self.clients.tls, self.transport.tls):
            if tls is not None:
                tls.reload()

    def stop(self) -> None:
        self._scope.cancel()

    def kill(self) -> None:
        """Stop as a crash would (invariant 3): cancel everything, close no store."""
        self.killed = True
        self._scope.cancel()

    # --- Messages -------------------------------------------------------------------------------------

    def _send_raft(self, to_node: str, group: str, message: Message) -> bool:
        return self.transport.send_parts(to_node, group, encode_message_parts(message))

    def _send_beat(self, to_node: str, payload: bytes) -> bool:
        return self.transport.send(to_node, BEAT_GROUP, payload)

    def _on_message(self, from_node: str, group: str, payload: bytes | memoryview) -> trio.Event | None:
        """The transport's DATA callback; returns the gate of a reply taken in link order (rpc invariant 7)."""
        if group == BEAT_GROUP:  # a node beat: liveness and quiesce notices (runtime/quiesce.py)
            self.runtime.deliver_beat(from_node, payload)
            return None
        if group == RPC_GROUP:
            return self.rpc.on_payload(from_node, payload)
        if group == ROUTE_GROUP:
            self.routes.on_payload(from_node, payload)
            return None
        if from_node not in self.config.peers:
            return None  # a node met by route gossip is in no Raft group here (route_gossip's decision)
        # A payload that does not decode raises RaftCodecError: the transport closes that link.
        self.runtime.deliver(group, decode_message(payload))
        heard = self.raft_heard_ns.get(group)
        if heard is None:
            heard = self.raft_heard_ns[group] = {}
        heard[from_node] = time.monotonic_ns()  # stream info's per-replica `active`
        return None

    def _on_link(self, peer: str, up: bool) -> None:
        self.rpc.on_link(peer, up)
        self.routes.on_link(peer, up)
        self.cluster_urls.wake()  # INFO's connect_urls follow the links

    def online(self) -> set[str]:
        """This node and its connected configured peers: the servers JetStream may place on. A node met
        only by route gossip is left out (route_gossip's decision)."""
        return {self.name} | {peer for peer, status in self.transport.peer_status().items()
                              if status.connected and peer in self.config.peers}

    def route_peers(self) -> set[str]:
        """Every node with a current link, configured or met by route gossip (core NATS routing)."""
        return {peer for peer, status in self.transport.peer_status().items() if status.connected}

    def online_storage_uuids(self) -> dict[str, str]:
        """Name -> storage UUID of this node and of each connected configured peer (from its HELLO)."""
        uuids = {peer: str(status.storage_uuid) for peer, status in self.transport.peer_status().items()
                 if status.connected and status.storage_uuid is not None and peer in self.config.peers}
        return {**uuids, self.name: str(self.identity.storage_uuid) if self.identity else ""}

    # --- Routes ---------------------------------------------------------------------------------------

    def meta_leader(self) -> str | None:
        return self.meta_service.leader_id()

    async def call_meta(self, method: str, args: dict[str, Any], blobs: Sequence[bytes] = ()) -> tuple[Any, list[bytes]]:
        return await self.router.call(method, args, blobs, hint=self.meta_leader,
                                      candidates=self.config.voters)

    async def call_stream(self, stream: str, method: str, args: dict[str, Any],
                          blobs: Sequence[bytes] = ()) -> tuple[Any, list[bytes]]:
        assignment = self.meta.stream(stream)
        replica = self.streams.replicas.get(stream)

        def hint() -> str | None:
            return replica.leader_id() if replica is not None else None

        # `meta_index`: how far this node's meta state had got when it found the stream, so a peer whose
        # meta lags behind answers "not yet" (retried) instead of "no such stream" (`require_stream`).
        return await self.router.call(method, {**args, "stream": stream, "meta_index": self.meta.applied_index},
                                      blobs, hint=hint, candidates=lambda: assignment.peers)

    def require_stream(self, name: str, args: dict[str, Any]) -> None:
        """`stream_lookup.require_stream` on this node's meta state."""
        require_stream(self.meta, name, args)

    def stream_for_subject(self, subject: str) -> str:
        return self.api_parts.stream_for_subject(subject)

    def group_names(self) -> list[str]:
        return [name for name in self.runtime.group_names() if name != META_GROUP]

    def jetstream(self) -> JetStreamContext:
        """The in-process JetStream API (imported here: a node serving clients has no use for it)."""
        from jsraft.server.api.jetstream import JetStreamContext

        return JetStreamContext(self.api_parts, self.clients.publish, lambda: self.url)


def _call_peer(node: Node, *args: Any, **kwargs: Any) -> Any:
    """`Rpc.call` of `node`, looked up at call time: the services that take it are built before it."""
    return node.rpc.call(*args, **kwargs)


@asynccontextmanager
async def open_node(config: NodeConfig | dict[str, Any], *, ready_timeout_s: float | None = 10.0) -> AsyncIterator[Node]:
    """`async with open_node(config) as node:` — a running node for the block's duration, ready
    (`Node.wait_ready`) unless `ready_timeout_s` is None."""
    if isinstance(config, dict):
        config = NodeConfig.from_dict(config)
    node = Node(config)
    await node.prepare()  # a foreign store directory fails here, not inside a nursery's exception group
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        if ready_timeout_s is not None:
            await node.wait_ready(ready_timeout_s)
        try:
            yield node
        finally:
            node.stop()
