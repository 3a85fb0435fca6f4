"""The version jsraft advertises agrees with what it serves, as nats-py reads both (issue #15).

Method: one real `jsraft serve` process (`bench/nats_servers.py`'s `JsraftServers`, one node) and real
nats-py. nats-py's own suite (tests/test_js.py of v2.15.0) gates the tests of nats-server 2.12's stream
features — atomic batch publish (`allow_atomic`), message schedules (`allow_msg_schedules`), async
persistence (`persist_mode`), counters (`allow_msg_counter`) — on `nc.connected_server_version` being
2.12 or later, and skips them below. The check here is the contract behind those skips: the INFO version is
below 2.12 exactly while each of these fields, sent through nats-py's `add_stream`, is refused with nats-server's
400/10025 "unknown field" naming it, nothing created. Either half going wrong fails it: advertising 2.12
without serving the features (the suite would run its tests against a server that stores the flags and
ignores them), or accepting a field silently. When jsraft serves API level 2, this test changes with it.
"""

from __future__ import annotations

import asyncio

import pytest
from bench_servers import load_servers

from jsraft.jsapi.api_level import API_LEVEL

servers = load_servers()
nats = pytest.importorskip("nats")
from nats.js.api import PersistMode  # noqa: E402
from nats.js.errors import APIError, NotFoundError  # noqa: E402

LEVEL_2_FIELDS = {  # nats-py StreamConfig keyword -> (JSON field, a value that asks for the feature)
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
    """(advertised (major, minor), {field: (code, err_code, description, stream exists afterwards)})."""
    nc = await nats.connect(url, connect_timeout=10, allow_reconnect=False)
    try:
        version = nc.connected_server_version
        js = nc.jetstream(timeout=20)
        answers = {}
        for index, (keyword, (_, value)) in enumerate(LEVEL_2_FIELDS.items()):
            name = f"GATE{index}"
            try:
                await js.add_stream(name=name, subjects=[f"gate.{index}"], **{keyword: value})
                answer = (0, 0, "created")
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


def test_advertised_version_is_below_2_12_while_each_2_12_stream_field_is_refused_by_name(url):
    version, answers = asyncio.run(asyncio.wait_for(level_2_answers(url), 60))
    assert API_LEVEL == 1  # the level this contract is written for (jsapi/api_level.py)
    assert version == (2, 11), f"jsraft at API level {API_LEVEL} advertises {version}"
    for keyword, (field, _) in LEVEL_2_FIELDS.items():
        code, err_code, description, exists = answers[keyword]
        assert (code, err_code) == (400, 10025), (keyword, answers[keyword])
        assert f'unknown field "{field}"' in description, (keyword, description)
        assert not exists, f"{keyword}: the refused stream exists"
