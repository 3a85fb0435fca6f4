"""`ConsumerEvents`: the consumer advisories and ack metrics a stream's leader publishes (layer L3½, synchronous).

Owns: nats-server's JSON of `$JS.EVENT.ADVISORY.CONSUMER.{CREATED,DELETED,PAUSE,MSG_NAKED,MSG_TERMINATED,
LEADER_ELECTED}.<stream>.<consumer>` and of the ack metric `$JS.EVENT.METRIC.CONSUMER.ACK.<stream>.<consumer>` (sampled by
`sample_freq`); the leader's watch over pauses in force, to announce a pause's end (`paused: false`) and to
wake delivery when it passes (`pause_due_ns`); and the queue of events waiting to go out. The
`MAX_DELIVERIES` advisory stays with the delivery pass that decides it (`consumer_pull`).

Invariants:
  1. Events are leader-side side effects only: nothing here is proposed or applied, so the sampling
     decision (a random draw) never touches replicated state and replicas stay deterministic.
  2. Nothing is published from inside the Raft apply path: `on_applied` and `on_ack` only queue; the
     service's task calls `flush`, which hands the queue to the node's `AdvisoryLog` (kept there for
     readers, published on the client port when one is attached).
  3. Bounded: at most `EVENTS_QUEUED_MAX` events wait for a flush; beyond it an event is dropped and
     counted (advisories are best effort in nats-server too).
  4. `LEADER_ELECTED` only for a replicated stream (more than one peer), for each consumer when this
     node starts leading the stream (its consumers' leader, DESIGN §7) and for a consumer created while
     it leads, as a clustered nats-server raises it when a consumer's group elects; single servers
     raise none. A replica's `current` is not known at that moment: only the leader is said current.
  5. A pause advisory is raised when a consumer's `pause_until` changes (create, the PAUSE request) and
     once when a pause in force runs out (nats-server's pause timer), with `pause_until` the zero time
     when it was lifted by a resume.

Imports: stdlib, L0, L1 (`jsapi`), L3 (`consumer`), replica siblings (`advisories`).
Reference: nats-server `server/jetstream_events.go` (JSConsumerActionAdvisory, JSConsumerPauseAdvisory,
JSConsumerDeliveryNakAdvisory, JSConsumerDeliveryTerminatedAdvisory, JSConsumerAckMetric),
`server/consumer.go` (sampleAck, shouldSample, sendPauseAdvisoryLocked, processNak, processTerm).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from jsraft.consumer import ApplyResult, ConsumerEntry
from jsraft.consumer.acks import AckBody, AckKind, AckSubject
from jsraft.jsapi.consumer_checks import sample_percent
from jsraft.replica.advisories import AdvisoryLog
from jsraft.jsapi.consumer_config import rfc3339

if TYPE_CHECKING:
    from jsraft.replica.consumer_pull import Leading

ADVISORY = "$JS.EVENT.ADVISORY.CONSUMER"
METRIC_ACK = "$JS.EVENT.METRIC.CONSUMER.ACK"
ACTION_TYPE = "io.nats.jetstream.advisory.v1.consumer_action"
PAUSE_TYPE = "io.nats.jetstream.advisory.v1.consumer_pause"
NAK_TYPE = "io.nats.jetstream.advisory.v1.nak"
TERMINATED_TYPE = "io.nats.jetstream.advisory.v1.terminated"
LEADER_ELECTED_TYPE = "io.nats.jetstream.advisory.v1.consumer_leader_elected"
ACK_METRIC_TYPE = "io.nats.jetstream.metric.v1.consumer_ack"
EVENTS_QUEUED_MAX = 4096

Event = tuple[str, dict[str, Any]]  # (subject, body)


def _event(kind: str, event_type: str, stream: str, consumer: str, now_ns: int, **fields: Any) -> Event:
    body = {"type": event_type, "id": uuid.uuid4().hex, "timestamp": rfc3339(now_ns), "stream": stream,
            "consumer": consumer, **fields}
    prefix = METRIC_ACK if event_type == ACK_METRIC_TYPE else f"{ADVISORY}.{kind}"
    return f"{prefix}.{stream}.{consumer}", body


def action_event(stream: str, consumer: str, action: str, now_ns: int) -> Event:
    """`CONSUMER.CREATED` (`action` create) or `CONSUMER.DELETED` (delete)."""
    kind = "CREATED" if action == "create" else "DELETED"
    return _event(kind, ACTION_TYPE, stream, consumer, now_ns, action=action)


def pause_event(stream: str, consumer: str, until_ns: int, now_ns: int) -> Event:
    """nats-server serves the pause time even when it is past (paused false); a resume has the zero time."""
    return _event("PAUSE", PAUSE_TYPE, stream, consumer, now_ns, paused=until_ns > now_ns,
                  pause_until=rfc3339(until_ns))


def leader_elected_event(stream: str, consumer: str, leader: str, peers: Iterable[str], now_ns: int) -> Event:
    """nats-server `JSConsumerLeaderElectedAdvisory` (invariant 4)."""
    replicas = [{"name": peer, "current": peer == leader, "active": 0, "peer": peer} for peer in sorted(peers)]
    return _event("LEADER_ELECTED", LEADER_ELECTED_TYPE, stream, consumer, now_ns, leader=leader,
                  replicas=replicas)


def ack_event(stream: str, consumer: str, where: AckSubject, body: AckBody, now_ns: int) -> Event | None:
    """`MSG_NAKED` / `MSG_TERMINATED` for a NAK / TERM of a pending message; None for other acks."""
    fields: dict[str, Any] = {"consumer_seq": where.consumer_seq, "stream_seq": where.stream_seq,
                              "deliveries": where.delivery_count}
    if where.domain:
        fields["domain"] = where.domain
    if body.kind is AckKind.NAK:
        return _event("MSG_NAKED", NAK_TYPE, stream, consumer, now_ns, **fields)
    if body.kind is AckKind.TERM:
        if body.reason:
            fields["reason"] = body.reason
        return _event("MSG_TERMINATED", TERMINATED_TYPE, stream, consumer, now_ns, **fields)
    return None


def ack_metric(stream: str, consumer: str, where: AckSubject, now_ns: int) -> Event:
    """nats-server `JSConsumerAckMetric`: `ack_time` from the delivery (the ack subject's timestamp)."""
    fields: dict[str, Any] = {"consumer_seq": where.consumer_seq, "stream_seq": where.stream_seq,
                              "ack_time": max(now_ns - where.timestamp_ns, 0), "deliveries": where.delivery_count}
    if where.domain:
        fields["domain"] = where.domain
    return _event("", ACK_METRIC_TYPE, stream, consumer, now_ns, **fields)


def should_sample(sample_freq: str | None, rng: random.Random) -> bool:
    """nats-server `shouldSample`: never at 0, always from 100, else that percentage of the acks."""
    try:
        percent = sample_percent(sample_freq)
    except ValueError:  # refused at create: a stored config always parses
        return False
    if percent <= 0:
        return False
    return percent >= 100 or rng.randrange(100) < percent


class ConsumerEvents:
    """The events of one stream's consumers, raised while this node leads it."""

    def __init__(self, stream: str, log: AdvisoryLog, *, leader: str = "",
                 peers: Callable[[], Sequence[str]] = tuple, rng: random.Random | None = None) -> None:
        self.stream = stream
        self.log = log
        self.leader = leader  # this node's name
        self.peers = peers  # the stream group's peers now
        self.rng = rng or random.Random()
        self.dropped = 0
        self._queue: list[Event] = []
        self._paused: dict[str, int] = {}  # consumer -> the end of a pause in force seen here (invariant 5)

    def _put(self, event: Event | None) -> None:
        if event is None:
            return
        if len(self._queue) >= EVENTS_QUEUED_MAX:  # invariant 3
            self.dropped += 1
            return
        self._queue.append(event)

    # --- Inputs (invariant 2: queue only) ----------------------------------------------------------------

    def on_elected(self, names: Iterable[str], now_ns: int) -> None:
        """This node now leads the stream and `names` (invariant 4)."""
        peers = list(self.peers())
        if len(peers) > 1:
            for name in names:
                self._put(leader_elected_event(self.stream, name, self.leader, peers, now_ns))

    def on_applied(self, applied: ApplyResult, entries: dict[str, ConsumerEntry], now_ns: int) -> None:
        """Creates and deletes applied on the leader; a consumer created paused announces its pause."""
        for name in applied.created:
            self._put(action_event(self.stream, name, "create", now_ns))
            self.on_elected([name], now_ns)
            entry = entries.get(name)
            if entry is not None and entry.paused_until_ns:
                self._put(pause_event(self.stream, name, entry.paused_until_ns, now_ns))
        for name in applied.deleted:
            self._paused.pop(name, None)
            self._put(action_event(self.stream, name, "delete", now_ns))

    def on_ack(self, leading: "Leading", where: AckSubject, body: AckBody, pending: bool, now_ns: int) -> None:
        """An ack of `where` that this leader holds as `pending`: a NAK / TERM advisory, or a sampled ack
        metric (nats-server raises them only for a message still pending)."""
        if not pending:
            return
        if body.kind in (AckKind.ACK, AckKind.NEXT):
            if should_sample(leading.entry.config.sample_freq if leading.entry.config else None, self.rng):
                self._put(ack_metric(self.stream, leading.name, where, now_ns))
            return
        self._put(ack_event(self.stream, leading.name, where, body, now_ns))

    def on_pause(self, name: str, before_ns: int, until_ns: int, now_ns: int) -> None:
        """A PAUSE request committed: an advisory when it changed `pause_until` (invariant 5)."""
        self._paused.pop(name, None)
        if until_ns != before_ns:
            self._put(pause_event(self.stream, name, until_ns, now_ns))

    # --- Pause timers ------------------------------------------------------------------------------------

    def pause_due_ns(self, leading: Iterable["Leading"], now_ns: int) -> int | None:
        """The earliest end of a pause in force (the service's task wakes then to deliver again)."""
        due = None
        for each in leading:
            until_ns = each.entry.paused_until_ns
            if until_ns > now_ns:
                self._paused[each.name] = until_ns
                due = until_ns if due is None else min(due, until_ns)
        return due

    def expire_pauses(self, leading: dict[str, "Leading"], now_ns: int) -> None:
        """Announce every pause seen in force here that has now run out."""
        for name, until_ns in list(self._paused.items()):
            each = leading.get(name)
            if each is None or each.entry.paused_until_ns != until_ns:
                del self._paused[name]  # deleted, or resumed / re-paused by a request (announced there)
            elif until_ns <= now_ns:
                del self._paused[name]
                self._put(pause_event(self.stream, name, until_ns, now_ns))

    # --- Output ------------------------------------------------------------------------------------------

    def flush(self) -> None:
        """Hand the queued events to the node's advisory log, which publishes them (invariant 2)."""
        queue, self._queue = self._queue, []
        for subject, body in queue:
            self.log.publish(subject, body)
