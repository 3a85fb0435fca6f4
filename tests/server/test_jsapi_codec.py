"""The JetStream API's pure pieces (`jsraft.server.api.jsapi_codec`): Go's RFC 3339 timestamps, the strict
request decoding and its JSON errors, and the direct-get header blocks.

Method: plain function calls against values worked out by hand from Go's `time.RFC3339Nano` layout and
nats-server's `getDirectRequest` / `unmarshalRequest` behaviour; no node, no network.
"""

from __future__ import annotations

import pytest

from jsraft.errors import InvalidJSON
from jsraft.server.api.jsapi_codec import (
    MsgGetRequest, PurgeRequest, decode_request, decode_stream_config, direct_headers, is_empty_request,
    is_json_object_or_array, rfc3339, status_headers, stored_msg_json,
)

SECOND_NS = 1_000_000_000


def test_rfc3339_is_gos_rfc3339nano_in_utc():
    assert rfc3339(0) == "0001-01-01T00:00:00Z"  # Go's zero time: "never"
    assert rfc3339(1_700_000_000 * SECOND_NS) == "2023-11-14T22:13:20Z"  # no fraction at all
    assert rfc3339(1_700_000_000 * SECOND_NS + 120_000_000) == "2023-11-14T22:13:20.12Z"  # zeros trimmed
    assert rfc3339(1_700_000_000 * SECOND_NS + 7) == "2023-11-14T22:13:20.000000007Z"


def test_requests_decode_strictly_into_json_errors():
    assert decode_request(b'{"filter": "a.>", "keep": 2}', PurgeRequest) == PurgeRequest(filter="a.>", keep=2)
    assert decode_request(b"", PurgeRequest) == PurgeRequest() and decode_request(b"null", PurgeRequest) == PurgeRequest()
    cases = {
        b'{"seq": 1, "frob": 2}': 'invalid JSON: json: unknown field "frob"',
        b'{"seq": "1"}': "invalid JSON: ",  # a string is not a number
        b"{": "invalid JSON: ",
        b"[" * 50_000: "invalid JSON: nested too deeply",
    }
    for body, prefix in cases.items():
        with pytest.raises(InvalidJSON) as caught:
            decode_request(body, MsgGetRequest)
        assert caught.value.err_code == 10025 and caught.value.description.startswith(prefix), body[:20]


def test_stream_config_decoding_keeps_the_bytes_and_drops_pedantic():
    body = b'{"name": "S", "subjects": ["s.*"]}'
    config, raw = decode_stream_config(body)
    assert (config.name, config.subjects, raw) == ("S", ("s.*",), body)
    config, raw = decode_stream_config(b'{"name": "S", "pedantic": true}')
    assert b"pedantic" not in raw and config.name == "S"
    assert decode_stream_config(b"{}")[0].name == ""  # no name: the caller answers the mismatch
    with pytest.raises(InvalidJSON, match='unknown field "allow_batched"'):  # 2.14's fast batch: not served
        decode_stream_config(b'{"name": "S", "allow_batched": true}')


def test_optional_and_empty_bodies_as_nats_server_tells_them():
    assert is_json_object_or_array(b" \r\n{") and is_json_object_or_array(b"[1]")
    assert not is_json_object_or_array(b"") and not is_json_object_or_array(b'"x"')
    assert is_empty_request(b"") and is_empty_request(b" { } ") and not is_empty_request(b'{"a": 1}')


def test_msg_get_request_needs_exactly_one_way_to_pick_a_message():
    assert MsgGetRequest().conflicting()
    assert MsgGetRequest(seq=1, last_by_subj="a").conflicting()
    assert MsgGetRequest(last_by_subj="a", next_by_subj="a").conflicting()
    assert not MsgGetRequest(seq=3, next_by_subj="a.*").conflicting()
    assert not MsgGetRequest(last_by_subj="a").conflicting()


def test_direct_get_headers_follow_the_messages_own():
    ts = 1_700_000_000 * SECOND_NS
    fixed = b"Nats-Stream: KV\r\nNats-Subject: kv.a\r\nNats-Sequence: 9\r\nNats-Time-Stamp: 2023-11-14T22:13:20Z\r\n"
    assert direct_headers("KV", "kv.a", 9, ts, b"") == b"NATS/1.0\r\n" + fixed + b"\r\n"
    assert direct_headers("KV", "kv.a", 9, ts, b"NATS/1.0\r\nA: 1\r\n\r\n") == b"NATS/1.0\r\nA: 1\r\n" + fixed + b"\r\n"
    assert status_headers(404, "Message Not Found") == b"NATS/1.0 404 Message Not Found\r\n\r\n"
    assert status_headers(500, "two\r\nlines") == b"NATS/1.0 500 two lines\r\n\r\n"


def test_stored_msg_leaves_out_empty_headers_and_data():
    assert stored_msg_json("a", 1, b"", b"", 0) == {"subject": "a", "seq": 1, "time": "0001-01-01T00:00:00Z"}
    assert stored_msg_json("a", 2, b"H", b"xy", 0)["hdrs"] == "SA==" and stored_msg_json("a", 2, b"", b"xy", 0)["data"] == "eHk="
