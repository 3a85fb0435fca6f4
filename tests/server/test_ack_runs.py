"""A client's run of JetStream acks read as one event (`AckRun`, ClientConn invariant 12): each ack is still
handled as its own `PUB` would be — permissions, `+OK`, the pedantic `-ERR`, the counters, the ack
shortcut's rivals, the in-flight bound — and reaches the consumer before the pull request written behind it.

Method: a real node (`jsraft.open_node`, free ports, files) and hand-driven clients (`nats_kit.RawClient`)
that write every ack of a test in one `send`, as nats-py writes a fetch's acks with the next pull
request. A stream `A` of `COUNT` messages and a durable pull consumer `C` (explicit ack) are made over
the JetStream API; a fetch on a raw client gives the ack subjects. The acks' effect is read back from
consumer info (polled with a deadline: acks apply in the consumer's next pass). Where a test needs to
know the run took the one-call path, the port's run handler is wrapped to count the acks it took.
"""

from __future__ import annotations

import json
from typing import Any

import trio

import jsraft
from jsraft.protocol import Err, Msg, Ok
from jsraft.server.nats.client_conn import INTERNAL_INFLIGHT_MAX
from jsraft.server.settings.auth_config import ClientAuthConfig, Permissions, SubjectPermission, UserConfig
from nats_kit import DEADLINE_S, RawClient, errors_in, held_handler, release_within_bound, single

OPTIONS = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True, "protocol": 1}
COUNT = 6


def acks(subjects: list[str]) -> bytes:
    """One write of plain acks, as nats-py's `msg.ack()` sends each: no reply, empty payload."""
    return b"".join(b"PUB %s 0\r\n\r\n" % subject.encode() for subject in subjects)


