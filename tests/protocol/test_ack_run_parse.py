"""`ServerConnection(ack_runs=True)` reads consecutive JetStream acks as one `AckRun` (its invariant 4):
flattened, its events are exactly the generic reader's.

Method: Hypothesis, derandomized. Bytes built mostly from ack `PUB`s — the plain form nats-py writes
(`PUB $JS.ACK.<...> 0`, CRLF, CRLF) and its near misses: a reply subject, a payload, a size of `00`, two
spaces, a bare LF, a missing CRLF, a line past `max_control_line` — mixed with other `PUB`s, other
operations and random bytes, fed whole and split at generated points, to a `ServerConnection` with
`ack_runs` and to one whose `_next` is `Reader._next` (the generic path alone). Each `AckRun` is
replaced by a `Pub(subject, None, b"")` per subject; both must give the same events and the same error
class. Runs have two acks at least and `ACK_RUN_MAX` at most. Each near miss is also put between plain
acks and the bytes cut at every point, deterministically. Then the shapes the server relies on:
a fetch's 500 acks and the pull behind them, the bound, and no run without `ack_runs`.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from test_pub_fast_path import _BOUNDS, _PROPERTY, _GenericOnly

from jsraft.protocol import NEED_DATA, AckRun, Pub, RemoteProtocolError, ServerConnection
from jsraft.protocol.connection import ACK_RUN_MAX


def _feed(conn, chunks):
    events, runs = [], []
    for chunk in chunks:
        conn.receive_data(chunk)
        try:
            while (event := conn.next_event()) is not NEED_DATA:
                if type(event) is AckRun:
                    runs.append(len(event.subjects))
                    events.extend(Pub(subject, None, b"") for subject in event.subjects)
                else:
                    events.append(event)
        except RemoteProtocolError as error:
            return (events, type(error)), runs
        assert conn.buffered_bytes <= conn.buffered_bytes_max
    return (events, None), runs


_subjects = st.sampled_from([b"$JS.ACK.s.c.1.2.3.4.0", b"$JS.ACK.s.c.1.9.9.4.0", b"$JS.ACK.x", b"$JS.ACK.",
                             b"$JS.ACK.\xff", b"$JS.ACK." + b"a" * 16, b"$JS.ACKS.a", b"a"])
_PLAIN = b"PUB %s 0\r\n\r\n"
_NEAR_MISSES = [b"PUB %s r 0\r\n\r\n", b"PUB %s 1\r\nx\r\n", b"PUB %s 00\r\n\r\n", b"PUB  %s 0\r\n\r\n",
                b"PUB %s 0\n\r\n", b"PUB %s 0\r\n", b"PUB %s 0\r\n\n", b"PUB %s\t0\r\n\r\n", b"pub %s 0\r\n\r\n",
                b"PUB %s 0 \r\n\r\n", b"PUB %s r 0 0\r\n\r\n", b"HPUB %s 0 0\r\n\r\n", b"PUB %s 2\r\n\r\n\r\n"]
_acks = st.builds(lambda subject, form: form % subject, _subjects,
                  st.sampled_from([_PLAIN] * len(_NEAR_MISSES) + _NEAR_MISSES))
_parts = st.one_of(*[_acks] * 8,
                   st.sampled_from([b"PING\r\n", b"PUB a 1\r\nx\r\n", b"SUB a 1\r\n", b"PUB", b"\r\n",
                                    b'CONNECT {"headers":true}\r\n', b"HPUB a 0 1\r\nx\r\n"]),
                   st.binary(min_size=1, max_size=6))


@_PROPERTY
@example([b"PUB $JS.ACK.a 0\r\n\r\n"] * 3, [], False)
@example([b"PUB $JS.ACK.a 0\r\n\r\n", b"PUB $JS.ACK.b 0\r\n\r\n", b"PUB $JS.ACK.c 0\r\n\r\n"], [30], False)
@example([b"PUB $JS.ACK.a 0\r\n\r\n", b"PUB $JS.ACK." + b"a" * 20 + b" 0\r\n\r\n"], [], True)  # line too long
@given(st.lists(_parts, min_size=1, max_size=8), st.lists(st.integers(0, 300), max_size=6), st.booleans())
def test_a_run_flattened_is_what_the_generic_path_reads(parts, cuts, bounded):
    data = b"".join(parts)
    bounds = _BOUNDS if bounded else {}
    points = sorted({min(cut, len(data)) for cut in cuts} | {0, len(data)})
    chunks = [data[a:b] for a, b in zip(points, points[1:])] or [b""]
    expected, _ = _feed(_GenericOnly(**bounds), [data])
    for pieces in ([data], chunks):
        got, runs = _feed(ServerConnection(ack_runs=True, **bounds), pieces)
        assert got == expected
        assert all(2 <= size <= ACK_RUN_MAX for size in runs)


@pytest.mark.parametrize("form", _NEAR_MISSES)
@pytest.mark.parametrize("bounded", [False, True])
def test_each_near_miss_in_a_run_is_read_as_the_generic_path_reads_it(form, bounded):
    subject = b"$JS.ACK.s.c.1.2"
    data = _PLAIN % subject + form % subject + _PLAIN % subject + _PLAIN % subject
    bounds = _BOUNDS if bounded else {}
    expected, _ = _feed(_GenericOnly(**bounds), [data])
    for cut in range(len(data) + 1):
        assert _feed(ServerConnection(ack_runs=True, **bounds), [data[:cut], data[cut:]])[0] == expected


FETCH_ACKS = [f"$JS.ACK.S.CMPC.1.{i}.{i}.1764380000000000000.{500 - i}" for i in range(1, 501)]
PULL = b'PUB $JS.API.CONSUMER.MSG.NEXT.S.CMPC _INBOX.a.b 13\r\n{"batch":500}\r\n'


def _ack_bytes(subjects):
    return b"".join(b"PUB %s 0\r\n\r\n" % subject.encode() for subject in subjects)


@pytest.mark.parametrize("between", [b" ", b"  ", b"\t"])  # nats-py writes its empty reply as a second space
def test_a_fetchs_acks_are_one_run_and_the_pull_behind_them_a_pub(between):
    conn = ServerConnection(ack_runs=True)
    conn.receive_data(b"".join(b"PUB %s%s0\r\n\r\n" % (s.encode(), between) for s in FETCH_ACKS) + PULL)
    events = conn.events()
    assert events[0] == AckRun(FETCH_ACKS)
    assert events[1:] == [Pub("$JS.API.CONSUMER.MSG.NEXT.S.CMPC", "_INBOX.a.b", b'{"batch":500}')]


def test_a_run_stops_at_its_bound_and_a_lone_ack_is_a_pub():
    subjects = [f"$JS.ACK.s.c.1.{i}.{i}.0.0" for i in range(ACK_RUN_MAX + 3)]
    conn = ServerConnection(ack_runs=True)
    conn.receive_data(_ack_bytes(subjects) + b"PING\r\n" + _ack_bytes(subjects[:1]))
    events = conn.events()
    assert [len(e.subjects) if type(e) is AckRun else type(e).__name__ for e in events] == \
        [ACK_RUN_MAX, 3, "Ping", "Pub"]
    assert events[0].subjects + events[1].subjects == subjects
    assert events[3] == Pub(subjects[0], None, b"")


def test_without_ack_runs_every_ack_is_a_pub():
    conn = ServerConnection()
    conn.receive_data(_ack_bytes(FETCH_ACKS[:3]))
    assert conn.events() == [Pub(subject, None, b"") for subject in FETCH_ACKS[:3]]


@pytest.mark.parametrize("over", [0, 1])
def test_an_ack_at_max_control_line_stays_in_the_run_and_one_byte_over_is_the_generic_error(over):
    bounds = _BOUNDS  # max_control_line 24: "<subject> 0" of 24 bytes is the longest control line allowed
    long_subject = "$JS.ACK." + "x" * (14 + over)
    assert len(long_subject) + 2 == bounds["max_control_line"] + over
    data = _ack_bytes(["$JS.ACK.a", "$JS.ACK.b", long_subject, "$JS.ACK.c"])
    expected, _ = _feed(_GenericOnly(**bounds), [data])
    got, runs = _feed(ServerConnection(ack_runs=True, **bounds), [data])
    assert got == expected
    assert runs == ([4] if not over else [2])  # within the bound it is read in the run; over it, not
