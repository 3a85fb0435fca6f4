"""`$JSRAFT.BULK.GET.<stream>`: the columnar bulk read returns what batched direct gets return.

Method: an R3 stream on a 3-node `Cluster`, nats-py connected to a follower (so chunks cross a route),
holding messages with and without headers, interior deletes and a purged head, and enough 1 KiB
messages to need several chunks. Each bulk request's chunks are unpacked here with `struct` (the
layout documented in `jsraft.server.api.bulk_get`, independently of the Spark reader's decoder) and compared
with the same range read by batched direct gets (ADR-31, itself compared with nats-server in
test_direct_batch.py). Also: `last_seq` bounds the read, `batch` stops it with `Jsraft-Bulk-End: 0`,
bad requests are `408`, an unknown stream `404`.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import trio

from jsraft.testing.cluster import Cluster
from nats_kit import in_asyncio, nats_connect


def unpack(payload: bytes) -> list[tuple[int, str, bytes, bytes]]:
    assert payload[:4] == b"JSB1"
    (count,) = struct.unpack_from("<I", payload, 4)
    at = 8
    columns = []
    for code, width in (("q", 8), ("q", 8), ("I", 4), ("I", 4), ("I", 4)):
        columns.append(struct.unpack_from(f"<{count}{code}", payload, at))
        at += width * count
    seqs, _, subject_lens, header_lens, data_lens = columns
    out = []
    subjects_at = at
    headers_at = subjects_at + sum(subject_lens)
    data_at = headers_at + sum(header_lens)
    assert data_at + sum(data_lens) == len(payload)
    for i in range(count):
        subject = payload[subjects_at:subjects_at + subject_lens[i]].decode()
        headers = payload[headers_at:headers_at + header_lens[i]]
        data = payload[data_at:data_at + data_lens[i]]
        subjects_at, headers_at, data_at = subjects_at + subject_lens[i], headers_at + header_lens[i], data_at + data_lens[i]
        out.append((seqs[i], subject, headers, data))
    return out


async def _collect(nc: Any, subject: str, body: Any, timeout_s: float = 10) -> list[Any]:
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.flush()
    await nc.publish(subject, body if isinstance(body, bytes) else json.dumps(body).encode(), reply=inbox)
    replies = []
    while True:
        msg = await sub.next_msg(timeout=timeout_s)
        replies.append(msg)
        if msg.headers and msg.headers.get("Status"):
            break
    await sub.unsubscribe()
    return replies


async def bulk(nc: Any, body: Any, stream: str = "S", timeout_s: float = 10) -> tuple[list[Any], int, dict[str, str]]:
    replies = await _collect(nc, f"$JSRAFT.BULK.GET.{stream}", body, timeout_s)
    rows = [row for msg in replies[:-1] for row in unpack(msg.data)]
    return rows, len(replies) - 1, dict(replies[-1].headers)


async def direct(nc: Any, body: dict[str, Any]) -> list[tuple[int, str, bytes]]:
    replies = await _collect(nc, "$JS.API.DIRECT.GET.S", body)
    return [(int(m.headers["Nats-Sequence"]), m.headers["Nats-Subject"], m.data) for m in replies[:-1]]


async def scenario(url: str) -> dict[str, Any]:
    nc = await nats_connect(url)
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="S", subjects=["s.>"], num_replicas=3, allow_direct=True)
    for i in range(40):
        await js.publish(f"s.{i % 3}", b"m%d" % i, headers={"X-I": str(i)} if i % 4 == 0 else None)
    for seq in (3, 17, 18, 30):
        await js.delete_msg("S", seq)
    await js.purge_stream("S", seq=6)
    acks = [await js.publish_async("s.big", bytes([i % 256]) * 1024) for i in range(700)]
    for ack in acks:
        await ack
    seen: dict[str, Any] = {"all": await bulk(nc, {"seq": 1, "last_seq": 740, "batch": 5000}),
                            "direct": await direct(nc, {"seq": 1, "batch": 5000}),
                            "filtered": await bulk(nc, {"seq": 1, "last_seq": 740, "batch": 100, "next_by_subj": "s.1"}),
                            "bounded": await bulk(nc, {"seq": 2, "last_seq": 25, "batch": 100}),
                            "counted": await bulk(nc, {"seq": 1, "last_seq": 740, "batch": 10}),
                            "past_end": await bulk(nc, {"seq": 900, "last_seq": 1000, "batch": 10})}
    seen["bad"] = [dict(m.headers) for m in await _collect(nc, "$JSRAFT.BULK.GET.S", b'{"seq": 0, "batch": 1}')]
    seen["unknown_field"] = [dict(m.headers) for m in await _collect(nc, "$JSRAFT.BULK.GET.S", {"seq": 1, "batch": 1, "x": 1})]
    seen["no_stream"] = [dict(m.headers) for m in await _collect(nc, "$JSRAFT.BULK.GET.NOPE", {"seq": 1, "batch": 1})]
    await nc.close()
    return seen


async def test_bulk_get_returns_what_batched_direct_gets_return(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=20, election_ticks=10) as cluster:
            leader = await cluster.wait_for_meta_leader(timeout=20)
            await cluster.wait_ready(timeout=20)
            follower = next(name for name in cluster.names if name != leader)
            seen = await in_asyncio(scenario, cluster.node(follower).url, timeout_s=90)
    rows, chunks, eob = seen["all"]
    assert [(seq, subject, data) for seq, subject, _, data in rows] == seen["direct"]
    assert rows[0][0] == 6 and 17 not in [r[0] for r in rows] and rows[-1][0] == 740  # deletes, purged head
    assert len(rows) == 740 - 5 - 3 and chunks >= 2  # 700 KiB of data: more than one 512 KiB chunk
    by_seq = {r[0]: r for r in rows}
    assert by_seq[9][2].startswith(b"NATS/1.0\r\nX-I: 8") and by_seq[8][2] == b""  # message i is seq i + 1
    assert eob["Status"] == "204" and eob["Nats-Last-Sequence"] == "740" and eob["Jsraft-Bulk-End"] == "1"
    filtered, _, _ = seen["filtered"]
    assert [r[0] for r in filtered] == [s for s in range(6, 41) if s % 3 == 2 and s not in (17, 18, 30)]
    bounded, _, bounded_eob = seen["bounded"]
    assert [r[0] for r in bounded] == [s for s in range(6, 26) if s not in (17, 18)]
    assert bounded_eob["Jsraft-Bulk-End"] == "1"
    counted, _, counted_eob = seen["counted"]
    assert len(counted) == 10 and counted_eob["Jsraft-Bulk-End"] == "0"
    assert counted_eob["Nats-Last-Sequence"] == str(counted[-1][0])
    assert seen["past_end"][0] == [] and seen["past_end"][2]["Nats-Last-Sequence"] == "0"
    assert seen["bad"][0]["Status"] == "408" and seen["unknown_field"][0]["Status"] == "408"
    assert seen["no_stream"][0]["Status"] == "404"
