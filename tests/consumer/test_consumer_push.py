"""The push leader's pure pacing (`consumer.push.PushPacer`): flow control, idle heartbeats, rate limit,
replay original.

Method: a `ConsumerLeader` and a `PushPacer` over a MemStore and a push consumer created through the log
(`consumer_kit`); the clock is a plain integer passed as `now_ns`. Each test drives the pacer the way
the server's pass does — `allowance`, `next_deliveries`, `on_sent` per message — and checks what it
allows, asks for and reports, against nats-server's rules (consumer.go: needFlowControl,
processFlowControl, sendIdleHeartbeat, setRateLimit, loopAndGatherMsgs).
"""

from __future__ import annotations

from consumer_kit import SECOND, Cluster, store_with

from jsraft.consumer import ConsumerLeader
from jsraft.consumer.push import FC_WINDOW_MAX_BYTES, FC_WINDOW_MIN_BYTES, ROUND_MSGS_MAX, PushPacer
from jsraft.store.base import msg_size

T0 = 5_000 * SECOND
MS = 1_000_000


def setup(subjects, *, payload=b"data", step_ts=SECOND, burst_bytes=0, **fields):
    cluster = Cluster(store_with(subjects, payload=payload, step_ts=step_ts))
    fields.setdefault("deliver_subject", "out")
    fields.setdefault("ack_policy", "none")
    cluster.create("C", **fields)
    entry = cluster.set.consumers["C"]
    leader = ConsumerLeader("S", entry, T0)
    pacer = PushPacer("S", "C", entry.config, T0, nonce="n", burst_bytes=burst_bytes)
    return cluster, leader, pacer


def deliver(cluster, leader, pacer, now_ns, max_msgs=None):
    """One round: what the pacer allows, delivered and sent; (stream seqs, flow-control replies)."""
    allowed = pacer.allowance(leader, cluster.store, now_ns) if max_msgs is None else max_msgs
    if allowed <= 0:
        return [], []
    plan = leader.next_deliveries(cluster.store, now_ns, allowed)
    if plan.ops:
        cluster.apply(*plan.ops)
    replies = [pacer.on_sent(d.size, d.timestamp_ns, d.delivery_count == 1, now_ns) for d in plan.deliveries]
    return [d.stream_seq for d in plan.deliveries], [r for r in replies if r]


def test_flow_control_request_stall_and_answer_doubling_the_window():
    size = 32768  # 200 of them: 6.4 MiB, over the first window (2 MiB, nats-server's)
    cluster, leader, pacer = setup(["a"] * 200, payload=b"x" * size, flow_control=True, idle_heartbeat=SECOND)
    sent, replies = [], []
    for _ in range(10):
        seqs, fc = deliver(cluster, leader, pacer, T0)
        sent += seqs
        replies += fc
    assert replies == ["$JS.FC.S.C.n1"]  # one request once half the window was out, no second one
    assert pacer.stalled and pacer.allowance(leader, cluster.store, T0) == 0
    assert FC_WINDOW_MIN_BYTES < pacer.pending_bytes <= FC_WINDOW_MIN_BYTES + ROUND_MSGS_MAX * (size + 64)
    stalled_at = len(sent)
    assert not pacer.on_flow_control("$JS.FC.S.C.other")  # not the outstanding request: ignored
    assert pacer.stalled
    assert pacer.on_flow_control("$JS.FC.S.C.n1")
    assert pacer.window_bytes == 2 * FC_WINDOW_MIN_BYTES and not pacer.stalled
    assert not pacer.on_flow_control("$JS.FC.S.C.n1")  # a repeated answer changes nothing
    seqs, fc = deliver(cluster, leader, pacer, T0)
    assert seqs and seqs[0] == stalled_at + 1


def test_flow_control_window_stops_growing_at_its_max():
    cluster, leader, pacer = setup(["a"], flow_control=True, idle_heartbeat=SECOND)
    for _ in range(10):
        pacer.fc_reply, pacer.fc_bytes = "$JS.FC.S.C.x", 0
        pacer.on_flow_control("$JS.FC.S.C.x")
    assert pacer.window_bytes == FC_WINDOW_MAX_BYTES


def test_idle_heartbeat_when_idle_with_last_sequences_and_stalled_request():
    cluster, leader, pacer = setup(["a"] * 3, flow_control=True, idle_heartbeat=SECOND)
    deliver(cluster, leader, pacer, T0)
    assert pacer.heartbeat(T0 + SECOND // 2, 3, 3) is None  # not idle long enough
    assert pacer.next_due_ns() == T0 + SECOND
    beat = pacer.heartbeat(T0 + SECOND, leader.next_consumer_seq - 1, leader.next_seq - 1)
    assert beat == b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 3\r\nNats-Last-Stream: 3\r\n\r\n"
    assert pacer.heartbeat(T0 + SECOND + 1, 3, 3) is None  # a heartbeat counts as sent
    pacer.fc_reply, pacer.pending_bytes = "$JS.FC.S.C.n9", FC_WINDOW_MAX_BYTES
    beat = pacer.heartbeat(T0 + 3 * SECOND, 3, 3)
    assert beat is not None and b"Nats-Consumer-Stalled: $JS.FC.S.C.n9\r\n" in beat


def test_rate_limit_is_a_token_bucket_of_bytes_with_the_stream_burst():
    size = msg_size(1, 0, 1000)  # what each delivery takes from the bucket
    # 8000 bits/s = 1000 bytes/s; a burst of two and a half messages (the stream's max_msg_size).
    cluster, leader, pacer = setup(["a"] * 10, payload=b"r" * 1000, rate_limit_bps=8000,
                                   burst_bytes=size * 5 // 2)
    rounds = [deliver(cluster, leader, pacer, T0)[0] for _ in range(4)]
    assert rounds == [[1], [2], [3], []]  # the burst, then one more into debt (`ReserveN`), then wait
    debt = size * 3 - size * 5 // 2
    assert pacer.due_ns is not None and abs(pacer.due_ns - (T0 + debt * SECOND // 1000)) <= MS
    assert pacer.allowance(leader, cluster.store, pacer.due_ns - 10 * MS) == 0
    assert deliver(cluster, leader, pacer, pacer.due_ns)[0] == [4]


def test_replay_original_waits_the_original_gaps():
    cluster, leader, pacer = setup(["a", "a", "a"], step_ts=2 * SECOND, replay_policy="original")
    assert deliver(cluster, leader, pacer, T0)[0] == [1]  # the first at once, and only it
    assert pacer.allowance(leader, cluster.store, T0 + SECOND) == 0
    assert pacer.due_ns == T0 + 2 * SECOND
    assert deliver(cluster, leader, pacer, T0 + 2 * SECOND)[0] == [2]
    assert deliver(cluster, leader, pacer, T0 + 3 * SECOND)[0] == []
    assert deliver(cluster, leader, pacer, T0 + 4 * SECOND)[0] == [3]


def test_instant_replay_without_limits_allows_a_full_round():
    cluster, leader, pacer = setup(["a"] * 5)
    assert pacer.allowance(leader, cluster.store, T0) == ROUND_MSGS_MAX
    assert deliver(cluster, leader, pacer, T0)[0] == [1, 2, 3, 4, 5]
    assert pacer.next_due_ns() is None
