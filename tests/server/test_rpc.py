"""The `$rpc` request/response layer on its own: frames, errors across the wire, bounds, timeouts.

Method: two `Rpc` endpoints wired back to back through an in-memory `send` (no transport), so each
property is checked without sockets; `autojump_clock` makes the timeout test instant.
"""

from __future__ import annotations

import pytest
import trio

from jsraft.errors import StreamNotFound, UnknownConfigField
from jsraft.raft.errors import NotLeader
from jsraft.server.errors import RpcLinkDown, RpcRefused, RpcTimeout
from jsraft.server.groups.rpc import ERROR, REPLY, REQUEST, Rpc, decode_frame, encode_frame
from jsraft.transport.errors import TransportProtocolError


def test_frame_round_trip_and_malformed():
    frame = encode_frame(REQUEST, 7, "msg.publish", {"subject": "a"}, [b"", b"\x00payload"])
    assert decode_frame(frame) == (REQUEST, 7, "msg.publish", {"subject": "a"}, [b"", b"\x00payload"])
    for bad in (frame[:-1], frame + b"x", b"\x09" + frame[1:], b""):
        with pytest.raises(TransportProtocolError):
            decode_frame(bad)


def pair(handler, *, requests_max: int = 8, drop: bool = False):
    endpoints: dict[str, Rpc] = {}

    def sender(me: str):
        def send(to: str, group: str, payload: bytes) -> bool:
            if drop:
                return True  # swallowed: the caller must time out
            endpoints[to].on_payload(me, payload)
            return True
        return send

    endpoints["a"] = Rpc(sender("a"), handler, requests_max=requests_max)
    endpoints["b"] = Rpc(sender("b"), handler, requests_max=requests_max)
    return endpoints


async def test_calls_errors_and_bounds(autojump_clock):
    gate = trio.Event()

    async def handler(from_node, method, args, blobs):
        if method == "echo":
            return {"from": from_node, **args}, [blob[::-1] for blob in blobs]
        if method == "missing":
            raise StreamNotFound()
        if method == "follow":
            raise NotLeader("c")
        if method == "strict":
            raise UnknownConfigField(["colour"], "stream config")
        await gate.wait()
        return {}, []

    rpc = pair(handler, requests_max=2)
    async with trio.open_nursery() as nursery:
        for endpoint in rpc.values():
            await nursery.start(endpoint.run)
        result, blobs = await rpc["a"].call("b", "echo", {"x": 1}, [b"abc"])
        assert result == {"from": "a", "x": 1} and blobs == [b"cba"]
        with pytest.raises(StreamNotFound) as info:  # the same class, with the remote's numbers
            await rpc["a"].call("b", "missing", {})
        assert info.value.err_code == 10059
        with pytest.raises(NotLeader) as hint:
            await rpc["a"].call("b", "follow", {})
        assert hint.value.leader_id == "c"
        with pytest.raises(UnknownConfigField, match="colour"):
            await rpc["a"].call("b", "strict", {})
        # Two requests hold both service slots; the third is refused at once, not queued.
        for _ in range(2):
            nursery.start_soon(rpc["a"].call, "b", "slow", {})
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(RpcRefused):
            await rpc["a"].call("b", "slow", {})
        gate.set()
        nursery.cancel_scope.cancel()


