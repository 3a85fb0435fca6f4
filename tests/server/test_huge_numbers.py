"""Numbers of thousands of digits in a publish's headers or a pull request are refused or read as nats-server
reads them, and the node goes on serving.

Method: one real node (`jsraft.open_node`, real files) and real nats-py (`nats_kit.in_asyncio`). Python
refuses to convert more than 4,300 digits between text and int (`ValueError`, a guard against quadratic
conversions); before the fix a `Nats-Expected-Last-Sequence` of 5,000 digits raised it inside the stream
leader's decision and a bare 5,000-digit pull request inside the consumer's delivery — either took the whole
`jsraft serve` process down (seen with a real process). Each is sent here; then a plain publish and a
plain pull must still be served by the same node.
"""

from __future__ import annotations

import json

import jsraft
from nats_kit import in_asyncio, nats_connect, single

BIG = "9" * 5000


async def _scenario(url: str) -> dict:
    nc = await nats_connect(url)
    js = nc.jetstream(timeout=10)
    try:
        await js.add_stream(name="S", subjects=["s"], allow_msg_ttl=True)
        await js.add_consumer("S", durable_name="C")
        seen = {}
        for name, headers in (("expected", {"Nats-Expected-Last-Sequence": BIG}),
                              ("subject_expected", {"Nats-Expected-Last-Subject-Sequence": BIG}),
                              ("ttl", {"Nats-TTL": BIG})):
            seen[name] = json.loads((await nc.request("s", b"x", timeout=10, headers=headers)).data)
        seen["plain"] = json.loads((await nc.request("s", b"ok", timeout=10)).data)
        # A bare number past int64 is a request for one message, as nats-server's Atoi failure makes it.
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.C", BIG.encode(), reply=inbox)
        seen["pulled"] = (await sub.next_msg(timeout=10)).data
        return seen
    finally:
        await nc.close()


async def test_huge_numbers_are_refused_and_the_node_goes_on(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        seen = await in_asyncio(_scenario, node.url)
    assert seen["expected"]["error"]["err_code"] == 10003
    assert seen["subject_expected"]["error"]["err_code"] == 10003
    assert seen["ttl"]["error"]["err_code"] == 10165
    assert seen["plain"] == {"stream": "S", "seq": 1}
    assert seen["pulled"] == b"ok"
