"""The `NATS/1.0` header block: the status lines nats-server and JetStream send, parsing, building.

Method: the exact blocks nats-server writes (no responders `503`, `404 No Messages`, `408 Request
Timeout`, `409`, `100 Idle Heartbeat` with fields, `100 FlowControl Request`) are parsed field by field
and built back byte for byte; malformed blocks and unbuildable inputs are refused with the documented
error; then a Hypothesis round-trip (bounded, derandomized) checks headers invariant 1 for any fields,
status and description `build_headers` accepts.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jsraft.protocol import NO_RESPONDERS_HEADERS, HeaderBlock, LocalProtocolError, MalformedHeaders
from jsraft.protocol.headers import build_headers, parse_headers

_PROPERTY = settings(max_examples=300, derandomize=True, deadline=None, database=None)


@pytest.mark.parametrize("block, parsed", [
    (b"NATS/1.0 503\r\n\r\n", HeaderBlock((), 503, "")),
    (b"NATS/1.0 404 No Messages\r\n\r\n", HeaderBlock((), 404, "No Messages")),
    (b"NATS/1.0 408 Request Timeout\r\n\r\n", HeaderBlock((), 408, "Request Timeout")),
    (b"NATS/1.0 409 Consumer Deleted\r\n\r\n", HeaderBlock((), 409, "Consumer Deleted")),
    (b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 1016\r\nNats-Last-Stream: 1024\r\n\r\n",
     HeaderBlock((("Nats-Last-Consumer", "1016"), ("Nats-Last-Stream", "1024")), 100, "Idle Heartbeat")),
    (b"NATS/1.0 100 FlowControl Request\r\n\r\n", HeaderBlock((), 100, "FlowControl Request")),
    (b"NATS/1.0\r\nNats-Msg-Id: 7\r\nX: a\r\nX: b\r\n\r\n", HeaderBlock((("Nats-Msg-Id", "7"), ("X", "a"), ("X", "b")))),
])
def test_server_status_blocks_parse_and_build_back(block, parsed):
    assert parse_headers(block) == parsed
    assert parsed.to_bytes() == block


def test_no_responders_block_is_what_nats_server_sends():
    # nats-server: "HMSG %s %s 16 16\r\nNATS/1.0 503\r\n\r\n\r\n"
    assert NO_RESPONDERS_HEADERS == b"NATS/1.0 503\r\n\r\n" and len(NO_RESPONDERS_HEADERS) == 16


def test_lookup_is_exact_and_first_wins():
    block = parse_headers(b"NATS/1.0\r\nX: a\r\nx: c\r\nX:b \r\n\r\n")
    assert block.get("X") == "a" and block.get_all("X") == ["a", "b"] and block.get("x") == "c"
    assert block.get("Y") is None
    assert parse_headers(b"") == HeaderBlock()  # an HPUB with an empty header block


@pytest.mark.parametrize("block", [
    b"HTTP/1.1\r\n\r\n",
    b"NATS/1.0\r\nA: b\r\n",  # no empty line
    b"NATS/1.0 50\r\n\r\n",
    b"NATS/1.0 5033\r\n\r\n",
    b"NATS/1.0 abc\r\n\r\n",
    b"NATS/1.0 099\r\n\r\n",
    b"NATS/1.0\r\nno colon here\r\n\r\n",
    b"NATS/1.0\r\n: empty name\r\n\r\n",
    b"NATS/1.0\r\nbad name: x\r\n\r\n",
    b"NATS/1.1\r\n\r\n",
])
def test_malformed_blocks_are_refused(block):
    with pytest.raises(MalformedHeaders) as raised:
        parse_headers(block)
    assert raised.value.err_text is None


@pytest.mark.parametrize("fields, status, description", [
    ({"": "x"}, None, ""),
    ({"a b": "x"}, None, ""),
    ({"a:b": "x"}, None, ""),
    ({"a": "x\r\ny"}, None, ""),
    ({"a": " padded"}, None, ""),
    ({}, 99, ""),
    ({}, 1000, ""),
    ({}, None, "description without status"),
    ({}, 503, "two\nlines"),
])
def test_unbuildable_headers_are_refused(fields, status, description):
    with pytest.raises(LocalProtocolError):
        build_headers(fields, status=status, description=description)


_names = st.text(st.characters(blacklist_characters=" \t\r\n\x0b\x0c:", blacklist_categories=("Cs",)),
                 min_size=1, max_size=10)
_values = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=12).map(
    lambda v: v.strip(" \t"))


@_PROPERTY
@given(st.lists(st.tuples(_names, _values), max_size=6), st.none() | st.integers(100, 999), _values)
def test_build_then_parse_is_identity(fields, status, description):
    description = description if status is not None else ""
    block = build_headers(fields, status=status, description=description)
    assert parse_headers(block) == HeaderBlock(tuple(fields), status, description)
