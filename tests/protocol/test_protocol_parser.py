"""The sans-IO NATS protocol parser and serializer, by example.

Method: each operation of each side is fed as nats-server's docs and nats-py write it (upper and lower
case, CRLF and bare LF, tabs) and the event checked field by field; each malformed input is checked for
the error class and for the `-ERR` text nats-server v2.10 sends for the same bytes (`server/parser.go`,
`server/client.go`), or for None where nats-server closes without one. The serializers are checked
byte for byte against the documented layout and for what they refuse. A fixed stream of every client
operation (PUB with and without reply, HPUB, a payload holding CRLF) is split into two chunks at every
offset and must parse to the same events; so must a stream ending in a payload not closed by CRLF, which
must give the same error (reader invariant 2, for the in-buffer payload fast path and the pending path).
"""

from __future__ import annotations

import pytest

from jsraft.protocol import (
    NEED_DATA, ClientConnection, Connect, ControlLineTooLong, Err, HeadersNotSupported, Info,
    LocalProtocolError, MalformedArguments, Msg, Ok, PayloadTooLarge, Ping, Pong, Pub, RemoteProtocolError,
    ServerConnection, Sub, UnknownOperation, Unsub,
)
from jsraft.protocol.wire import msg_head


def server_events(data: bytes, **bounds: int) -> list:
    conn = ServerConnection(**bounds)
    conn.receive_data(data)
    return conn.events()


def client_events(data: bytes, **bounds: int) -> list:
    conn = ClientConnection(**bounds)
    conn.receive_data(data)
    return conn.events()


HEADERS_ON = b'CONNECT {"headers":true}\r\n'


# --- Server side: what clients send --------------------------------------------------------------------


def test_connect_pub_sub_unsub_ping_pong():
    data = (b'CONNECT {"verbose":false,"pedantic":false,"lang":"python3","headers":true,"no_responders":true}\r\n'
            b"PUB foo.bar 5\r\nhello\r\n"
            b"PUB foo.bar _INBOX.x.1 0\r\n\r\n"
            b"SUB foo.* 1\r\nSUB foo.> workers 2\r\n"
            b"UNSUB 1\r\nUNSUB 2 10\r\nPING\r\nPONG\r\n")
    assert server_events(data) == [
        Connect({"verbose": False, "pedantic": False, "lang": "python3", "headers": True, "no_responders": True}),
        Pub("foo.bar", None, b"hello"), Pub("foo.bar", "_INBOX.x.1", b""),
        Sub("foo.*", "1"), Sub("foo.>", "2", "workers"),
        Unsub("1"), Unsub("2", 10), Ping(), Pong(),
    ]


def test_hpub_splits_headers_from_payload():
    block = b"NATS/1.0\r\nA: b\r\n\r\n"
    data = HEADERS_ON + b"HPUB s r %d %d\r\n%spayload\r\n" % (len(block), len(block) + 7, block)
    assert server_events(data)[1] == Pub("s", "r", b"payload", block)
    assert server_events(HEADERS_ON + b"HPUB s 0 2\r\nhi\r\n")[1] == Pub("s", None, b"hi", b"")


def test_operations_are_case_insensitive_and_lf_and_tabs_are_accepted():
    data = b"ping\npub\tfoo\t\t3\nabc\r\nsub  foo  1\r\nPiNg\r\n"
    assert server_events(data) == [Ping(), Pub("foo", None, b"abc"), Sub("foo", "1"), Ping()]


def test_payload_may_contain_crlf_and_arrive_byte_by_byte():
    data = b"PUB a 6\r\n\r\nPING\r\n"
    conn = ServerConnection()
    seen = []
    for byte in data:
        conn.receive_data(bytes([byte]))
        seen += conn.events()
    assert seen == [Pub("a", None, b"\r\nPING")]
    assert conn.buffered_bytes == 0


def test_next_event_returns_need_data_until_complete():
    conn = ServerConnection()
    conn.receive_data(b"PUB a 3\r\nab")
    assert conn.next_event() is NEED_DATA
    conn.receive_data(b"c\r")
    assert conn.next_event() is NEED_DATA
    conn.receive_data(b"\n")
    assert conn.next_event() == Pub("a", None, b"abc")
    assert conn.next_event() is NEED_DATA and conn.buffered_bytes == 0


