"""JetStream consumers, deterministic core (layer L3): replicated through their stream's Raft group.

Owns: consumer state and its transitions, the CONSUMER entry body (ops) codec, consumer snapshots,
interest / work-queue retention decisions, and the stream leader's pure delivery logic (push and pull).
No trio, socket, time, threading or randomness: time arrives as `now_ns` arguments and in the ops'
timestamps; replicas never read a clock. Must not import `stream` (an L3 sibling) or anything above L3.

How the stream group's runtime (L5) uses it — every call below is synchronous:

  Replica side (every node, in log order):
    consumers = ConsumerSet(store, stream=stream_config)   # one per stream group; or restore_snapshot()
    on a CONSUMER entry at `index` (stream machine returns `consumer_body`):
        result = consumers.apply(index, body)              # MalformedConsumerOps: stop applying (never skip)
        for seq in result.removable: store.delete(seq)     # at this same index, on every replica
        result.created / updated / deleted / refused       # start/stop leaders, answer create requests
        result.acked                                       # confirm double acks (`AckSync`) after commit
    after a MSGS entry (interest retention):  for seq in consumers.removable_on_publish([(seq, subj)...]): delete
    after a PURGE of every subject (no keep):  consumers.on_purge(floor)   # floor from the entry, not the store
    after a CONFIG entry:  consumers.set_stream_config(stream_config)   # retention, consumer_limits
    stream snapshot:  StreamStateMachine.snapshot(extra=encode_snapshot(consumers))
    restore:          consumers = restore_snapshot(machine.snapshot_extra, store, stream=stream_config)

  Leader side (the stream leader is every consumer's leader):
    create:  config, raw = parse_consumer_config(body_config, stream=stream_config)   # nats-server codes
             consumers.check_create(name, config)                                     # work-queue rules
             propose encode_ops([consumers.create_op(name, config, raw, now_ns)])   # start resolved here
    delete / pause:  propose DeleteOp / PauseOp
    leader = ConsumerLeader(stream_name, consumers.consumers[name], now_ns)   # on election / on create
    plan = leader.next_deliveries(store, now_ns, max_msgs, max_bytes)
        propose encode_ops(plan.ops); send plan.deliveries (reply subject `$JS.ACK...`, headers, payload);
        publish a MAX_DELIVERIES advisory per plan.gave_up; plan.too_large -> 409 for a pull request.
    leader.next_deadline_ns()  -> when to call next_deliveries again for redeliveries
    on a message to `$JS.ACK.>`: parse_ack_subject(subject), parse_ack_body(payload) ->
        ACK / NXT -> propose AckOp (+ leader.on_ack(seq)); TERM -> TermOp (+ forget); NAK -> leader.nak(...);
        WPI -> leader.progress(...); propose any DeliveredOp they return.
    pull:  queue = WaitingQueue(config); status = queue.submit(reply, payload, now_ns, num_pending);
           deliver to queue.head(); queue.delivered(request, size); queue.expire(now_ns[, end_of_stream]);
           queue.heartbeats(...); on step-down queue.drain(LEADERSHIP_CHANGE); on delete
           queue.drain(CONSUMER_DELETED).

Invariants: see each module (state: the ack floor never moves back; machine: replicas fed the same
entries are equal; snapshot: restore(encode(s)) == s; retention: a pure function of state and store).

Reference: DESIGN.md §7; nats-server `server/consumer.go`, `server/stream.go`.
"""

from jsraft.consumer.acks import (
    AckBody,
    AckKind,
    AckSubject,
    ack_reply_subject,
    parse_ack_body,
    parse_ack_subject,
    parse_go_duration,
)
from jsraft.consumer.delivery import ConsumerLeader, Delivery, DeliveryPlan
from jsraft.consumer.errors import BadPullRequest, MalformedConsumerOps, MalformedConsumerSnapshot
from jsraft.consumer.machine import ApplyResult, ConsumerEntry, ConsumerSet
from jsraft.consumer.ops import (
    AckOp,
    CreateOp,
    DeleteOp,
    DeliveredOp,
    PauseOp,
    SkipOp,
    StateOp,
    TermOp,
    decode_ops,
    encode_ops,
)
from jsraft.consumer.position import num_pending, start_position
from jsraft.consumer.pull import (
    CONSUMER_DELETED,
    LEADERSHIP_CHANGE,
    NO_MESSAGES,
    PullRequest,
    Status,
    WaitingQueue,
    parse_pull_request,
)
from jsraft.consumer.snapshot import decode_consumer, encode_consumer, encode_snapshot, restore_snapshot
from jsraft.consumer.state import ConsumerState

__all__ = [
    "AckBody", "AckKind", "AckOp", "AckSubject", "ApplyResult", "BadPullRequest", "CONSUMER_DELETED",
    "ConsumerEntry", "ConsumerLeader", "ConsumerSet", "ConsumerState", "CreateOp", "DeleteOp", "DeliveredOp",
    "Delivery", "DeliveryPlan", "LEADERSHIP_CHANGE", "MalformedConsumerOps", "MalformedConsumerSnapshot",
    "NO_MESSAGES", "PauseOp", "PullRequest", "SkipOp", "StateOp", "Status", "TermOp", "WaitingQueue",
    "ack_reply_subject", "decode_consumer", "decode_ops", "encode_consumer", "encode_ops", "encode_snapshot",
    "num_pending", "parse_ack_body", "parse_ack_subject", "parse_go_duration", "parse_pull_request",
    "restore_snapshot", "start_position",
]
