"""Ack subjects and bodies, pull requests and statuses, and snapshot framing.

Method: table-driven against the wire forms nats-server produces and accepts (`consumer.go`:
processAck, processNak, ackReplyInfo, nextReqFromMsg, processNextMsgRequest, processWaiting); Hypothesis
for the ack-subject round trip and for arbitrary ack bodies never raising; damaged snapshots (every
single-byte flip, every truncation) must be refused with `MalformedConsumerSnapshot`.
"""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from consumer_kit import SECOND, Cluster, store_with
from hypothesis import given, settings

from jsraft.consumer import (
    CONSUMER_DELETED, AckKind, DeliveredOp, MalformedConsumerSnapshot, WaitingQueue, ack_reply_subject,
    encode_snapshot, parse_ack_body, parse_ack_subject, parse_go_duration, restore_snapshot,
)
from jsraft.jsapi.consumer_config import parse_consumer_config

_u = st.integers(min_value=0, max_value=2**64 - 1)
_token = st.text(alphabet="abcXYZ_-09", min_size=1, max_size=10)


@given(_token, _token, _u, _u, _u, _u, _u)
def test_ack_subject_round_trip(stream, consumer, dc, sseq, cseq, ts, pending):
    parsed = parse_ack_subject(ack_reply_subject(stream, consumer, dc, sseq, cseq, ts, pending))
    assert (parsed.stream, parsed.consumer, parsed.delivery_count, parsed.stream_seq, parsed.consumer_seq,
            parsed.timestamp_ns, parsed.pending) == (stream, consumer, dc, sseq, cseq, ts, pending)


def test_ack_subject_forms():
    v2 = parse_ack_subject("$JS.ACK.hub.ACCHASH.S.C.2.10.11.99.3.rand")
    assert (v2.domain, v2.account_hash, v2.stream, v2.stream_seq, v2.pending) == ("hub", "ACCHASH", "S", 10, 3)
    assert parse_ack_subject("$JS.ACK._.H.S.C.1.1.1.1.0.x").domain == ""
    for bad in ("$JS.ACK.S.C.1.2.3", "$JS.ACK.S.C.x.2.3.4.5", "$JS.API.S.C.1.2.3.4.5", "$JS.ACK.S.C.1.2.3.4.-5"):
        assert parse_ack_subject(bad) is None


@pytest.mark.parametrize(("body", "kind", "extra"), [
    (b"", AckKind.ACK, None), (b"+ACK", AckKind.ACK, None), (b"+OK", AckKind.ACK, None),
    (b"-NAK", AckKind.NAK, None), (b'-NAK {"delay": 5000000000}', AckKind.NAK, 5 * SECOND),
    (b"-NAK 1.5s", AckKind.NAK, 1_500_000_000), (b"-NAK nonsense", AckKind.NAK, None),
    (b"+WPI", AckKind.PROGRESS, None), (b"+NXT", AckKind.NEXT, b""), (b'+NXT {"batch":5}', AckKind.NEXT, b'{"batch":5}'),
    (b"+TERM", AckKind.TERM, ""), (b"+TERM done with it", AckKind.TERM, "done with it"),
])
def test_ack_bodies(body, kind, extra):
    parsed = parse_ack_body(body)
    assert parsed.kind is kind
    if kind is AckKind.NAK:
        assert parsed.delay_ns == extra
    elif kind is AckKind.NEXT:
        assert parsed.next_request == extra
    elif kind is AckKind.TERM:
        assert parsed.reason == extra
    assert parse_ack_body(b"+WHAT") is None


@settings(max_examples=300)
@given(st.binary(max_size=40))
def test_any_ack_body_parses_or_is_ignored(body):
    parse_ack_body(body)
    parse_ack_body(b"-NAK " + body)


def test_go_durations():
    assert [parse_go_duration(t) for t in ("0", "1s", "1m30s", "-100ms", "2h", "1.5us", "3ns")] == [
        0, SECOND, 90 * SECOND, -100_000_000, 7200 * SECOND, 1500, 3]
    for bad in ("", "5", "s", "1x", "1.s."):
        with pytest.raises(ValueError):
            parse_go_duration(bad)


def queue(**fields) -> WaitingQueue:
    import json
    return WaitingQueue(parse_consumer_config(json.dumps(fields).encode())[0])