async def request(client: RawClient, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    payload = json.dumps(body).encode()
    await client.send(b"PUB %s _INBOX.api %d\r\n%s\r\n" % (subject.encode(), len(payload), payload))
    return json.loads((await client.expect(Msg, skip=(Ok,))).payload)


async def setup(node: Any, options: dict[str, Any] | None = None) -> tuple[RawClient, list[str]]:
    """Stream `A` with `COUNT` messages, consumer `C`, all fetched on a raw client: (it, their ack subjects)."""
    client = await RawClient.connect(node.client_address, options or OPTIONS)
    await client.send(b"SUB _INBOX.api 1\r\nSUB _INBOX.fetch 2\r\n")
    assert "error" not in await request(client, "$JS.API.STREAM.CREATE.A", {"name": "A", "subjects": ["a"]})
    for i in range(COUNT):
        await client.send(b"PUB a _INBOX.api 2\r\nm%d\r\n" % i)
        assert json.loads((await client.expect(Msg, skip=(Ok,))).payload)["seq"] == i + 1
    config = {"durable_name": "C", "ack_policy": "explicit", "ack_wait": 30_000_000_000}
    assert "error" not in await request(client, "$JS.API.CONSUMER.CREATE.A.C", {"stream_name": "A", "config": config})
    pull = json.dumps({"batch": COUNT, "no_wait": True}).encode()
    await client.send(b"PUB $JS.API.CONSUMER.MSG.NEXT.A.C _INBOX.fetch %d\r\n%s\r\n" % (len(pull), pull))
    replies = [(await client.expect(Msg, skip=(Ok,))).reply for _ in range(COUNT)]
    assert all(reply.startswith("$JS.ACK.A.C.1.") for reply in replies)
    return client, replies


async def consumer_state(client: RawClient, pending: int, floor: int) -> None:
    """Poll consumer info until `num_ack_pending` and the ack floor's stream seq are as given."""
    with trio.fail_after(DEADLINE_S):
        while True:
            info = await request(client, "$JS.API.CONSUMER.INFO.A.C", {})
            if (info["num_ack_pending"], info["ack_floor"]["stream_seq"]) == (pending, floor):
                return
            await trio.sleep(0.01)


def count_runs(node: Any) -> dict[str, int]:
    """Wrap the port's run handler (the consumer hub's `_ack_run`): runs it was handed, acks it took."""
    seen = {"runs": 0, "taken": 0}
    handler = node.clients._ack_run_handler

    def counted(subjects: list[str]) -> list[str]:
        refused = handler(subjects)
        seen["runs"] += 1
        seen["taken"] += len(subjects) - len(refused)
        return refused

    node.clients._ack_run_handler = counted
    return seen


async def test_a_run_of_acks_is_one_call_to_the_hub_and_counts_each_ack(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        admin, replies = await setup(node)
        seen = count_runs(node)
        client = await RawClient.connect(node.client_address, OPTIONS)
        await client.round_trip()
        conn = max(node.clients.clients.values(), key=lambda c: c.cid)
        before, total_before = conn.in_msgs, node.clients.stats.in_msgs
        await client.send(acks(replies))
        assert errors_in(await client.round_trip()) == []
        assert seen == {"runs": 1, "taken": COUNT}
        assert (conn.in_msgs - before, node.clients.stats.in_msgs - total_before) == (COUNT, COUNT)
        await consumer_state(admin, 0, COUNT)


async def test_a_verbose_client_gets_an_ok_for_each_ack_of_a_run(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        admin, replies = await setup(node)
        seen = count_runs(node)
        client = await RawClient.connect(node.client_address, {**OPTIONS, "verbose": True})
        assert [type(e) for e in await client.round_trip()] == [Ok]  # the CONNECT's
        await client.send(acks(replies))
        assert [type(e) for e in await client.round_trip()] == [Ok] * COUNT
        assert seen["taken"] == COUNT
        await consumer_state(admin, 0, COUNT)


async def test_a_pedantic_client_gets_each_acks_answers_in_its_place(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        admin, replies = await setup(node)
        seen = count_runs(node)
        client = await RawClient.connect(node.client_address, {**OPTIONS, "verbose": True, "pedantic": True})
        await client.round_trip()
        # An empty token makes an ack subject invalid: `-ERR` after its `+OK`, nothing acked, the
        # connection kept, the valid acks around it applied.
        bad = "$JS.ACK.A.C.1..9.0.0"
        await client.send(acks([replies[0], bad, replies[1], bad, *replies[2:]]))
        events = await client.round_trip()
        assert [type(e) for e in events] == [Ok, Ok, Err, Ok, Ok, Err] + [Ok] * (COUNT - 2)
        assert errors_in(events) == ["Invalid Publish Subject"] * 2
        assert seen["taken"] == COUNT
        await consumer_state(admin, 0, COUNT)


async def test_permissions_are_checked_for_each_ack_of_a_run(tmp_path):
    denied = ("$JS.ACK.A.C.1.2.>", "$JS.ACK.A.C.1.4.>")  # the acks of stream seqs 2 and 4
    acker = Permissions(publish=SubjectPermission(allow=("$JS.ACK.>",), deny=denied),
                        subscribe=SubjectPermission(allow=None, deny=()))
    users = (UserConfig(user="admin", password="admin-pw"),
             UserConfig(user="acker", password="acker-pw", permissions=acker))
    async with jsraft.open_node(single(tmp_path, client_auth=ClientAuthConfig(users=users))) as node:
        admin, replies = await setup(node, {**OPTIONS, "user": "admin", "pass": "admin-pw"})
        client = await RawClient.connect(node.client_address, {**OPTIONS, "user": "acker", "pass": "acker-pw"})
        assert errors_in(await client.round_trip()) == []
        seen = count_runs(node)
        await client.send(acks(replies))
        assert errors_in(await client.round_trip()) == [f'Permissions Violation for Publish to "{replies[i]}"'
                                                          for i in (1, 3)]
        assert seen["taken"] == COUNT - 2
        await consumer_state(admin, 2, 1)  # 2 and 4 are not acked: the floor stays at 1


async def test_a_subscriber_to_acks_receives_every_ack_of_a_run(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        admin, replies = await setup(node)
        watcher = await RawClient.connect(node.client_address, OPTIONS)
        await watcher.send(b"SUB $JS.ACK.> 9\r\n")
        await watcher.round_trip()
        assert node.clients.ack_rivals == 1
        seen = count_runs(node)
        client = await RawClient.connect(node.client_address, OPTIONS)
        await client.send(acks(replies))
        await client.round_trip()
        assert [(e.subject, e.payload) for e in await watcher.round_trip() if isinstance(e, Msg)] == \
            [(reply, b"") for reply in replies]
        assert seen["taken"] == 0  # the general way: the shortcut is closed while a rival listens
        await consumer_state(admin, 0, COUNT)


async def test_a_run_taking_the_general_way_stops_at_the_in_flight_bound(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        seen: list[str] = []
        # A sync internal handler (a rival of the shortcut): answers via msg.done().
        held = held_handler(node, "$JS.ACK.held.>", lambda msg: seen.append(msg.subject))
        client = await RawClient.connect(node.client_address, OPTIONS)
        await client.round_trip()
        conn = next(iter(node.clients.clients.values()))
        total = 3 * INTERNAL_INFLIGHT_MAX
        subjects = [f"$JS.ACK.held.{i}" for i in range(total)]
        await client.send(acks(subjects))
        await release_within_bound(held, conn, total, INTERNAL_INFLIGHT_MAX, "acks")
        assert seen == subjects, "every ack handled once, in order"
        await client.round_trip()


async def test_the_acks_of_a_run_reach_the_consumer_before_the_pull_behind_them(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        admin, replies = await setup(node)
        service = node.streams.replicas["A"].consumers
        log: list[str] = []
        pull, on_acks, on_ack = service.pull, service.on_acks, service.on_ack

        def logged_pull(*args: Any) -> None:
            log.append("pull")
            pull(*args)

        def logged_acks(items: list, publish: Any) -> None:
            log.extend("ack" for _ in items)
            on_acks(items, publish)

        def logged_ack(item: Any, publish: Any) -> None:
            log.append("ack")
            on_ack(item, publish)

        service.pull, service.on_acks, service.on_ack = logged_pull, logged_acks, logged_ack
        client = await RawClient.connect(node.client_address, OPTIONS)
        await client.send(b"SUB _INBOX.next 1\r\n")
        body = json.dumps({"batch": 1, "no_wait": True}).encode()
        await client.send(acks(replies) + b"PUB $JS.API.CONSUMER.MSG.NEXT.A.C _INBOX.next %d\r\n%s\r\n"
                          % (len(body), body))
        await client.round_trip()
        assert log == ["ack"] * COUNT + ["pull"]
        await consumer_state(admin, 0, COUNT)
