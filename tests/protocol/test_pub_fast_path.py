"""`ServerConnection`'s one-pass `PUB` parse gives exactly the generic reader's events and errors.

Method: Hypothesis, derandomized. Bytes built mostly from `PUB` lines (valid and not: argument counts,
sizes of 9 and 10 digits, sizes over `max_payload`, lines at and past `max_control_line`, a payload not
followed by CRLF, bare LF, extra whitespace) mixed with other operations and random bytes are fed whole,
and split at generated points, to a `ServerConnection` and to one whose `_next` is `Reader._next` (the
generic path alone). Both must give the same events and the same error class.
"""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from jsraft.protocol import NEED_DATA, Pub, RemoteProtocolError, ServerConnection
from jsraft.protocol.reader import Reader

_PROPERTY = settings(max_examples=400, derandomize=True, deadline=None, database=None)
_BOUNDS = {"max_control_line": 24, "max_payload": 16}


class _GenericOnly(ServerConnection):
    """The parse before the fast path: every operation through the operation table."""

    def _next(self):
        return Reader._next(self)


def _feed(conn, chunks):
    events = []
    for chunk in chunks:
        conn.receive_data(chunk)
        try:
            while (event := conn.next_event()) is not NEED_DATA:
                events.append(event)
        except RemoteProtocolError as error:
            return events, type(error)
        assert conn.buffered_bytes <= conn.buffered_bytes_max
    return events, None


_tokens = st.sampled_from([b"a", b"a", b"$JS.ACK.s.c.1.2.3.4.0", b"_INBOX.x", b"\xff\xfe", b"a" * 20, b"b" * 30])
# Around the bound of 16 (and of 9 digits), uniformly: integers() would favour the small ones.
_sizes = st.sampled_from([b"0", b"1", b"3", b"15", b"16", b"17", b"20", b"000000003", b"0000000003", b"-1",
                          b"3x", b"", b"999999999"])
_spaces = st.sampled_from([b" ", b"  ", b"\t", b" \t"])
_ends = st.sampled_from([b"\r\n", b"\n", b" \r\n", b"\r\r\n"])


@st.composite
def _pub_lines(draw):
    size = draw(_sizes)
    count = draw(st.sampled_from([1, 1, 2, 2, 0, 3]))  # mostly the two valid argument counts
    args = [draw(_tokens) for _ in range(count)] + [size]
    line = b"PUB " + draw(_spaces).join(args) + draw(_ends)
    # Mostly a payload of the announced size, so the line's checks, not a missing CRLF, decide.
    exact = size.isdigit() and int(size) <= 20 and draw(st.integers(0, 3)) > 0
    payload = b"p" * int(size) if exact else draw(st.binary(max_size=20))
    return line + payload + draw(st.sampled_from([b"\r\n", b"\n", b"xx", b""]))


# Mostly PUBs: a part that errors ends the parse, so what follows it is never looked at.
_parts = st.one_of(*[_pub_lines()] * 8,
                   st.sampled_from([b"PING\r\n", b"pub a 1\r\nx\r\n", b"SUB a 1\r\n", b"PUB", b"\r\n",
                                    b'CONNECT {"headers":true}\r\n', b"HPUB a 0 1\r\nx\r\n"]),
                   st.binary(min_size=1, max_size=6))


@_PROPERTY
@example([b"PUB a 17\r\n" + b"p" * 17 + b"\r\n"], [], True)  # payload over max_payload
@example([b"PUB a 0000000003\r\nppp\r\n"], [], False)  # 10 digits
@example([b"PUB " + b"a" * 21 + b" 0\r\n\r\n"], [], True)  # line just past max_control_line
@example([b"PUB " + b"a" * 20 + b" 0\r\n\r\n"], [], True)  # line at max_control_line
@example([b"PUB a 3\r\npppxx"], [], False)  # payload not followed by CRLF
@example([b"PUB a b c 1\r\np\r\n"], [], False)  # four arguments
@given(st.lists(_parts, min_size=1, max_size=6), st.lists(st.integers(0, 300), max_size=6),
       st.booleans())
def test_fast_path_and_generic_path_agree(parts, cuts, bounded):
    data = b"".join(parts)
    bounds = _BOUNDS if bounded else {}
    points = sorted({min(cut, len(data)) for cut in cuts} | {0, len(data)})
    chunks = [data[a:b] for a, b in zip(points, points[1:])] or [b""]
    expected = _feed(_GenericOnly(**bounds), [data])
    assert _feed(ServerConnection(**bounds), [data]) == expected
    assert _feed(ServerConnection(**bounds), chunks) == expected


def test_ack_publish_takes_the_fast_path_and_parses_as_before():
    conn = ServerConnection()
    conn.receive_data(b"PUB $JS.ACK.s.c.1.5.5.0.0 3\r\n+OK\r\nPUB $JS.ACK.s.c.1.6.6.0.0 _INBOX.r 0\r\n\r\n")
    assert conn.events() == [Pub("$JS.ACK.s.c.1.5.5.0.0", None, b"+OK"),
                             Pub("$JS.ACK.s.c.1.6.6.0.0", "_INBOX.r", b"")]
    assert conn.buffered_bytes == 0
