"""The inline MSGS decoder (`route_wire.decode_msgs_fast`) gives what the general decoder gives, or nothing.

Method: frames built with `encode_msg`/`encode_msgs` — deliveries with a reply and a shown subject,
headers or not, empty bodies, Hypothesis varying the fields — are decoded by the fast path, by `decode`
(bytes and memoryview) and by the general `Reader` path called directly (`_decode_msg`, which `decode`
otherwise reaches only for frames the fast path declines): equal results. Frames the fast path must
decline (queue groups, every malformed frame of `test_route_sync`'s list, truncations at every length,
a trailing byte) give None, so `decode` raises the general path's `TransportProtocolError` for them.
"""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from jsraft.server.nats.route_wire import (
    Kind, Msgs, RoutedMsg, _decode_msg, decode, decode_msgs_fast, encode_msg, encode_msgs,
)
from jsraft.transport.binary import Reader
from jsraft.transport.errors import TransportProtocolError
from test_route_sync import test_malformed_frames_are_protocol_errors as malformed_cases


def general(frame: bytes) -> Msgs:
    reader = Reader(frame, TransportProtocolError)
    assert reader.u8() == Kind.MSGS
    msgs = Msgs([_decode_msg(reader) for _ in range(reader.u32())])
    reader.finish()
    return msgs


_token = st.text(alphabet="abcXYZ_-0189$", min_size=1, max_size=8)
_subject = st.lists(_token, min_size=1, max_size=4).map(".".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_subject, st.one_of(st.none(), st.binary(max_size=40)), st.one_of(st.none(), _subject),
                          st.one_of(st.none(), st.binary(max_size=30)), st.binary(max_size=200)), max_size=6))
def test_fast_and_general_agree(fields):
    frame = encode_msgs([encode_msg(subject.encode(), reply, (), headers, body, shown.encode() if shown else None)
                         for subject, reply, shown, headers, body in fields])
    fast = decode_msgs_fast(frame)
    assert fast is not None and fast == general(frame) == decode(frame) == decode(memoryview(frame))


def test_a_delivery_burst_takes_the_fast_path():
    frame = encode_msgs([encode_msg(b"_INBOX.x.y", b"$JS.ACK.S.C.1.%d.%d.17.0" % (i, i), (), None, b"p" * 128,
                                    b"orders.new") for i in range(1, 501)])
    fast = decode_msgs_fast(frame)
    assert fast is not None and len(fast.messages) == 500 and fast == general(frame)
    assert fast.messages[7].subject == "_INBOX.x.y" and fast.messages[7].subject_bytes == b"orders.new"


def test_a_delivery_is_encoded_as_the_format_says():
    # flags (reply | shown) | subject u16+bytes | reply u16+bytes | shown u16+bytes | 0 queues | payload u32+bytes
    expected = b"\x05\x03\x00_IN" + b"\x02\x00r1" + b"\x03\x00a.b" + b"\x00\x00" + b"\x02\x00\x00\x00pp"
    assert encode_msg(b"_IN", b"r1", (), None, b"pp", b"a.b") == expected
    assert decode(encode_msgs([expected])) == Msgs([RoutedMsg("_IN", b"a.b", b"r1", (), None, b"pp")])


def test_queue_groups_and_truncations_are_declined():
    frame = encode_msgs([encode_msg(b"a", None, (), None, b"x"), encode_msg(b"a.b", b"r", ("q",), None, b"")])
    assert decode_msgs_fast(frame) is None and decode(frame) == general(frame)
    whole = encode_msgs([encode_msg(b"a.b", b"reply", (), b"NATS/1.0\r\n\r\n", b"body", b"c.d")] * 2)
    assert decode_msgs_fast(whole) is not None
    for cut in range(len(whole)):
        assert decode_msgs_fast(whole[:cut]) is None
        with pytest.raises(TransportProtocolError):
            decode(whole[:cut])
    assert decode_msgs_fast(whole + b"\x00") is None


@pytest.mark.parametrize("case", malformed_cases.pytestmark[0].args[1])
def test_malformed_frames_are_declined(case):
    payload, _ = case
    assert decode_msgs_fast(payload) is None