@pytest.mark.parametrize("data, error, err_text", [
    (b"FOO bar\r\n", UnknownOperation, "Unknown Protocol Operation"),
    (b"\r\n", UnknownOperation, "Unknown Protocol Operation"),
    (b" PING\r\n", UnknownOperation, "Unknown Protocol Operation"),
    (b"MSG a 1 2\r\nhi\r\n", UnknownOperation, "Unknown Protocol Operation"),  # a server op from a client
    (b"PUB a 2\r\nhiX\r\n", UnknownOperation, "Unknown Protocol Operation"),  # payload not ended by CRLF
    (b"PUB a 1048577\r\n", PayloadTooLarge, "Maximum Payload Violation"),
    (b"SUB " + b"a" * 4097 + b" 1\r\n", ControlLineTooLong, "maximum control line exceeded"),
    (b"PUB " + b"a" * 5000, ControlLineTooLong, "maximum control line exceeded"),  # before its LF came
    (b"PUB a\r\n", MalformedArguments, None),
    (b"PUB a b c 1\r\n", MalformedArguments, None),
    (b"PUB a -1\r\n", MalformedArguments, None),
    (b"PUB a 1234567890\r\n", MalformedArguments, None),  # more than nats-server's 9 digits
    (b"SUB a\r\n", MalformedArguments, None),
    (b"UNSUB\r\n", MalformedArguments, None),
    (b"UNSUB 1 x\r\n", MalformedArguments, None),
    (b"CONNECT {nope\r\n", MalformedArguments, None),
    (b"CONNECT [1]\r\n", MalformedArguments, None),
    (b"CONNECT " + b"[" * 3000 + b"\r\n", MalformedArguments, None),  # nesting deeper than json's recursion
    (b"HPUB a 2 2\r\nhi\r\n", HeadersNotSupported, None),  # no CONNECT with headers
    (HEADERS_ON + b"HPUB a 5 2\r\nhi\r\n", MalformedArguments, None),  # header size > total
    (HEADERS_ON + b"HPUB a 2\r\nhi\r\n", MalformedArguments, None),
])
def test_malformed_input(data, error, err_text):
    conn = ServerConnection()
    conn.receive_data(data)
    with pytest.raises(error) as raised:
        conn.events()
    assert isinstance(raised.value, RemoteProtocolError)
    assert raised.value.err_text == err_text
    # h11's rule: once broken, always broken, and the buffer is released.
    with pytest.raises(error):
        conn.next_event()
    conn.receive_data(b"PING\r\n")
    with pytest.raises(error):
        conn.next_event()
    assert conn.buffered_bytes == 0


def test_bounds_are_configurable_and_hold_exactly():
    assert server_events(b"PUB a 8\r\n12345678\r\n", max_payload=8) == [Pub("a", None, b"12345678")]
    with pytest.raises(PayloadTooLarge):
        server_events(b"PUB a 9\r\n123456789\r\n", max_payload=8)
    arg = b"x" * 60 + b" 1"
    assert server_events(b"SUB " + arg + b"\r\n", max_control_line=62) == [Sub("x" * 60, "1")]
    with pytest.raises(ControlLineTooLong):
        server_events(b"SUB " + arg + b"\r\n", max_control_line=61)


def test_events_before_an_error_are_returned_first():
    conn = ServerConnection()
    conn.receive_data(b"PING\r\nBAD\r\n")
    assert conn.next_event() == Ping()
    with pytest.raises(UnknownOperation):
        conn.next_event()


# --- Client side: what servers send --------------------------------------------------------------------


def test_server_operations():
    data = (b'INFO {"server_id":"X","max_payload":2048,"headers":true}\r\n'
            b"MSG foo 1 3\r\nabc\r\nmsg foo 1 _INBOX.a 0\r\n\r\n"
            b"HMSG _INBOX.a.b 7 16 16\r\nNATS/1.0 503\r\n\r\n\r\n"
            b"+OK\r\nPING\r\nPONG\r\n-ERR 'Stale Connection'\r\n-ERR 'it''s'\r\n")
    conn = ClientConnection()
    conn.receive_data(data)
    assert conn.events() == [
        Info({"server_id": "X", "max_payload": 2048, "headers": True}),
        Msg("foo", "1", None, b"abc"), Msg("foo", "1", "_INBOX.a", b""),
        Msg("_INBOX.a.b", "7", None, b"", b"NATS/1.0 503\r\n\r\n"),
        Ok(), Ping(), Pong(), Err("Stale Connection"), Err("it''s"),
    ]
    # INFO's max_payload becomes the bound on both what we read and what we may send.
    assert conn.max_payload == 2048
    with pytest.raises(LocalProtocolError):
        conn.send(Pub("a", None, b"x" * 2049))
    assert conn.send(Pub("a", None, b"x" * 2048)).startswith(b"PUB a 2048\r\n")


