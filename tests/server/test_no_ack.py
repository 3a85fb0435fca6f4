"""`no_ack: true` streams answer no publish, as nats-py sees it on a real node.

Method: a real node (`jsraft.open_node`, real files, client port 0) driven by nats-py under asyncio
(`nats_kit.in_asyncio`). A publish with a reply subject is stored
(polled through stream info, with a deadline) and, once a PING/PONG round trip proved every earlier
answer would have arrived, its inbox got nothing — neither an ack nor, for a refused publish, an error;
a stream without `no_ack` answers the same publishes (the control).
"""

from __future__ import annotations

import asyncio

import jsraft
from nats_kit import in_asyncio, nats_connect, single


async def _no_ack(url: str) -> dict:
    nc = await nats_connect(url)
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="N", subjects=["n.>"], no_ack=True)
    await js.add_stream(name="A", subjects=["a.>"])
    answers: dict[str, list[bytes]] = {"N": [], "A": []}
    for stream, subject in (("N", "n.1"), ("A", "a.1")):
        inbox = nc.new_inbox()

        async def record(msg, stream=stream):
            answers[stream].append(msg.data)

        await nc.subscribe(inbox, cb=record)
        await nc.publish(subject, b"stored", reply=inbox)
        # A refused publish (wrong expected last sequence) is answered with an error... unless no_ack.
        await nc.publish(subject, b"refused", reply=inbox, headers={"Nats-Expected-Last-Sequence": "99"})
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while (await js.stream_info("N")).state.messages < 1 or len(answers["A"]) < 2:
        assert loop.time() < deadline, "the publishes were not stored in time"
        await asyncio.sleep(0.02)
    await nc.flush()  # a PING/PONG round trip: every answer sent before it has arrived
    seen = {"stored": (await js.stream_info("N")).state.messages, "answers": answers,
            "config": (await js.stream_info("N")).config.no_ack}
    await nc.close()
    return seen


async def test_a_no_ack_stream_answers_no_publish(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        seen = await in_asyncio(_no_ack, node.url)
    assert seen["stored"] == 1 and seen["config"] is True
    assert seen["answers"]["N"] == []
    control = seen["answers"]["A"]
    assert b'"seq":1' in control[0] and b"10071" in control[1]  # the control: an ack, then the error
