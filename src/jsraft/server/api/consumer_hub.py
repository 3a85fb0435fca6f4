"""`ConsumerHub`: pull requests and acks on the client port, carried to the consumer's leader (layer L5).

Owns: the node's internal subscriptions on `$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>` (pull
requests), `$JS.ACK.>` (acks: `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>`)
and `$JS.FC.>` (push consumers' flow-control answers, `$JS.FC.<stream>.<consumer>.<id>`, which take the
acks' lanes), and getting each to the leader of its stream: straight into the local `ConsumerService`
when this node leads, else over `$rpc` (`consumer.next`, `consumer.acks`, served here too). It also
gives every service the node's `publish` — deliveries, statuses and double-ack answers go out through
the client port, and cluster interest routing (`routes`) takes them to the requester's node — and, for
push consumers, `has_interest` (does a client subscription here or at a peer match a deliver subject)
and `waits`, the node's `InterestWaits` (push consumers led here waiting for a subscriber: those a new
client subscription matches are woken, at a cost in proportion to them, not to the streams open here);
each stream replica's `ConsumerService.port` is this hub, so push deliveries need no request. It serves
the embedded JetStream context's pulls and double acks (`consumer.fetch`, `consumer.ack_sync`), whose
answers are collected here (`_collectors`, by reply subject) and returned over `$rpc` instead.

Like the stream subjects (`stream_publish`), these subscriptions are local to each node (routes'
decision): a request is carried once, by the node its client is connected to.

Invariants:
  1. Before a pull request is carried to another node, the interest changes waiting here are sent to
     the peers (`Routes.flush`): the requester's reply subscription is known at the leader before the
     request, so the first delivery is not lost (routes invariant 4 orders one link's frames).
  2. Acks of one stream from this node reach its leader in arrival order (one lane per stream sends one
     batch at a time) and are at most once, like NATS acks: a batch that finds no leader is dropped
     and counted, and the messages are redelivered after their ack wait.
  3. A pull request for a stream or consumer that does not exist is answered `503` (no responders),
     as nats-server's absent consumer subscription answers it.
  4. Bounded: `ACK_LANE_MAX` acks wait per stream; beyond it an ack is dropped and counted. A collector
     holds at most its batch plus a few statuses; it exists only while its request is served.
  5. Read-your-acks: `acks_carried(stream)` returns once the acks taken here before it was called were
     handed to the leader, so a consumer info carried after it reaches the leader after them (whose
     info then waits for the pass that takes them: consumer_service invariant 5), as a client's acks
     and its next info travel one route in order on nats-server.
  6. `publish_all(sends)` is `publish` of each in order, except that consecutive deliveries to one reply
     subject go to the client port as one run (`client_deliver`: matched once, one write for a batch);
     with `now`, a run goes to a client's socket at once (`ConnOutbound.deliver_run`).

Imports: stdlib, L0, L1 (`raft` errors), L3 (`consumer.acks`), trio, server siblings. Reference:
nats-server `server/consumer.go` (`processNextMsgReq`, `processAck`), ADR-15 (JetStream subjects).
"""

from __future__ import annotations

import itertools
import json
import logging
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from jsraft.consumer.acks import literal_ack_target
from jsraft.errors import BadRequest, JsraftError, StreamNotFound
from jsraft.raft.errors import NotLeader
from jsraft.server.nats.client_server import ClientServer, InternalMsg, InternalSubscription, is_valid_subject
from jsraft.server.groups.consumer_acks import Ack
from jsraft.server.groups.consumer_errors import ConsumerNotFound
from jsraft.replica.consumer_pull import Send
from jsraft.server.groups.consumer_service import ConsumerService
from jsraft.server.groups.interest_waits import InterestWaits

if TYPE_CHECKING:
    from jsraft.server.api.api_parts import ApiParts

log = logging.getLogger("jsraft.server.consumers")

NEXT_SUBJECT = "$JS.API.CONSUMER.MSG.NEXT.*.*"
ACK_SUBJECT = "$JS.ACK.>"
FC_SUBJECT = "$JS.FC.>"  # push consumers' flow-control answers: `$JS.FC.<stream>.<consumer>.<id>`
NO_RESPONDERS = b"NATS/1.0 503\r\n\r\n"
ACK_LANE_MAX = 65536
ACKS_PER_BATCH = 1024
COLLECT_PREFIX = "$JSRAFT.COLLECT."  # replies the embedded context's requests are collected on
FETCH_BATCH_MAX = 4096
# A `Send` as `ClientServer.deliver_as` takes it: (shown, reply, headers, payload), made in C for a whole run.
_AS_DELIVERY = operator.itemgetter(4, 2, 3, 1)
FETCH_EXPIRES_MAX_S = 1.0  # one `consumer.fetch` waits at most this long (below the router's attempt timeout)


