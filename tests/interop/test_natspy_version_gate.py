"""The version jsraft advertises agrees with what it serves, as nats-py reads both (issue #15).

Method: one real `jsraft serve` process (`bench/nats_servers.py`'s `JsraftServers`, one node) and real
nats-py. nats-py's own suite (tests/test_js.py of v2.15.0) gates the tests of nats-server 2.12's stream
features — atomic batch publish (`allow_atomic`), message schedules (`allow_msg_schedules`), async
persistence (`persist_mode`), counters (`allow_msg_counter`) — on `nc.connected_server_version` being
2.12 or later, and skips them below. The check here is the contract behind those skips: the INFO version is
below 2.12 exactly while one of these fields is not served (`api_level.LEVEL_2_SERVED`), and each field
not served, sent through nats-py's `add_stream`, is refused with nats-server's 400/10025 "unknown field"
naming it, nothing created; each one served is accepted and served back as set. Either half going wrong
fails it: advertising 2.12 without serving the features (the suite would run its tests against a server
that stores the flags and ignores them), or accepting a field silently.
"""

from __future__ import annotations

import asyncio

import pytest
from bench_servers import load_servers

from jsraft.jsapi.api_level import API_LEVEL, LEVEL_2_FIELDS, LEVEL_2_SERVED

servers = load_servers()
nats = pytest.importorskip("nats")
from nats.js.api import PersistMode  # noqa: E402
from nats.js.errors import APIError, NotFoundError  # noqa: E402

FIELDS = {  # nats-py StreamConfig keyword -> (JSON field, a value that asks for the feature)
    "allow_atomic": ("allow_atomic", True),
    "allow_msg_schedules": ("allow_msg_schedules", True),
    "persist_mode": ("persist_mode", PersistMode.ASYNC),
    "allow_msg_counter": ("allow_msg_counter", True),
}


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    with servers.JsraftServers(str(tmp_path_factory.mktemp("gate")), nodes=1) as system:
        yield system.urls[0]


async def level_2_answers(url: str) -> tuple[tuple[int, int], dict[str, tuple[int, int, str, bool]]]:
    """(advertised (major, minor), {field: (code, err_code, description or the served value, stream exists
    afterwards)})."""
    nc = await nats.connect(url, connect_timeout=10, allow_reconnect=False)
    try:
        version = nc.connected_server_version
        js = nc.jetstream(timeout=20)
        answers = {}
        for index, (keyword, (_, value)) in enumerate(FIELDS.items()):
            name = f"GATE{index}"
            try:
                info = await js.add_stream(name=name, subjects=[f"gate.{index}"], **{keyword: value})
                answer = (0, 0, getattr(info.config, keyword))
            except APIError as error:
                answer = (error.code, error.err_code, error.description)
            try:
                await js.stream_info(name)
                exists = True
            except NotFoundError:
                exists = False
            answers[keyword] = (*answer, exists)
        return (version.major, version.minor), answers
    finally:
        await nc.close()


def test_advertised_version_is_2_12_exactly_when_every_2_12_stream_field_is_served(url):
    version, answers = asyncio.run(asyncio.wait_for(level_2_answers(url), 60))
    assert set(LEVEL_2_FIELDS) == {field for field, _ in FIELDS.values()}  # the test covers nats-server's list
    served = set(LEVEL_2_SERVED)
    assert (API_LEVEL == 2) == (served == set(LEVEL_2_FIELDS))
    assert version == ((2, 12) if API_LEVEL == 2 else (2, 11)), f"jsraft at API level {API_LEVEL} advertises {version}"
    for keyword, (field, value) in FIELDS.items():
        code, err_code, description, exists = answers[keyword]
        if field in served:
            assert (code, err_code, description, exists) == (0, 0, value, True), (keyword, answers[keyword])
            continue
        assert (code, err_code) == (400, 10025), (keyword, answers[keyword])
        assert f'unknown field "{field}"' in description, (keyword, description)
        assert not exists, f"{keyword}: the refused stream exists"
