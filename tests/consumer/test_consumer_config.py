"""`jsraft.jsapi.consumer_config`: strict decoding, nats-server's defaults and err_codes, JSON round trip.

Method: feed config bodies as clients send them and compare with what nats-server's
`setConsumerConfigDefaults` / `checkConsumerCfg` produce for the same body (expected values and codes
written out from its source, `server/consumer.go` and `server/jetstream_errors_generated.go`); every
refusal must be a `ConsumerConfigError` with nats-server's `err_code`; Hypothesis checks that the JSON
form round-trips and that `to_json` omits exactly the `omitempty` zero fields.
"""

from __future__ import annotations

import json

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from jsraft.errors import InvalidConfig, InvalidJSON, UnknownConfigField
from jsraft.jsapi.consumer_config import (
    ACK_WAIT_DEFAULT_NS,
    AckPolicy,
    ConsumerConfig,
    ConsumerConfigError,
    DeliverPolicy,
    parse_consumer_config,
    rfc3339_to_ns,
)
from jsraft.jsapi.stream_config import ConsumerLimits, Retention, StreamConfig

SECOND = 1_000_000_000


def parse(stream: StreamConfig | None = None, **fields) -> ConsumerConfig:
    return parse_consumer_config(json.dumps(fields).encode(), stream=stream)[0]


def refused(stream: StreamConfig | None = None, **fields) -> ConsumerConfigError:
    with pytest.raises(ConsumerConfigError) as caught:
        parse(stream, **fields)
    return caught.value


def test_pull_defaults_as_nats_server_fills_them():
    config = parse(durable_name="D")
    assert config.name == "D"
    assert config.ack_policy is AckPolicy.explicit and config.deliver_policy is DeliverPolicy.all
    assert (config.ack_wait, config.max_deliver, config.max_waiting, config.max_ack_pending) == (
        ACK_WAIT_DEFAULT_NS, -1, 512, 1000)
    assert config.to_json() == {
        "durable_name": "D", "name": "D", "deliver_policy": "all", "ack_policy": "explicit",
        "ack_wait": 30 * SECOND, "max_deliver": -1, "replay_policy": "instant", "max_waiting": 512,
        "max_ack_pending": 1000, "num_replicas": 0,
    }


def test_push_and_ack_none_defaults():
    config = parse(deliver_subject="out", ack_policy="none")
    assert (config.max_waiting, config.max_ack_pending, config.ack_wait) == (0, 0, 0)
    assert "max_waiting" not in config.to_json() and "ack_wait" not in config.to_json()


def test_backoff_overrides_ack_wait_and_negatives_are_reset():
    config = parse(backoff=[2 * SECOND, 5 * SECOND], max_deliver=3, max_waiting=-4, max_batch=-1)
    assert config.ack_wait == 2 * SECOND
    assert (config.max_waiting, config.max_batch) == (512, 0)


def test_stream_consumer_limits_fill_defaults_and_bound():
    stream = StreamConfig(name="S", subjects=("s.>",), consumer_limits=ConsumerLimits(max_ack_pending=50,
                                                                                      inactive_threshold=SECOND))
    config = parse(stream)
    assert (config.max_ack_pending, config.inactive_threshold) == (50, SECOND)
    assert refused(stream, max_ack_pending=51).err_code == 10121
    assert refused(stream, inactive_threshold=2 * SECOND).err_code == 10153


def test_unknown_field_and_bad_json_and_wrong_types():
    with pytest.raises(UnknownConfigField, match="bogus"):
        parse(bogus=1)
    with pytest.raises(InvalidJSON):
        parse_consumer_config(b"{nope")
    with pytest.raises(InvalidConfig):
        parse(ack_wait="5s")
    with pytest.raises(InvalidConfig):
        parse(ack_policy="sometimes")