async def test_timeout_and_late_reply(autojump_clock):
    async def handler(from_node, method, args, blobs):
        return {}, []

    rpc = pair(handler, drop=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(rpc["a"].run)
        with pytest.raises(RpcTimeout):
            await rpc["a"].call("b", "echo", {}, timeout_s=1.0)
        rpc["a"].on_payload("b", encode_frame(REPLY, 1, "echo", {}))  # late: dropped, nothing waits
        nursery.cancel_scope.cancel()


async def test_a_link_down_fails_the_calls_waiting_on_that_peer_at_once(autojump_clock):
    async def handler(from_node, method, args, blobs):
        return {}, []

    rpc = pair(handler, drop=True)  # requests vanish: only the link going down can end the wait early
    outcomes: dict[str, object] = {}

    async def call(to_node: str, key: str) -> None:
        started = trio.current_time()
        try:
            await rpc["a"].call(to_node, "echo", {}, timeout_s=5.0)
        except RpcTimeout as error:
            outcomes[key] = (type(error).__name__, trio.current_time() - started)

    async with trio.open_nursery() as nursery:
        await nursery.start(rpc["a"].run)
        async with trio.open_nursery() as calls:
            calls.start_soon(call, "b", "to b")
            calls.start_soon(call, "c", "to c")
            await trio.sleep(0.5)
            rpc["a"].on_link("c", True)  # another peer coming up changes nothing
            rpc["a"].on_link("b", False)
        nursery.cancel_scope.cancel()
    name, waited = outcomes["to b"]
    assert name == "RpcLinkDown" and waited == pytest.approx(0.5)
    assert outcomes["to c"] == ("RpcTimeout", pytest.approx(5.0))
    assert issubclass(RpcLinkDown, RpcTimeout)  # callers treat it as an unknown outcome, never retry blindly


async def test_a_starter_begins_requests_in_the_order_one_task_sent_them(autojump_clock):
    """Rpc invariant 5. Without the starter, the handlers of requests delivered together start in whatever
    order trio runs their tasks (it reverses a batch half the time), so ten rounds would see it."""
    started: list[int] = []

    async def handler(from_node, method, args, blobs):
        started.append(args["n"])  # where a plain handler begins: in its task
        return {}, []

    def starter(from_node, args, blobs):
        started.append(args["n"])  # at the frame's arrival

        async def rest():
            await trio.sleep(0.001)
            return {"n": args["n"]}, []
        return rest()

    for with_starter in (True, False):
        orders = []
        for _ in range(10):
            started.clear()
            rpc = pair(handler, requests_max=64)
            if with_starter:
                rpc["b"].starters["ordered"] = starter
            async with trio.open_nursery() as nursery:
                for endpoint in rpc.values():
                    await nursery.start(endpoint.run)
                ids = [rpc["a"].send_request("b", "ordered", {"n": n}) for n in range(20)]
                replies = [await rpc["a"].reply(request_id) for request_id in ids]
                nursery.cancel_scope.cancel()
            orders.append(list(started))
            if with_starter:
                assert [result["n"] for result, _ in replies] == list(range(20))
        in_order = [order == list(range(20)) for order in orders]
        assert all(in_order) if with_starter else not all(in_order), orders


async def test_a_starter_error_is_the_request_error(autojump_clock):
    def starter(from_node, args, blobs):
        raise NotLeader("c")

    rpc = pair(lambda *args: None)
    rpc["b"].starters["refused"] = starter
    async with trio.open_nursery() as nursery:
        for endpoint in rpc.values():
            await nursery.start(endpoint.run)
        with pytest.raises(NotLeader) as info:
            await rpc["a"].call("b", "refused", {})
        assert info.value.leader_id == "c"
        nursery.cancel_scope.cancel()


async def test_a_consumer_create_reply_gates_its_link_until_the_caller_has_it(autojump_clock):
    """Rpc invariant 7: the reply to an `ANSWER_FIRST` call comes with a gate for the transport (nothing
    after it on the link is read while it is closed), opened by the step in which the waiting caller
    takes the reply, so the link's reader goes on only after that step; any other reply, and a create's
    error, gate nothing."""
    async def handler(from_node, method, args, blobs):
        return {}, []

    rpc = pair(handler, drop=True)  # requests vanish: the test hands each reply in itself
    log: list[str] = []

    async def call(method: str) -> None:
        try:
            result, _ = await rpc["a"].call("b", method, {})
        except StreamNotFound:
            result = {"name": "refused"}
        log.append(f"took {result['name']}")  # the caller's step that took the reply (its answer goes here)

    async def reader(gate: trio.Event) -> None:
        await gate.wait()
        log.append("link reads on")

    async with trio.open_nursery() as nursery:
        await nursery.start(rpc["a"].run)
        for request_id, (method, kind, body) in enumerate((
                ("consumer.create", REPLY, {"name": "C"}),
                ("consumer.info", REPLY, {"name": "I"}),
                ("consumer.create", ERROR, {**StreamNotFound().to_api(), "kind": "StreamNotFound"})), 1):
            nursery.start_soon(call, method)
            await trio.testing.wait_all_tasks_blocked()
            gate = rpc["a"].on_payload("b", encode_frame(kind, request_id, method, body))
            if request_id == 1:
                assert isinstance(gate, trio.Event) and not gate.is_set()
                nursery.start_soon(reader, gate)
            else:
                assert gate is None
            await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert log == ["took C", "link reads on", "took I", "took refused"]
