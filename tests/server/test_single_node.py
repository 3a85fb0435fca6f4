"""One node through `jsraft.open_node`: identity, streams, 1,000 checked publishes, reads, restart.

Method: a real node on real files under `tmp_path` and a real loopback listener (port 0), driven through
the embedded JetStream context; the restart opens a new node on the same directory and reads back.
"""

from __future__ import annotations

import json

import pytest
import trio

import jsraft
from jsraft.errors import InvalidConfig, UnknownConfigField
from jsraft.raft.errors import NotLeader
from jsraft.server import IdentityMismatch, NodeConfig


def single(tmp_path, name: str = "n1", **overrides) -> NodeConfig:
    return NodeConfig(name=name, store_dir=str(tmp_path / "data"), cluster_port=0, client_port=0, tick_ms=20,
                      election_ticks=5, test_mode=True, **overrides)


def test_config_is_strict(tmp_path):
    with pytest.raises(UnknownConfigField, match="colour") as info:
        NodeConfig.from_dict({"name": "n1", "store_dir": str(tmp_path), "colour": "red"})
    assert info.value.err_code == 10052
    config = NodeConfig.from_dict({"name": "n1", "store_dir": "d", "routes": {"n2": "127.0.0.1:7000"}})
    assert config.peers == {"n2": ("127.0.0.1:7000")} and config.voters() == ("n1", "n2")
    with pytest.raises(InvalidConfig, match="host:port"):
        NodeConfig.from_dict({"name": "n1", "store_dir": "d", "peers": {"n2": "nowhere"}})
    with pytest.raises(InvalidConfig, match="election_ticks"):
        NodeConfig(name="n1", store_dir="d", election_ticks=1).validate()


async def test_publish_read_restart(tmp_path):
    config = single(tmp_path)
    async with jsraft.open_node(config) as node:
        js = node.jetstream()
        info = await js.add_stream(name="ORDERS", subjects=["orders.>"])
        assert info.config.name == "ORDERS" and info.cluster["leader"] == "n1"
        acks = []
        async with trio.open_nursery() as nursery:
            async def publisher(worker: int) -> None:
                for i in range(worker, 1000, 20):
                    acks.append((i, await js.publish(f"orders.{i % 7}", f"m{i}".encode())))
            for worker in range(20):
                nursery.start_soon(publisher, worker)
        assert len(acks) == 1000
        assert all(ack.stream == "ORDERS" and not ack.duplicate for _, ack in acks)
        assert sorted(ack.seq for _, ack in acks) == list(range(1, 1001))
        by_seq = {ack.seq: i for i, ack in acks}
        msg = await js.get_msg("ORDERS", seq=500)
        assert msg.data == f"m{by_seq[500]}".encode() and msg.subject == f"orders.{by_seq[500] % 7}"
        dup = await js.publish("orders.x", b"once", msg_id="abc")
        again = await js.publish("orders.x", b"once", msg_id="abc")
        assert again.duplicate and again.seq == dup.seq == 1001
        state = (await js.stream_info("ORDERS")).state
        assert state["messages"] == 1001 and state["last_seq"] == 1001
    identity = json.loads((tmp_path / "data" / "node.json").read_text())
    assert identity["node_name"] == "n1" and identity["cluster_name"] == "jsraft"

    async with jsraft.open_node(config) as node:
        js = node.jetstream()
        assert js.stream_names() == ["ORDERS"]
        info = await js.stream_info("ORDERS")
        assert info.state["messages"] == 1001
        for seq in (1, 500, 1000):
            assert (await js.get_msg("ORDERS", seq=seq)).data == f"m{by_seq[seq]}".encode()
        assert (await js.publish("orders.1", b"after")).seq == 1002
    assert json.loads((tmp_path / "data" / "node.json").read_text()) == identity


async def test_foreign_store_dir_is_refused(tmp_path):
    async with jsraft.open_node(single(tmp_path)):
        pass
    with pytest.raises(IdentityMismatch, match="belongs to node 'n1'"):
        async with jsraft.open_node(single(tmp_path, name="n2")):
            pass
    with pytest.raises(IdentityMismatch, match="cluster"):
        async with jsraft.open_node(single(tmp_path, cluster_name="other")):
            pass


async def test_bad_stream_requests(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        js = node.jetstream()
        with pytest.raises(UnknownConfigField, match="max_msgz") as info:
            await js.add_stream(name="S", subjects=["s"], max_msgz=3)
        assert info.value.err_code == 10052
        with pytest.raises(InvalidConfig, match="stream name") as info:
            await js.add_stream(name="bad.name", subjects=["x"])
        assert info.value.err_code == 10052
        assert js.stream_names() == []
        assert not (tmp_path / "data" / "streams").exists() or not list((tmp_path / "data" / "streams").iterdir())
        await js.add_stream(name="S", subjects=["s.>"], max_msg_size=10)
        with pytest.raises(jsraft.server.RemoteError) as info:
            await js.publish("s.1", b"x" * 100)
        assert info.value.err_code == 10054
        assert (await js.publish("s.1", b"ok")).seq == 1
        assert await js.delete_msg("S", 1)
        with pytest.raises(jsraft.errors.NoMessageFound):
            await js.get_msg("S", seq=1)
        await js.publish("s.2", b"a")
        await js.publish("s.2", b"b")
        assert await js.purge_stream("S") == 2


async def test_a_duplicate_of_an_in_flight_publish_is_answered_as_its_original(tmp_path):
    """Two publishes with one `Nats-Msg-Id` decided together: the second waits for the first's outcome — a
    duplicate ack only once the original is stored; the original's error if its entry failed."""
    async with jsraft.open_node(single(tmp_path)) as node:
        js = node.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        replica = node.streams.replicas["ORDERS"]
        answers: list = []

        async def publish_twice(msg_id: str) -> None:
            async def one() -> None:
                try:
                    answers.append(await js.publish("orders.x", b"body", msg_id=msg_id))
                except Exception as error:  # the outcome under test
                    answers.append(error)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(one)
                nursery.start_soon(one)

        await publish_twice("same")
        seqs = sorted((a.seq, a.duplicate) for a in answers)
        assert seqs == [(1, False), (1, True)]

        real_submit = replica.runtime.submit

        async def failing_submit(group, entry, **kwargs):
            raise NotLeader(None)

        replica.runtime.submit = failing_submit
        answers.clear()
        await publish_twice("lost")
        replica.runtime.submit = real_submit
        assert len(answers) == 2 and all(isinstance(a, Exception) for a in answers), answers
        retried = await js.publish("orders.x", b"body", msg_id="lost")
        assert retried.seq == 2 and not retried.duplicate