@pytest.mark.parametrize("data, error", [
    (b"PUB a 1\r\nx\r\n", UnknownOperation),  # a client op from a server
    (b"MSG a 1\r\n", MalformedArguments),
    (b"HMSG a 1 3 2\r\nab\r\n", MalformedArguments),
    (b"INFO nope\r\n", MalformedArguments),
    (b"MSG a 1 2000000\r\n", PayloadTooLarge),
])
def test_client_side_malformed_input(data, error):
    with pytest.raises(error):
        client_events(data)


# --- Serializers ---------------------------------------------------------------------------------------


def test_serialized_layout():
    server = ServerConnection()
    assert server.send(Msg("a.b", "9", None, b"hi")) == b"MSG a.b 9 2\r\nhi\r\n"
    assert server.send(Msg("a.b", "9", "r", b"hi", b"NATS/1.0\r\n\r\n")) == \
        b"HMSG a.b 9 r 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
    assert server.send(Ping()) == b"PING\r\n" and server.send(Pong()) == b"PONG\r\n"
    assert server.send(Ok()) == b"+OK\r\n"
    assert server.send(Err("Maximum Payload Violation")) == b"-ERR 'Maximum Payload Violation'\r\n"
    assert server.send(Info({"proto": 1})) == b'INFO {"proto":1}\r\n'
    client = ClientConnection()
    assert client.send(Pub("a", "r", b"x")) == b"PUB a r 1\r\nx\r\n"
    assert client.send(Pub("a", None, b"x", b"NATS/1.0\r\n\r\n")) == b"HPUB a 12 13\r\nNATS/1.0\r\n\r\nx\r\n"
    assert client.send(Sub("a.*", "4", "q")) == b"SUB a.* q 4\r\n"
    assert client.send(Unsub("4", 2)) == b"UNSUB 4 2\r\n" and client.send(Unsub("4")) == b"UNSUB 4\r\n"
    assert client.send(Connect({"verbose": False})) == b'CONNECT {"verbose":false}\r\n'
    assert msg_head(b"a", b"1", None, None, 5) == b"MSG a 1 5\r\n"


@pytest.mark.parametrize("side, event", [
    ("server", Connect({})),  # a server never sends CONNECT
    ("client", Msg("a", "1", None, b"")),
    ("client", Pub("a b", None, b"")),
    ("client", Pub("", None, b"")),
    ("client", Pub("a", "r\n", b"")),
    ("client", Sub("a", "1", "q\t")),
    ("client", Unsub("1", -1)),
    ("client", Connect({"x": object()})),
    ("server", Err("two\r\nlines")),
    ("server", Msg("a\x0b", "1", None, b"")),
    ("server", Info({"bad": {1, 2}})),
    ("server", Err("\ud800")),  # a lone surrogate is not UTF-8
])
def test_serializers_refuse_what_would_not_parse_back(side, event):
    conn = ServerConnection() if side == "server" else ClientConnection()
    with pytest.raises(LocalProtocolError):
        conn.send(event)


_EVERY_OPERATION = (HEADERS_ON + b"PUB a.b 3\r\nabc\r\nPUB a.b _INBOX.x.1 4\r\na\r\nb\r\nSUB a.* q 1\r\n"
                    b"HPUB h r 12 14\r\nNATS/1.0\r\n\r\nhi\r\npub x 0\r\n\r\nUNSUB 1\r\nPING\r\nPONG\r\n")


def _events_split_at(data: bytes, offset: int) -> tuple[list, type | None]:
    conn = ServerConnection()
    found: list = []
    try:
        for chunk in (data[:offset], data[offset:]):
            conn.receive_data(chunk)
            while (event := conn.next_event()) is not NEED_DATA:
                found.append(event)
    except RemoteProtocolError as error:
        return found, type(error)
    return found, None


@pytest.mark.parametrize("data", [_EVERY_OPERATION, _EVERY_OPERATION + b"PUB a 2\r\nhiX\r\n"])
def test_a_stream_split_at_every_offset_parses_the_same(data):
    whole = _events_split_at(data, len(data))
    assert len(whole[0]) == 9 and whole[1] is (None if data == _EVERY_OPERATION else UnknownOperation)
    assert whole[0][2] == Pub("a.b", "_INBOX.x.1", b"a\r\nb")
    for offset in range(len(data)):
        assert _events_split_at(data, offset) == whole, offset
