"""The JetStream API's leader-side work: stream info, message reads and leader stepdowns, served at the
leader of the group concerned (layer L5).

Owns: the request methods `jsapi.stream_info`, `jsapi.msg_get`, `jsapi.msg_batch` (a batched direct get's
chunk), `jsapi.msg_bulk` (a bulk get's chunk), `jsapi.stream_stepdown` (at the stream leader),
`jsapi.meta_stepdown` and `jsapi.meta_index` (at the meta leader), added to the node's request table (`Handlers`)
so that they travel by `$rpc` like every other method; and the JSON a stream info is made of (nats-server
`StreamInfo`: `config`, `created`, `state`, `cluster`, `ts`).

Invariants:
  1. Every method here needs the leader and raises `NotLeader` elsewhere, before doing anything (handlers
     invariant 1): the router carries the request on, so any node can be asked.
  2. A stream info's `state` and timestamps are read from the leader's store in one synchronous step
     (no checkpoint between them): the numbers describe one moment of one store.
  3. A stepdown answers success only once this node no longer leads the group; a transfer that did not
     happen within a few election timeouts is `RaftGeneral` (10041), never a false success.
  4. A served config is the stored config with the defaults nats-server fills in and the `_nats.*`
     metadata of ADR-44 (`served_metadata`); durations are nanoseconds.
  5. Errors answered here use nats-server's descriptions exactly, not the store's more detailed ones.
  6. Read-your-writes: a stream info carries the config version (`config_index`) the asking node's meta
     state holds, and the leader answers once its group applied that config (an update's new limits
     already enforced), or `NotLeader` after `CONFIG_WAIT_S`, which the caller's router retries.
  7. A stream info's config is the meta state's assignment as this leader reads it when it answers; the
     replicas' standing (each peer's `replica.state`) is collected only on a clustered node, the only one
     that serves it (a standalone nats-server's info names just its leader): a create's answer on one
     node asks nothing more.
  8. A stream info asked with `"config": false` carries `"config": null`: the asker replaces it with the
     config it was answered (`JsApi._settled_info`), so it is not served twice for one answer.

Imports: stdlib, L0, L1 (`jsapi`, `raft` status and errors), L3 (`meta` errors), trio, server siblings.
Reference: nats-server `server/jetstream_api.go` (`jsStreamInfoRequest`, `jsMsgGetRequest`,
`jsStreamLeaderStepDownRequest`, `jsLeaderStepDownRequest`, `getStepDownPreferredPlacement`),
`server/jetstream_cluster.go` (`clusterInfo`), ADR-44.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import trio

from jsraft.errors import InvalidSubject, JsraftError, NoMessageFound
from jsraft.jsapi import StreamConfig, parse_stream_config, served_metadata, validate_stream_name
from jsraft.meta import ClusterNoPeers, StreamOffline
from jsraft.raft.errors import NotLeader
from jsraft.raft.status import Role, Status
from jsraft.server.api.bulk_get import pack_chunk
from jsraft.server.api.direct_batch import read_chunk, read_multi_last
from jsraft.server.errors import NoLeader
from jsraft.server.api.jsapi_codec import RaftGeneral, rfc3339
from jsraft.server.groups.meta_service import META_GROUP
from jsraft.server.groups.stream_replica import StreamReplica

if TYPE_CHECKING:
    from jsraft.server.api.api_parts import ApiParts

Result = tuple[Any, Sequence[bytes]]
STEPDOWN_ELECTION_TIMEOUTS = 4  # how long a stepdown may take, in election timeouts (invariant 3)
SUBJECTS_MAX = 100_000  # subject counts one stream info carries (nats-server JSMaxSubjectDetails)


def config_json(raw: bytes | str, required_level: int, api_level: int,
                parsed: StreamConfig | None = None) -> dict[str, Any]:
    """The config a response serves by a node at `api_level` (invariant 4). `parsed`: `raw` already
    parsed (an online assignment's `config`), so it is not parsed again on every info."""
    config = parsed if parsed is not None else parse_stream_config(raw.encode() if isinstance(raw, str) else raw)[0]
    served = config.to_json()
    served["metadata"] = served_metadata(config.metadata, required_level=required_level, api_level=api_level)
    return served


def state_json(state: Any, first_ts_ns: int, last_ts_ns: int, consumers: int,
               subjects: dict[str, int] | None) -> dict[str, Any]:
    """nats-server `StreamState`, in its field order; zero counts left out where nats-server omits them."""
    out: dict[str, Any] = {"messages": state.msgs, "bytes": state.bytes, "first_seq": state.first_seq,
                           "first_ts": rfc3339(first_ts_ns), "last_seq": state.last_seq,
                           "last_ts": rfc3339(last_ts_ns)}
    if state.num_subjects:
        out["num_subjects"] = state.num_subjects
    if subjects:
        out["subjects"] = subjects
    if state.num_deleted:
        out["num_deleted"] = state.num_deleted
    out["consumer_count"] = consumers
    return out


def cluster_json(cluster_name: str, group: str | None, leader: str, replicas: dict[str, dict[str, Any]], *,
                 leader_since_ns: int | None = None, heard_ns: dict[str, int] | None = None) -> dict[str, Any]:
    """nats-server `ClusterInfo`: the leader, since when it leads (`leader_since_ns`, wall clock), and every
    other peer with its standing; a peer's `active` is the nanoseconds since the leader last heard from it
    (`heard_ns`: peer -> monotonic ns), 0 when it never did, as nats-server serves a peer not yet heard.
    Each peer also carries jsraft's `status` (current, lag, repairing, drifted, offline: DESIGN §8)."""
    out: dict[str, Any] = {"name": cluster_name}
    if group is not None:
        out["raft_group"] = group
    out["leader"] = leader
    if leader_since_ns is not None:
        out["leader_since"] = rfc3339(leader_since_ns)
    now_ns, heard_ns = time.monotonic_ns(), heard_ns or {}
    peers = []
    for name in sorted(replicas):
        if name == leader:
            continue
        answer = replicas[name]
        active_ns = now_ns - heard_ns[name] if name in heard_ns else 0
        peer: dict[str, Any] = {"name": name, "current": bool(answer.get("current")), "active": active_ns}
        if answer.get("offline") or answer.get("status") == "offline":
            peer["offline"] = True
        if int(answer.get("lag") or 0):
            peer["lag"] = int(answer["lag"])
        peer["peer"] = name
        peer["status"] = str(answer.get("status", "offline"))
        peers.append(peer)
    if peers:
        out["replicas"] = peers
    return out


# Below the router's attempt timeout (2 s in test mode, 5 s otherwise): a leader that cannot apply in time
# answers NotLeader, which the caller retries, instead of leaving the caller to time out.
CONFIG_WAIT_S = 1.0


async def _config_applied(replica: StreamReplica, config_index: int) -> None:
    """Invariant 6: wait until the group applied the config of meta index `config_index` (the leader
    proposes it as soon as its own meta state has it: stream_replica invariant 5). A replica that closes
    or stops meanwhile (an update this node cannot run stops it: stream_replica invariant 6) will never
    apply it: `NotLeader` at once, and whoever leads next answers."""
    if replica.machine is not None and replica.machine.config_meta_index >= config_index:
        return  # applied already (a create's info asks for index 0): no deadline to set up
    with trio.move_on_after(CONFIG_WAIT_S):
        if replica.machine is not None and replica.machine.config_meta_index < config_index:
            # Propose it now rather than at the replica's next tick (up to 100 ms: most of a new
            # stream's create time); done under the replica's propose lock, so at most once.
            try:
                await replica.reconcile_config_now()
            except JsraftError:
                pass  # not leading any more, or the proposal failed: the loop below decides
        def settled() -> bool:
            return replica.closed or replica.stopped_reason is not None or (
                replica.machine is not None and replica.machine.config_meta_index >= config_index)
        await replica.runtime.progress.until(settled, CONFIG_WAIT_S)  # woken after each cycle, not polled
        if replica.machine is not None and replica.machine.config_meta_index >= config_index:
            return
    raise NotLeader(None)


class LeaderSide:
    """The `jsapi.*` request methods; `register` adds them to a node's request table."""

    def __init__(self, parts: "ApiParts", rng: random.Random | None = None) -> None:
        self.parts = parts
        self._rng = rng or random.Random()

    def register(self, table: dict[str, Any]) -> None:
        table.update({"jsapi.stream_info": self.stream_info, "jsapi.msg_get": self.msg_get,
                      "jsapi.msg_batch": self.msg_batch, "jsapi.msg_bulk": self.msg_bulk,
                      "jsapi.msg_multi_last": self.msg_multi_last,
                      "jsapi.stream_stepdown": self.stream_stepdown, "jsapi.meta_stepdown": self.meta_stepdown,
                      "jsapi.meta_index": self.meta_index})

    async def _leading(self, args: dict[str, Any]) -> StreamReplica:
        """Invariant 1."""
        name = validate_stream_name(str(args["stream"]))
        replica = self.parts.local.replica(name, args)
        await replica.wait_leader(1.0)
        if replica.closed or self.parts.local.replicas.get(name) is not replica:
            raise NotLeader(None)  # stopped or replaced while we waited: whoever leads now answers
        stopped = replica.stopped_reason
        if stopped is not None:  # stream_replica invariant 6
            raise StreamOffline(stopped)
        return replica

    # --- Stream info -----------------------------------------------------------------------------------

    async def stream_info(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        replica = await self._leading(args)
        await _config_applied(replica, int(args.get("config_index", 0)))
        config = self.parts.config
        replicas: Any = None
        if config.clustered:  # invariant 7
            # The replicas' standing, collected by the node's own stream info (it asks every peer).
            base, _ = await self.parts.handle(self.parts.name, "stream.info", {"stream": replica.name}, [])
            replicas = base["cluster"]["replicas"]
        replica = await self._leading(args)  # still leading after those awaits
        assignment = self.parts.meta.stream(replica.name)
        state, first_ts_ns, last_ts_ns = read_state(replica)  # invariant 2: no await from here on
        subjects = None
        if args.get("subjects_filter"):
            counts = replica.store.subject_counts(str(args["subjects_filter"]))
            subjects = dict(sorted(counts.items())[:SUBJECTS_MAX])
        info = {
            # Left out when the asker serves the config it was answered (a create's or update's: invariant 8).
            "config": config_json(assignment.config_raw, assignment.required_level, config.api_level,
                                  assignment.config) if args.get("config", True) else None,
            "created": rfc3339(assignment.created_ns),
            "state": state_json(state, first_ts_ns, last_ts_ns, len(replica.adapter.consumers.entries),
                                subjects),
            # A standalone nats-server names only itself, as the leader (no cluster name, no group).
            "cluster": cluster_json(config.cluster_name, replica.group, self.parts.name, replicas,
                                    leader_since_ns=replica.leader_since_ns,
                                    heard_ns=self.parts.raft_heard_ns.get(replica.group))
            if config.clustered else {"leader": self.parts.name},
            "ts": rfc3339(time.time_ns()),
        }
        return info, ()

    # --- Messages ---------------------------------------------------------------------------------------

    async def msg_get(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        """One message: by `seq`, the last on `last_by_subj`, or the next on `next_by_subj` from `seq`.
        None there is 10037 in nats-server's exact words, "no message found" (invariant 5)."""
        replica = await self._leading(args)
        store = replica.store
        seq = int(args.get("seq") or 0)
        try:
            if args.get("next_by_subj"):
                msg = store.load_next(str(args["next_by_subj"]), max(seq, 1))
            elif args.get("last_by_subj"):
                msg = store.load_last(str(args["last_by_subj"]))
            elif seq > 0:
                msg = store.load(seq)
            else:
                raise NoMessageFound()
        except (NoMessageFound, InvalidSubject):  # the store's own words name the seq or subject; the API's
            # do not. nats-server answers a subject no message can have (`$O.b.M.`, `a b`) the same way.
            raise NoMessageFound() from None
        return {"subject": msg.subject, "seq": msg.seq, "time_ns": msg.timestamp_ns}, (msg.headers, msg.payload)

    async def msg_batch(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        """One chunk of a batched direct get (`direct_batch.read_chunk`), read at the leader."""
        replica = await self._leading(args)
        return read_chunk(replica.store, args)

    async def msg_multi_last(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        """The last message of each subject of a `multi_last` direct get, read at the leader."""
        replica = await self._leading(args)
        return read_multi_last(replica.store, args)

    async def msg_bulk(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        """One packed chunk of a `$JSRAFT.BULK.GET` (`bulk_get.pack_chunk`), read at the leader."""
        replica = await self._leading(args)
        return pack_chunk(replica.store, args)

    # --- Meta reads ------------------------------------------------------------------------------------

    async def meta_index(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        """The meta leader's commit index, for a read barrier (Raft's ReadIndex, §6.4): a node that has
        applied up to it has seen every admin change committed before the request arrived. Only a leader
        that applied its own term's no-op knows its commit index is current."""
        status = self.parts.runtime.status(META_GROUP).raft
        if status.role is not Role.LEADER:
            raise NotLeader(status.leader_id)
        if not self.parts.meta_ready():
            raise NoLeader("the meta leader has not applied its term's first entry yet")
        return {"commit_index": status.commit_index}, ()

    # --- Leader stepdowns -------------------------------------------------------------------------------

    async def stream_stepdown(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        replica = await self._leading(args)
        await self._step_down(replica.group, args)
        return {"success": True}, ()

    async def meta_stepdown(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        status = self.parts.runtime.status(META_GROUP).raft
        if status.role is not Role.LEADER:
            raise NotLeader(status.leader_id)
        await self._step_down(META_GROUP, args)
        return {"success": True}, ()

    async def _step_down(self, group: str, args: dict[str, Any]) -> None:
        """Hand `group`'s leadership to a chosen voter and wait until it moved (invariant 3). The core drops a
        transfer not done within an election timeout (Raft §3.10: its target was still catching up, say a
        replica created a moment ago, or the TimeoutNow was lost); while this leader still leads, it is
        asked again, until the stepdown's own bound."""
        runtime = self.parts.runtime
        target = self._target(runtime.status(group).raft, args)
        timeout_s = STEPDOWN_ELECTION_TIMEOUTS * self.parts.config.election_ticks * self.parts.tick_s
        with trio.move_on_after(timeout_s):
            while (raft := runtime.status(group).raft).role is Role.LEADER:
                if raft.lead_transferee is None:  # not asked yet, or dropped by the core
                    try:
                        runtime.transfer_leadership(group, target)
                    except JsraftError as error:
                        raise RaftGeneral(error.description) from None
                await trio.sleep(self.parts.tick_s / 2)
            return
        raise RaftGeneral(f"leadership transfer to {target} did not complete")

    def _target(self, status: Status, args: dict[str, Any]) -> str:
        """The new leader: the preferred server, or a connected voter matching the placement (nats-server
        `getStepDownPreferredPlacement`; jsraft nodes carry no tags) — one that answered this leader lately
        (`Status.reachable_followers`) when there is such a one, as nats-server's `StepDown` picks a peer
        heard from within three heartbeats: a voter whose node is up but whose replica does not answer
        would never take the leadership."""
        others = sorted(voter for voter in status.voters if voter != self.parts.name)
        preferred = str(args.get("preferred") or "")
        if preferred:
            if preferred == self.parts.name:
                raise ClusterNoPeers(f"preferred server {json.dumps(preferred)} is already leader")
            if preferred not in others:
                raise ClusterNoPeers(f"preferred server {json.dumps(preferred)} not known")
            return preferred
        online = self.parts.online()
        candidates = [voter for voter in others if voter in online]
        heard = [voter for voter in candidates if voter in status.reachable_followers]
        candidates = heard or candidates
        cluster = str(args.get("cluster") or "")
        if (cluster and cluster != self.parts.config.cluster_name) or args.get("tags"):
            candidates = []
        if not candidates:
            raise ClusterNoPeers("no replacement peer connected")
        return self._rng.choice(candidates)


def read_state(replica: StreamReplica) -> tuple[Any, int, int]:
    """The store's state and the timestamps of its first and last live messages (0: none)."""
    store = replica.store
    state = store.state()
    if state.msgs == 0:
        return state, 0, 0
    try:
        first_ts_ns = store.load_next(None, state.first_seq).timestamp_ns
        last_ts_ns = store.load_last(">").timestamp_ns
    except JsraftError:  # a damaged record is being repaired; its time is not known now
        return state, 0, 0
    return state, first_ts_ns, last_ts_ns
