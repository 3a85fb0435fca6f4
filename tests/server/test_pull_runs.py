"""A fetch's messages leave in growing runs, written as they are read, their DELIVERED ops in the pass's one
proposal (consumer_service invariant 7, consumer_pull invariant 6): the client gets the first 128 messages
of a 500-message fetch (then 372) while the node reads the rest, as nats-server's per-message
delivery loop sends them.

Method: a real node (`jsraft.open_node`, free ports, files), a raw client (`nats_kit.RawClient`) that
publishes 500 messages to stream `A`, creates a durable pull consumer `C` (explicit ack) and fetches 500.
The client port's `deliver_as` is wrapped to note, for each run handed to it, its length, whether it was
to leave at once, and the consumer service's last proposal at that moment: the runs sent at once go
before the pass's proposal, the last run after it, and the pass makes one proposal. Every message must
arrive once, in stream order, and consumer info must then count all 500 delivered.
"""

from __future__ import annotations

import json
from typing import Any

import jsraft
from jsraft.protocol import Msg, Ok
from nats_kit import RawClient, single

OPTIONS = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True, "protocol": 1}
COUNT = 500


async def request(client: RawClient, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    payload = json.dumps(body).encode()
    await client.send(b"PUB %s _INBOX.api %d\r\n%s\r\n" % (subject.encode(), len(payload), payload))
    return json.loads((await client.expect(Msg, skip=(Ok,))).payload)


def note_runs(node: Any) -> list[tuple[int, bool, object]]:
    runs: list[tuple[int, bool, object]] = []
    deliver_as = node.clients.deliver_as
    service = node.streams.replicas["A"].consumers

    def noted(subject: str, run: list, now: bool = False) -> bool:
        runs.append((len(run), now, service._last))
        return deliver_as(subject, run, now)

    node.clients.deliver_as = noted
    return runs


async def test_a_large_fetch_leaves_in_growing_runs_sent_as_read_with_one_proposal(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        client = await RawClient.connect(node.client_address, OPTIONS)
        await client.send(b"SUB _INBOX.api 1\r\nSUB _INBOX.fetch 2\r\n")
        assert "error" not in await request(client, "$JS.API.STREAM.CREATE.A", {"name": "A", "subjects": ["a"]})
        await client.send(b"".join(b"PUB a _INBOX.api 4\r\nm%03d\r\n" % i for i in range(COUNT)))
        assert [json.loads((await client.expect(Msg, skip=(Ok,))).payload)["seq"] for _ in range(COUNT)] == \
            list(range(1, COUNT + 1))
        config = {"durable_name": "C", "ack_policy": "explicit", "ack_wait": 30_000_000_000}
        assert "error" not in await request(client, "$JS.API.CONSUMER.CREATE.A.C", {"stream_name": "A", "config": config})
        runs = note_runs(node)
        pull = json.dumps({"batch": COUNT, "expires": 10_000_000_000}).encode()
        await client.send(b"PUB $JS.API.CONSUMER.MSG.NEXT.A.C _INBOX.fetch %d\r\n%s\r\n" % (len(pull), pull))
        got = [(await client.expect(Msg, skip=(Ok,))) for _ in range(COUNT)]
        assert [msg.payload for msg in got] == [b"m%03d" % i for i in range(COUNT)]
        assert [msg.reply.split(".")[5] for msg in got] == [str(seq) for seq in range(1, COUNT + 1)]
        assert [(size, now) for size, now, _ in runs] == [(128, True), (372, False)]
        before, after = [proposal for _, _, proposal in runs]
        assert after is not before and after is not None  # one proposal, after the run sent at once
        info = await request(client, "$JS.API.CONSUMER.INFO.A.C", {})
        assert info["delivered"]["stream_seq"] == COUNT and info["num_ack_pending"] == COUNT


async def test_a_fetch_of_up_to_the_first_run_leaves_in_one_write_as_a_burst(tmp_path):
    # nats-py's test_pull_subscribe_limits counts on it: its 50-message pending limit must drop part of a
    # fetch of 100 that arrives at once.
    async with jsraft.open_node(single(tmp_path)) as node:
        client = await RawClient.connect(node.client_address, OPTIONS)
        await client.send(b"SUB _INBOX.api 1\r\nSUB _INBOX.fetch 2\r\n")
        assert "error" not in await request(client, "$JS.API.STREAM.CREATE.A", {"name": "A", "subjects": ["a"]})
        await client.send(b"".join(b"PUB a _INBOX.api 4\r\nm%03d\r\n" % i for i in range(100)))
        for _ in range(100):
            await client.expect(Msg, skip=(Ok,))
        config = {"durable_name": "C", "ack_policy": "explicit", "ack_wait": 30_000_000_000}
        assert "error" not in await request(client, "$JS.API.CONSUMER.CREATE.A.C", {"stream_name": "A", "config": config})
        runs = note_runs(node)
        pull = json.dumps({"batch": 100, "expires": 10_000_000_000}).encode()
        await client.send(b"PUB $JS.API.CONSUMER.MSG.NEXT.A.C _INBOX.fetch %d\r\n%s\r\n" % (len(pull), pull))
        got = [(await client.expect(Msg, skip=(Ok,))) for _ in range(100)]
        assert [msg.payload for msg in got] == [b"m%03d" % i for i in range(100)]
        assert [(size, now) for size, now, _ in runs] == [(100, False)]