def test_pull_request_checks_and_statuses():
    q = queue(max_batch=10, max_expires=5 * SECOND, max_bytes=1000, max_waiting=2)
    assert q.submit("r0", b'{"batch": 11}', 0, 5).encode() == b"NATS/1.0 409 Exceeded MaxRequestBatch of 10\r\n\r\n"
    assert q.submit("r0", b'{"expires": 6000000000}', 0, 5).description == "Exceeded MaxRequestExpires of 5s"
    assert q.submit("r0", b'{"max_bytes": 1001}', 0, 5).description == "Exceeded MaxRequestMaxBytes of 1000"
    assert q.submit("r0", b'{"no_wait": true}', 0, 0).encode() == b"NATS/1.0 404 No Messages\r\n\r\n"
    assert q.submit("r0", b'{"idle_heartbeat": 3000000000, "expires": 5000000000}', 0, 0).code == 400
    assert q.submit("r0", b"{bad", 0, 0).code == 400
    assert q.submit("r1", b"3", 0, 0) is None and q.submit("r2", b'{"batch": 2, "expires": 1000}', 0, 0) is None
    assert q.submit("r3", b"", 0, 0).description == "Exceeded MaxWaiting"
    assert q.head().reply == "r1" and q.head().batch == 3
    expired = q.expire(2000)
    assert expired == [("r2", expired[0][1])]
    assert expired[0][1].encode() == (b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 2\r\n"
                                      b"Nats-Pending-Bytes: 0\r\n\r\n")
    assert queue(deliver_subject="out").submit("r", b"", 0, 0).description == "Consumer is push based"


def test_pull_request_lifecycle():
    q = queue()
    q.submit("r1", b'{"batch": 2, "max_bytes": 100}', 0, 0)
    request = q.head()
    assert q.delivered(request, 40) is None and len(q) == 1
    assert q.delivered(request, 40) is None and len(q) == 0  # batch done
    q.submit("r2", b'{"batch": 5, "max_bytes": 50}', 0, 0)
    status = q.delivered(q.head(), 50)
    assert status.description == "Batch Completed" and len(q) == 0
    q.submit("r3", b'{"batch": 5, "max_bytes": 10}', 0, 0)
    assert q.too_large(q.head()).description == "Message Size Exceeds MaxBytes"
    q.submit("r4", b'{"batch": 2, "no_wait": true}', 0, 5)
    assert q.expire(0, end_of_stream=True)[0][1].code == 404
    q.submit("r5", b'{"batch": 2, "expires": 10000000000, "idle_heartbeat": 1000000000}', 0, 0)
    assert q.heartbeats(SECOND, 7, 9)[0][1].encode() == (b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 7\r\n"
                                                         b"Nats-Last-Stream: 9\r\n\r\n")
    assert q.heartbeats(SECOND + 1, 7, 9) == []
    assert q.drain(CONSUMER_DELETED) == [("r5", CONSUMER_DELETED)] and len(q) == 0


def _snapshot() -> tuple[bytes, Cluster]:
    cluster = Cluster(store_with(["a"] * 5))
    cluster.create("C", ack_policy="explicit")
    cluster.create("D", filter_subject="a")
    cluster.apply(DeliveredOp(name="C", records=((1, 1, 1, 5), (2, 2, 1, 6), (1, 3, 2, 7))))
    return encode_snapshot(cluster.set), cluster


def test_snapshot_round_trip_and_empty():
    data, cluster = _snapshot()
    assert restore_snapshot(data, cluster.store) == cluster.set
    assert restore_snapshot(b"", cluster.store).consumers == {}


def test_every_damaged_snapshot_is_refused():
    data, cluster = _snapshot()
    for position in range(len(data)):
        damaged = bytearray(data)
        damaged[position] ^= 0x40
        with pytest.raises(MalformedConsumerSnapshot):
            restore_snapshot(bytes(damaged), cluster.store)
    for cut in range(1, len(data)):
        with pytest.raises(MalformedConsumerSnapshot):
            restore_snapshot(data[:cut], cluster.store)


def test_two_requests_on_one_reply_subject_are_both_queued():
    # nats-py sends every fetch of a pull subscription with one reply subject; nats-server's waitQueue
    # keeps each request (the older one served first), and so must jsraft (it used to keep only the last).
    q = queue(max_waiting=4)
    assert q.submit("inbox", b'{"batch": 2, "expires": 1000}', 0, 0) is None
    assert q.submit("inbox", b'{"batch": 1, "expires": 3000}', 0, 0) is None
    assert len(q) == 2 and q.head().batch == 2
    assert q.delivered(q.head(), 10) is None and q.delivered(q.head(), 10) is None  # the first is done
    assert len(q) == 1 and q.head().batch == 1 and q.head().expires_ns == 3000
    assert [reply for reply, _ in q.expire(5000)] == ["inbox"] and len(q) == 0
    q.submit("inbox", b"1", 0, 0)
    q.submit("inbox", b"1", 0, 0)
    assert [reply for reply, _ in q.drain(CONSUMER_DELETED)] == ["inbox", "inbox"]
