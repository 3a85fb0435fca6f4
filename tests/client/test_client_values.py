"""`jsraft.client`'s pure parts: API error objects mapped back to classes, RFC 3339 timestamps, and
malformed answers.

Method: the error objects are the ones a node serves (`JsraftError.to_api()` of every L0 class the map
covers, plus codes whose classes the client cannot import); timestamps round-trip through the server's
own formatter (`jsapi_codec.rfc3339`), so client and server agree by construction, not by a copy.
"""

from __future__ import annotations

import pytest

import jsraft.client as jc
from jsraft import errors
from jsraft.client.values import parse_rfc3339_ns, pub_ack_from, raw_msg_from, stream_info_from
from jsraft.server.api.jsapi_codec import rfc3339

MAPPED = [errors.BadRequest, errors.InvalidJSON, errors.InvalidConfig, errors.InvalidSubject,
          errors.MessageTooLarge, errors.StreamNotFound, errors.NoMessageFound, errors.StoreFailed,
          errors.MsgDeleteFailed, errors.CorruptRecord, errors.BadFileFormat]


@pytest.mark.parametrize("cls", MAPPED, ids=lambda cls: cls.__name__)
def test_error_objects_map_back_to_their_classes(cls):
    raised = jc.error_from_api(cls("what the server said").to_api())
    assert type(raised) is cls
    assert (raised.err_code, raised.http_code, raised.description) == \
        (cls.err_code, cls.http_code, "what the server said")


def test_specialised_errors_come_back_as_their_code_s_class():
    raised = jc.error_from_api(errors.MaxMsgsExceeded().to_api())
    assert type(raised) is errors.StoreFailed and raised.description == "maximum messages exceeded"
    raised = jc.error_from_api(errors.UnknownConfigField(["colour"], "stream config").to_api())
    assert type(raised) is errors.InvalidConfig and "colour" in raised.description


def test_unknown_codes_keep_the_server_numbers():
    raised = jc.error_from_api({"code": 503, "err_code": 10008, "description": "JetStream cluster not available"})
    assert isinstance(raised, jc.ApiError) and isinstance(raised, errors.JsraftError)
    assert (raised.err_code, raised.http_code, str(raised)) == (10008, 503, "JetStream cluster not available")
    assert isinstance(jc.error_from_api("not an object"), jc.BadResponse)
    assert isinstance(jc.error_from_api({"err_code": "10059"}), jc.BadResponse)


@pytest.mark.parametrize("timestamp_ns", [1, 999_999_999, 1_700_000_000_000_000_000, 1_795_277_221_948_848_591,
                                          1_700_000_000_100_000_000, 4_102_444_800_000_000_000])
def test_timestamps_round_trip_through_the_server_formatter(timestamp_ns):
    assert parse_rfc3339_ns(rfc3339(timestamp_ns)) == timestamp_ns
    assert parse_rfc3339_ns(rfc3339(0)) == 0


@pytest.mark.parametrize("text", ["yesterday", "2024-01-01T00:00:00", "2024-01-01T00:00:00.x1Z",
                                  "2024-01-01T00:00:00.1234567891Z", "2024-13-01T00:00:00Z"])
def test_bad_timestamps_are_bad_responses(text):
    with pytest.raises(jc.BadResponse):
        parse_rfc3339_ns(text)


def test_malformed_answers_are_bad_responses_not_key_errors():
    with pytest.raises(jc.BadResponse):
        pub_ack_from({"stream": "S"})
    with pytest.raises(jc.BadResponse):
        pub_ack_from({"stream": "S", "seq": True})
    assert pub_ack_from({"stream": "S", "seq": 3, "duplicate": True}) == jc.PubAck("S", 3, True)
    with pytest.raises(jc.BadResponse):
        stream_info_from({"config": {"name": "S", "colour": "red"}, "state": {}})
    with pytest.raises(jc.BadResponse):
        raw_msg_from({"message": {"subject": "a", "seq": 1, "data": "!!", "time": rfc3339(5)}}, "S")
    msg = raw_msg_from({"message": {"subject": "a", "seq": 1, "time": rfc3339(5)}}, "S")
    assert (msg.data, msg.headers, msg.time_ns) == (b"", None, 5)
