"""`jsraft.jsapi.StreamConfig`: strict decoding, nats-server's defaults, validation, JSON round trip.

Method: feed request bodies as a client sends them and compare with what nats-server's `checkStreamCfg`
produces for the same body (the defaults table below is from its source and docs); every refusal must be
a `JsraftError` with the stable code for it; Hypothesis checks the JSON form round-trips.
"""

from __future__ import annotations

import json

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from jsraft.errors import InvalidConfig, InvalidJSON, UnknownConfigField
from jsraft.jsapi import (
    DUPLICATE_WINDOW_DEFAULT_NS, Discard, ReplicasCountCannotBeNegative, StreamConfig, parse_stream_config,
)


def test_defaults_are_filled_as_nats_server_does():
    config, raw = parse_stream_config(b'{"name":"ORDERS","max_msgs":0,"max_bytes":0,"num_replicas":0}')
    assert raw == b'{"name":"ORDERS","max_msgs":0,"max_bytes":0,"num_replicas":0}'
    assert config.subjects == ("ORDERS",)
    assert (config.max_msgs, config.max_bytes, config.max_consumers, config.max_msg_size) == (-1, -1, -1, -1)
    assert config.num_replicas == 1
    assert config.duplicate_window == DUPLICATE_WINDOW_DEFAULT_NS
    assert config.discard is Discard.old and config.storage == "file" and config.retention == "limits"


def test_duplicate_window_is_capped_by_max_age():
    config, _ = parse_stream_config(json.dumps({"name": "S", "max_age": 30_000_000_000}).encode())
    assert config.duplicate_window == 30_000_000_000


def test_name_comes_from_the_subject_and_must_match():
    assert parse_stream_config(b"{}", expected_name="ORDERS")[0].name == "ORDERS"
    with pytest.raises(InvalidConfig):
        parse_stream_config(b'{"name":"OTHER"}', expected_name="ORDERS")


@pytest.mark.parametrize(
    ("body", "error", "words"),
    [
        (b'{"name":"S","bogus":1}', UnknownConfigField, "bogus"),
        (b'{"name":"S","placement":{"rack":"r"}}', UnknownConfigField, "rack"),
        (b"{nope", InvalidJSON, "invalid JSON"),
        (b"[1,2]", InvalidConfig, "expected a JSON object"),
        (b'{"name":"a.b"}', InvalidConfig, "stream name"),
        (b'{"name":"a b"}', InvalidConfig, "stream name"),
        (b'{"name":""}', InvalidConfig, "required"),
        (b'{"name":"S","num_replicas":6}', InvalidConfig, "maximum replicas is 5"),
        (b'{"name":"S","num_replicas":-1}', ReplicasCountCannotBeNegative, "replicas count cannot be negative"),
        (b'{"name":"S","max_msgs":-2}', InvalidConfig, "max_msgs"),
        (b'{"name":"S","max_age":10,"duplicate_window":20}', InvalidConfig, "duplicates window"),
        (b'{"name":"S","subjects":["a.>","a.b"]}', InvalidConfig, 'subject "a.>" overlaps with "a.b"'),
        (b'{"name":"S","subjects":["a","b","a"]}', InvalidConfig, 'subject "a" overlaps with "a"'),
        (b'{"name":"S","subjects":["a..b"]}', InvalidConfig, "invalid subject"),
        (b'{"name":"S","retention":"forever"}', InvalidConfig, "retention"),
        (b'{"name":"S","deny_delete":"false"}', InvalidConfig, "deny_delete"),
        (b'{"name":"S","discard_new_per_subject":true}', InvalidConfig, "discard new per subject"),
        (b'{"name":"S","mirror":{"name":"O"}}', InvalidConfig, "not supported"),
        (b'{"name":"S","metadata":{"k":1}}', InvalidConfig, "metadata"),
    ],
)
def test_bad_configs_are_refused_with_a_reason(body, error, words):
    with pytest.raises(error) as caught:
        parse_stream_config(body)
    assert words in str(caught.value)
    assert getattr(caught.value, "err_code", None) is not None


names = st.text(alphabet="ABCDEFGHabc0123456789_-", min_size=1, max_size=12)
tokens = st.text(alphabet="abc", min_size=1, max_size=3)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(name=names, subject_tokens=st.lists(tokens, min_size=1, max_size=3, unique=True),
       limits=st.tuples(*[st.sampled_from([-1, 0, 1, 1000])] * 4),
       max_age=st.sampled_from([0, 60_000_000_000]), replicas=st.sampled_from([0, 1, 3, 5]),
       metadata=st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=3))
def test_json_form_round_trips(name, subject_tokens, limits, max_age, replicas, metadata):
    body = {"name": name, "subjects": [f"{name}.{t}" for t in subject_tokens], "max_msgs": limits[0],
            "max_bytes": limits[1], "max_msgs_per_subject": limits[2], "max_msg_size": limits[3],
            "max_age": max_age, "num_replicas": replicas, "metadata": metadata}
    config, _ = parse_stream_config(json.dumps(body).encode())
    again = StreamConfig.from_dict(json.loads(json.dumps(config.to_json())))
    assert again == config
    assert again.with_defaults().validate() == config


def test_json_nested_too_deeply_is_invalid_json_not_a_crash():
    raw = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(InvalidJSON, match="nested too deeply"):
        parse_stream_config(raw)


def test_served_json_leaves_out_what_nats_server_omits_when_empty():
    plain, _ = parse_stream_config(b'{"name":"S"}')
    served = plain.to_json()
    for key in ("no_ack", "first_seq", "discard_new_per_subject"):  # `omitempty` in nats-server's StreamConfig
        assert key not in served
    assert served["subjects"] == ["S"] and served["allow_direct"] is False  # not omitempty: always there
    body = {"name": "S", "no_ack": True, "first_seq": 7, "discard": "new", "max_msgs_per_subject": 1,
            "discard_new_per_subject": True}
    config, _ = parse_stream_config(json.dumps(body).encode())
    served = config.to_json()
    assert (served["no_ack"], served["first_seq"], served["discard_new_per_subject"]) == (True, 7, True)
    assert StreamConfig.from_dict(served) == config
    strict, _ = parse_stream_config(b'{"name":"S","no_ack":false,"first_seq":0,"discard_new_per_subject":false}')
    assert strict == plain  # still accepted, strictly decoded, on input


def test_the_same_bytes_are_decoded_once_and_a_failure_raises_each_time():
    """Invariant 4: a create's many readers of one config share its one decoding; a refusal is not kept."""
    body = b'{"name":"MEMO","subjects":["memo.>"],"max_age":5000000000}'
    first, raw = parse_stream_config(body, expected_name="MEMO")
    again, _ = parse_stream_config(bytearray(body), expected_name="MEMO")
    assert again is first and raw == body and isinstance(raw, bytes)
    assert parse_stream_config(body)[0] == first  # no expected name: another key, the same config
    with pytest.raises(InvalidConfig, match="does not match"):
        parse_stream_config(body, expected_name="OTHER")
    for _ in range(2):
        with pytest.raises(InvalidJSON):
            parse_stream_config(b'{"name":', expected_name="MEMO")