@pytest.mark.parametrize(("fields", "err_code"), [
    ({"durable_name": "a.b"}, 10052),
    ({"name": "x" * 256}, 10102),
    ({"backoff": [-1]}, 10184),
    ({"ack_wait": -1}, 10183),
    ({"backoff": [1, 2, 3], "max_deliver": 2}, 10116),
    ({"description": "d" * 4097}, 10107),
    ({"deliver_subject": "out.*"}, 10079),
    ({"deliver_subject": "out", "max_waiting": 5}, 10080),
    ({"deliver_subject": "out", "ack_policy": "none", "max_ack_pending": 5}, 10082),
    ({"deliver_subject": "out", "idle_heartbeat": 1000}, 10083),
    ({"rate_limit_bps": 5}, 10086),
    ({"idle_heartbeat": SECOND}, 10088),
    ({"flow_control": True}, 10089),
    ({"max_expires": 10}, 10115),
    ({"direct": True}, 10090),
    ({"filter_subject": "a", "filter_subjects": ["b"]}, 10136),
    ({"filter_subjects": ["a", ""]}, 10139),
    ({"filter_subjects": ["a.>", "a.b"]}, 10138),
    ({"filter_subject": "a..b"}, 10052),
    ({"deliver_policy": "all", "opt_start_seq": 5}, 10094),
    ({"deliver_policy": "by_start_sequence"}, 10094),
    ({"deliver_policy": "by_start_time"}, 10094),
    ({"deliver_policy": "last_per_subject"}, 10094),
    ({"deliver_policy": "new", "opt_start_time": "2024-01-01T00:00:00Z"}, 10094),
    ({"sample_freq": "abc%"}, 10095),
    ({"deliver_subject": "out", "flow_control": True}, 10108),
    ({"durable_name": "A", "name": "B"}, 10132),
    ({"metadata": {"k": "v" * (128 * 1024)}}, 10135),
    ({"num_replicas": -1}, 10133),
])
def test_refusals_carry_nats_server_codes(fields, err_code):
    error = refused(**fields)
    assert error.err_code == err_code
    assert error.to_api()["err_code"] == err_code


def test_policy_error_text_matches_nats_server():
    error = refused(deliver_policy="by_start_sequence")
    assert error.description == ("consumer delivery policy is deliver by start sequence, "
                                 "but optional start sequence is not set")


def test_rules_against_the_stream():
    wq = StreamConfig(name="W", subjects=("w.>",), retention=Retention.workqueue, num_replicas=3)
    assert refused(wq, ack_policy="all").err_code == 10098
    assert refused(wq, deliver_policy="new").err_code == 10101
    assert refused(wq, ack_policy="none").err_code == 10084  # pull rule comes first, as in nats-server
    assert refused(wq, num_replicas=1).err_code == 10134
    assert refused(wq, num_replicas=5).err_code == 10126
    assert refused(wq, deliver_subject="w.out").err_code == 10081  # delivering into the stream: a cycle
    assert parse(wq, num_replicas=3).num_replicas == 3


def test_times_are_normalised_like_go_and_convert_to_ns():
    config = parse(deliver_policy="by_start_time", opt_start_time="2024-01-02T03:04:05.120000+02:00")
    assert config.opt_start_time == "2024-01-02T03:04:05.12+02:00"
    assert rfc3339_to_ns(config.opt_start_time) == rfc3339_to_ns("2024-01-02T01:04:05.12Z")
    assert rfc3339_to_ns("1970-01-01T00:00:01.000000001Z") == SECOND + 1
    with pytest.raises(InvalidConfig):
        parse(pause_until="yesterday")


_names = st.text(alphabet="abcXYZ019_-", min_size=1, max_size=12)
_ns = st.integers(min_value=0, max_value=10**12)


@st.composite
def configs(draw) -> dict:
    data: dict = {"durable_name": draw(_names)}
    push = draw(st.booleans())
    if push:
        data["deliver_subject"] = "deliver." + draw(_names)
        if draw(st.booleans()):
            data["idle_heartbeat"] = draw(st.integers(min_value=100_000_000, max_value=10**10))
            data["flow_control"] = draw(st.booleans())
    else:
        data["max_batch"] = draw(st.integers(min_value=0, max_value=1000))
        data["max_expires"] = draw(st.sampled_from([0, SECOND, 30 * SECOND]))
    data["ack_policy"] = draw(st.sampled_from(["explicit", "all", "none"]))
    if data["ack_policy"] == "none" and push:
        data["max_ack_pending"] = 0
    data["filter_subjects"] = draw(st.sampled_from([[], ["a.>"], ["a.x", "b.*"]]))
    data["backoff"] = draw(st.lists(st.integers(min_value=1, max_value=10**10), max_size=3))
    data["max_deliver"] = draw(st.sampled_from([-1, 5, 10]))
    data["headers_only"] = draw(st.booleans())
    data["description"] = draw(st.sampled_from(["", "a consumer"]))
    data["metadata"] = draw(st.dictionaries(_names, _names, max_size=2))
    data["deliver_policy"] = draw(st.sampled_from(["all", "last", "new"]))
    return data


@settings(max_examples=200, deadline=None)
@given(configs())
def test_json_form_round_trips(data):
    config = parse(**data)
    served = config.to_json()
    assert ConsumerConfig.from_dict(served) == config
    assert parse(**served) == config  # defaults are idempotent
    zero_fields = {k for k, v in served.items() if v in (0, False, "", [], {}, None)}
    assert zero_fields <= {"num_replicas"}  # everything else is omitempty in nats-server
    json.dumps(served)
