"""Properties of the sans-IO NATS protocol: round-trips, and fuzzing with arbitrary bytes.

Method: Hypothesis, with a bounded, derandomized example count. (1) Round-trips: for every event type of
both directions, a generated list of events is serialized, cut into chunks at generated points, fed to
the other side's parser, and must parse back equal (wire invariant 1). (2) Fuzzing: arbitrary bytes, and
bytes assembled from protocol fragments (operation names, tokens, sizes, CRLF, JSON, random bytes) so the
parser gets past the first byte, are fed to both sides with small bounds, split at generated points. The
parser must return events or raise a `RemoteProtocolError` — never another exception — must hold its
buffer within `buffered_bytes_max` whenever it returns `NEED_DATA` (reader invariant 1), and must give
the same events and the same error class however the bytes were split (reader invariant 2).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jsraft.protocol import (
    NEED_DATA, ClientConnection, Connect, Err, Info, Msg, Ok, Ping, Pong, Pub, RemoteProtocolError,
    ServerConnection, Sub, Unsub,
)
from jsraft.protocol.wire import SIZE_MAX

_PROPERTY = settings(max_examples=300, derandomize=True, deadline=None, database=None)
_WHITESPACE = b" \t\n\r\x0b\x0c"

# Tokens: any text without the whitespace bytes.split() splits on, or any bytes (not UTF-8 included),
# which the parser hands over surrogate-escaped (events invariant 1).
_text_tokens = st.text(st.characters(blacklist_characters=_WHITESPACE.decode(), blacklist_categories=("Cs",)),
                       min_size=1, max_size=12)
_byte_tokens = st.binary(min_size=1, max_size=12).filter(lambda b: not any(c in _WHITESPACE for c in b)).map(
    lambda b: b.decode("utf-8", "surrogateescape"))
tokens = st.one_of(_text_tokens, _byte_tokens)
payloads = st.binary(max_size=64)
header_blocks = st.one_of(st.none(), st.binary(max_size=40))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=4)

client_events = st.one_of(
    json_objects.map(lambda options: Connect({**options, "headers": True})),
    st.builds(Pub, tokens, st.none() | tokens, payloads, header_blocks),
    st.builds(Sub, tokens, tokens, st.none() | tokens),
    st.builds(Unsub, tokens, st.none() | st.integers(0, SIZE_MAX)),
    st.just(Ping()), st.just(Pong()),
)
server_events = st.one_of(
    json_objects.map(Info),
    st.builds(Msg, tokens, tokens, st.none() | tokens, payloads, header_blocks),
    st.just(Ping()), st.just(Pong()), st.just(Ok()),
    st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=30).map(Err),
)


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(cut, len(data)) for cut in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:])] or [b""]


def _feed(conn, chunks: list[bytes]) -> tuple[list, type | None]:
    """Feed chunk by chunk, draining after each; check the buffer bound at every NEED_DATA."""
    events: list = []
    for chunk in chunks:
        conn.receive_data(chunk)
        try:
            while (event := conn.next_event()) is not NEED_DATA:
                events.append(event)
        except RemoteProtocolError as error:  # anything else fails the test
            return events, type(error)
        assert conn.buffered_bytes <= conn.buffered_bytes_max
    return events, None


@_PROPERTY
@given(st.lists(client_events, max_size=8), st.lists(st.integers(0, 4000), max_size=12))
def test_client_events_round_trip_through_the_server_parser(events, cuts):
    events = [Connect({"headers": True}), *events]
    data = b"".join(ClientConnection().send(event) for event in events)
    assert _feed(ServerConnection(), _chunks(data, cuts)) == (events, None)


@_PROPERTY
@given(st.lists(server_events, max_size=8), st.lists(st.integers(0, 4000), max_size=12))
def test_server_events_round_trip_through_the_client_parser(events, cuts):
    data = b"".join(ServerConnection().send(event) for event in events)
    assert _feed(ClientConnection(), _chunks(data, cuts)) == (events, None)


_BOUNDS = {"max_control_line": 40, "max_payload": 48}


def _check_any_split(make, data: bytes, cuts: list[int]) -> None:
    whole = _feed(make(), [data])
    split = _feed(make(), _chunks(data, cuts))
    byte_by_byte = _feed(make(), [data[i:i + 1] for i in range(len(data))]) if len(data) < 400 else whole
    assert whole == split == byte_by_byte


@_PROPERTY
@given(st.binary(max_size=600), st.lists(st.integers(0, 600), max_size=10))
def test_arbitrary_bytes_give_events_or_a_clean_error(data, cuts):
    _check_any_split(lambda: ServerConnection(**_BOUNDS), data, cuts)
    _check_any_split(lambda: ClientConnection(**_BOUNDS), data, cuts)


_fragments = st.one_of(
    st.sampled_from([b"PUB ", b"HPUB ", b"SUB ", b"UNSUB ", b"PING", b"PONG", b"CONNECT ", b"INFO ", b"MSG ",
                     b"HMSG ", b"+OK", b"-ERR ", b"pub\t", b"\r\n", b"\n", b"\r", b" ", b"\t", b"'",
                     b'{"headers":true}', b"{", b"[", b"NATS/1.0\r\n\r\n", b"NATS/1.0 503\r\n"]),
    st.integers(0, 70).map(lambda n: str(n).encode()),
    st.binary(min_size=1, max_size=8),
    tokens.map(lambda t: t.encode("utf-8", "surrogateescape")),
    # Whole valid operations of both sides, so that garbage sits between things that parse.
    client_events.map(lambda event: ClientConnection().send(event)),
    server_events.map(lambda event: ServerConnection().send(event)),
)


@_PROPERTY
@given(st.lists(_fragments, min_size=1, max_size=40), st.lists(st.integers(0, 400), max_size=10))
def test_protocol_shaped_garbage_gives_events_or_a_clean_error(parts, cuts):
    data = b"".join(parts)
    _check_any_split(lambda: ServerConnection(**_BOUNDS), data, cuts)
    _check_any_split(lambda: ClientConnection(**_BOUNDS), data, cuts)


@_PROPERTY
@given(st.lists(client_events, min_size=1, max_size=6), st.integers(0, 10_000), st.binary(min_size=1, max_size=3))
def test_one_mutated_byte_in_valid_traffic_gives_events_or_a_clean_error(events, where, replacement):
    data = bytearray(b"".join(ClientConnection().send(e) for e in [Connect({"headers": True}), *events]))
    position = where % len(data)
    data[position:position + 1] = replacement
    _check_any_split(lambda: ServerConnection(), bytes(data), [position, position + 1, len(data) // 2])