class _Lane:
    """The acks of one stream waiting here for its leader on another node (invariants 2 and 5)."""

    __slots__ = ("items", "taken", "carried", "progress")

    def __init__(self) -> None:
        self.items: list[Ack] = []
        self.taken = 0  # acks ever queued in this lane
        self.carried = 0  # of those, how many were handed to the leader (or dropped there)
        self.progress = trio.Event()  # set (and replaced) after each batch, and when the lane ends


class ConsumerHub:
    def __init__(self, parts: "ApiParts", clients: ClientServer) -> None:
        self.parts = parts
        self.clients = clients
        self.acks_dropped = 0
        self._lanes: dict[str, _Lane] = {}
        self._collectors: dict[str, Callable[[Send], None]] = {}
        self._collector_ids = itertools.count(1)
        self.waits = InterestWaits()  # kept by each service of the node (consumer_service invariant 9)
        clients.subscribe_internal(NEXT_SUBJECT, self._on_next, sync=True)
        acks = clients.subscribe_internal(ACK_SUBJECT, self._on_ack, sync=True)
        clients.set_ack_path(acks, self._ack, self._ack_run)  # a client's acks here while nothing else matches
        # Flow-control answers take the acks' way to the leader (same lanes, same order, at most once).
        clients.subscribe_internal(FC_SUBJECT, self._on_ack, sync=True)
        clients.sublist.observers.append(self._on_subscription)

    def register(self, table: dict[str, Any]) -> None:
        """The `$rpc` methods served here: a pull request, a batch of acks, an embedded fetch, a sync ack."""
        table.update({"consumer.next": self.next_request, "consumer.acks": self.ack_batch,
                      "consumer.fetch": self.fetch, "consumer.ack_sync": self.ack_sync})

    def _on_subscription(self, sub: Any, added: bool) -> None:
        """A client subscribed here: wake each consumer service with a push consumer waiting for
        interest on that subject, so it delivers now rather than at its next look (up to
        `INTEREST_POLL_NS`). nats-py subscribes a push consumer's deliver subject only after creating
        it; nats-server starts delivering at that subscription. Only the waiting consumers are looked at."""
        if not added or not self.waits or type(sub) is InternalSubscription:
            return
        replicas = self.parts.local.replicas
        for service in self.waits.matching(sub.subject, lambda s: replicas.get(s.stream) is s.replica):
            service.wake()

    def has_interest(self, subject: str) -> bool:
        """Whether a client subscription here or at a peer matches `subject` (push consumers deliver
        only then; this node's internal subscriptions do not count)."""
        result = self.clients.sublist.match(subject)
        if any(type(sub) is not InternalSubscription for sub in result.plain):
            return True
        if any(type(sub) is not InternalSubscription for members in result.queues for sub in members):
            return True
        return self.parts.peer_interest(subject)

    def has_reply_interest(self, reply: str) -> bool:
        """Whether a pull request's reply subject is still listened on: a client subscription here or at
        a peer, or a collector of the embedded context's pulls (consumer_pull invariant 5)."""
        return reply in self._collectors or self.has_interest(reply)

    def publish(self, send: Send) -> None:
        collector = self._collectors.get(send.subject)
        if collector is not None:
            collector(send)
        elif send.shown is not None:
            self.clients.deliver_as(send.subject, [(send.shown, send.reply, send.headers, send.payload)])
        else:
            self.clients.publish(send.subject, send.payload, reply=send.reply, headers=send.headers)

    def publish_all(self, sends: list[Send], now: bool = False) -> None:
        """`publish` of each of `sends`, in order; a run of deliveries to one reply subject as one run of
        `ClientServer.deliver_as` (invariant 6)."""
        index, count = 0, len(sends)
        while index < count:
            send = sends[index]
            end = index + 1
            if send.shown is None or send.subject in self._collectors:
                self.publish(send)
            else:
                while end < count and sends[end].shown is not None and sends[end].subject == send.subject:
                    end += 1
                self.clients.deliver_as(send.subject, list(map(_AS_DELIVERY, sends[index:end])), now)
            index = end

    def _local(self, stream: str) -> ConsumerService | None:
        """This node's service for `stream` when it leads it now."""
        replica = self.parts.local.replicas.get(stream)
        if replica is None:
            return None
        replica.consumers.follow(replica.leader)
        return replica.consumers if replica.consumers.active else None

    # --- Pull requests --------------------------------------------------------------------------------

    def _on_next(self, msg: InternalMsg) -> None:
        tokens = msg.subject.split(".")
        stream, consumer = tokens[5], tokens[6]
        if not msg.reply:
            msg.done()  # nowhere to deliver to: nats-server ignores it too
            return
        service = self._local(stream)
        if service is not None:
            try:
                service.pull(consumer, msg.reply, msg.payload, self.publish)
            except ConsumerNotFound:
                self.clients.publish(msg.reply, b"", headers=NO_RESPONDERS)
            except JsraftError as error:  # e.g. a damaged record met while looking: the request times out
                log.info("pull request for %s.%s not served: %s", stream, consumer, error)
            msg.done()
            return
        if not self.clients.start_soon(self._carry_next, stream, consumer, msg):
            msg.done()

    async def _carry_next(self, stream: str, consumer: str, msg: InternalMsg) -> None:
        try:
            self.parts.flush_routes()  # invariant 1
            await self.parts.call_stream(stream, "consumer.next", {"consumer": consumer, "reply": msg.reply},
                                        [msg.payload])
        except (StreamNotFound, ConsumerNotFound):
            self.clients.publish(msg.reply or "", b"", headers=NO_RESPONDERS)  # invariant 3
        except JsraftError as error:
            log.info("pull request for %s.%s not carried: %s", stream, consumer, error)
        finally:
            msg.done()

    async def next_request(self, args: dict[str, Any], blobs: list[bytes]) -> tuple[Any, list[bytes]]:
        """`consumer.next` at the stream leader."""
        service = await self._leading(str(args["stream"]))
        service.pull(str(args["consumer"]), str(args["reply"]), blobs[0], self.publish)
        return {}, []

    async def _leading(self, stream: str) -> ConsumerService:
        replica = self.parts.local.replicas.get(stream)
        if replica is None:
            self.parts.meta.stream(stream)  # StreamNotFound when it does not exist at all
            raise NotLeader(None)
        await replica.wait_leader(1.0)
        replica.consumers.follow(replica.leader)
        replica.consumers.require()
        return replica.consumers

    # --- Acks -------------------------------------------------------------------------------------------

    def _on_ack(self, msg: InternalMsg) -> None:
        msg.done()
        self._ack(msg.subject, msg.reply, msg.payload)

    def _ack(self, subject: str, reply: str | None, payload: bytes) -> bool:
        """One ack or flow-control answer, from `_on_ack` or straight from the client port's ack shortcut
        (`ClientServer.set_ack_path`); False, and nothing taken, when `subject` is not a valid subject
        (the port then routes it as any publish, which reaches nobody). An ack subject of the form this
        node hands out is checked and parsed by one match (`literal_ack_target`), once for its way here
        and through the leader's pass (consumer_acks)."""
        target = literal_ack_target(subject)
        if target is not None:
            stream = target[0]
        elif not is_valid_subject(subject):
            return False
        else:
            tokens = subject.split(".")
            if tokens[1] == "FC":
                stream = tokens[2] if len(tokens) == 5 else ""
            else:
                stream = tokens[2] if len(tokens) == 9 else tokens[4] if len(tokens) >= 12 else ""
            if not stream:
                return True
        self._take(stream, [(subject, reply or "", bytes(payload), target)])
        return True

    def _ack_run(self, subjects: list[str]) -> list[str]:
        """`_ack(subject, None, b"")` of each of a client's run of acks (`ClientServer.ack_run_path`), in
        order; those it refused. A run of one stream's acks of the literal form goes to its service (or
        lane) as one batch."""
        refused: list[str] = []
        stream, items = "", []  # the batch being gathered: consecutive acks of one stream
        for subject in subjects:
            target = literal_ack_target(subject)
            if target is not None and target[0] == stream:
                items.append((subject, "", b"", target))
                continue
            if items:
                self._take(stream, items)
            if target is not None:
                stream, items = target[0], [(subject, "", b"", target)]
                continue
            stream, items = "", []
            if not self._ack(subject, None, b""):
                refused.append(subject)
        if items:
            self._take(stream, items)
        return refused

    def _take(self, stream: str, items: list[Ack]) -> None:
        """Acks of `stream`, in order: to its service when this node leads it and no lane is busy with
        earlier ones (invariant 2), else to its lane (invariant 4's bound)."""
        if stream not in self._lanes:
            service = self._local(stream)
            if service is not None:
                service.on_acks(items, self.publish)
                return
        lane = self._lanes.get(stream)
        if lane is None:
            lane = self._lanes[stream] = _Lane()
            if not self.clients.start_soon(self._run_lane, stream, lane):
                del self._lanes[stream]
                return
        room = ACK_LANE_MAX - len(lane.items)
        if len(items) > room:
            self.acks_dropped += len(items) - max(room, 0)  # invariant 4
            items = items[:max(room, 0)]
        lane.items.extend(items)
        lane.taken += len(items)

    async def _run_lane(self, stream: str, lane: "_Lane") -> None:
        """Invariant 2: one batch at a time, in order, until the lane is empty."""
        try:
            while lane.items:
                batch = lane.items[:ACKS_PER_BATCH]
                del lane.items[:len(batch)]
                service = self._local(stream)
                if service is not None:
                    service.on_acks(batch, self.publish)
                else:
                    args = {"subjects": [s for s, _, _, _ in batch], "replies": [r for _, r, _, _ in batch]}
                    try:
                        await self.parts.call_stream(stream, "consumer.acks", args, [b for _, _, b, _ in batch])
                    except JsraftError as error:
                        self.acks_dropped += len(batch)
                        log.info("%d acks for stream %s dropped: %s", len(batch), stream, error)
                lane.carried += len(batch)
                lane.progress.set()
                lane.progress = trio.Event()
        finally:
            if self._lanes.get(stream) is lane:
                del self._lanes[stream]
            lane.progress.set()

    async def acks_carried(self, stream: str) -> None:
        """Return once every ack of `stream` taken here before this call was handed to its leader
        (invariant 5): at once when none waits in a lane."""
        lane = self._lanes.get(stream)
        if lane is None:
            return
        target = lane.taken
        while lane.carried < target and self._lanes.get(stream) is lane:
            await lane.progress.wait()

    async def ack_batch(self, args: dict[str, Any], blobs: list[bytes]) -> tuple[Any, list[bytes]]:
        """`consumer.acks` at the stream leader."""
        service = await self._leading(str(args["stream"]))
        subjects, replies = list(args["subjects"]), list(args["replies"])
        if not len(subjects) == len(replies) == len(blobs):
            raise ValueError("consumer.acks: subjects, replies and bodies differ in number")
        service.on_acks([(str(s), str(r), b, None) for s, r, b in zip(subjects, replies, blobs)], self.publish)
        return {}, []

    # --- The embedded context's requests, answered over `$rpc` ----------------------------------------------

    async def _collect(self, stream: str, count_max: int, timeout_s: float,
                       start: Callable[[ConsumerService, str], None], done: Callable[[list[Send]], bool]) -> list[Send]:
        """Serve one request whose answers go to a reply collected here: what arrived when `done(sent)`
        held, or when `timeout_s` passed."""
        service = await self._leading(stream)
        reply = f"{COLLECT_PREFIX}{next(self._collector_ids)}"
        sent: list[Send] = []
        arrived = trio.Event()

        def collect(send: Send) -> None:
            if len(sent) < count_max:
                sent.append(send)
                arrived.set()

        self._collectors[reply] = collect
        try:
            start(service, reply)
            with trio.move_on_after(timeout_s):
                while not done(sent):
                    await arrived.wait()
                    arrived = trio.Event()
        finally:
            del self._collectors[reply]
        return sent

    async def fetch(self, args: dict[str, Any], blobs: list[bytes]) -> tuple[Any, list[bytes]]:
        """`consumer.fetch`: up to `batch` messages of a pull request ending within `expires_s`."""
        batch, expires_s = int(args["batch"]), min(float(args["expires_s"]), FETCH_EXPIRES_MAX_S)
        if not 1 <= batch <= FETCH_BATCH_MAX or expires_s <= 0:
            raise BadRequest(f"consumer.fetch: batch 1..{FETCH_BATCH_MAX} and a positive expiry")
        body = json.dumps({"batch": batch, "expires": int(expires_s * 1e9), "no_wait": True}).encode()

        def start(service: ConsumerService, reply: str) -> None:
            service.pull(str(args["consumer"]), reply, body, self.publish)

        def done(sent: list[Send]) -> bool:
            return bool(sent) and (sent[-1].headers is not None and sent[-1].shown is None or
                                   sum(1 for send in sent if send.shown is not None) >= batch)

        sent = await self._collect(str(args["stream"]), batch + 4, expires_s + 0.5, start, done)
        msgs = [send for send in sent if send.shown is not None]
        statuses = [send.headers.decode(errors="replace") for send in sent if send.shown is None and send.headers]
        if any(status.startswith("NATS/1.0 503") for status in statuses):
            raise ConsumerNotFound()
        return ({"msgs": [[send.shown, send.reply] for send in msgs], "statuses": statuses},
                [part for send in msgs for part in (send.headers or b"", send.payload)])

    async def ack_sync(self, args: dict[str, Any], blobs: list[bytes]) -> tuple[Any, list[bytes]]:
        """`consumer.ack_sync`: one ack, answered once it committed."""
        timeout_s = min(float(args.get("timeout_s") or 5.0), 10.0)

        def start(service: ConsumerService, reply: str) -> None:
            service.on_acks([(str(args["subject"]), reply, blobs[0], None)], self.publish)

        sent = await self._collect(str(args["stream"]), 1, timeout_s, start, bool)
        return {"confirmed": bool(sent)}, []
