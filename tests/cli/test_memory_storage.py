"""`storage: memory` in the running node: messages in a MemStore on every replica, never on disk, and the
restart rule (server/groups/memory_stream.py).

Method: real `jsraft serve` processes on free loopback ports, driven through nats-py; each node's own
replica is read from its `/jsz` (`jsraft.streams[].local`: first, last, count, bytes, digest, health)
and its memory/storage split from `/jsz`'s stats. Raft snapshots every 10 entries (config file), so a
restarted replica's own snapshot is behind it, the case that used to stay repairing. A restart is SIGKILL
then the same command. Every wait polls a condition with a deadline.

  - R1 memory stream: publish, read back, restart → the stream exists, empty after the last sequence
    (first = last + 1: no sequence handed out twice), and a publish works.
  - R3 memory stream: 100 acknowledged; a follower restarted catches up (all three agree on the state
    tuple) and no drift advisory is published for it (watched for ADVISORY_WINDOW_S after the catch-up); then the leader restarted → the two that kept the messages serve all 100, the restarted one
    catches up again. A file stream beside it is unaffected; no `msgs/` directory holds a memory stream.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import nats
import pytest

from test_serve import free_ports, get, poll, stop

DEADLINE_S = 90.0
ADVISORY_WINDOW_S = 2.0  # how long after a repair the advisories it would raise are watched for


class Node:
    def __init__(self, tmp_path, name: str, ports: dict[str, tuple[int, int, int]]) -> None:
        self.name, self.ports = name, ports
        self.client, self.cluster, self.monitor = ports[name]
        self.store_dir = str(tmp_path / name)
        self.config = tmp_path / f"{name}.json"
        self.config.write_text(json.dumps({"stream_snapshot_every_entries": 10}))
        self.process: subprocess.Popen | None = None
        self.log_path = tmp_path / f"{name}.log"

    def start(self) -> None:
        self.launch()
        self.wait_serving()

    def wait_serving(self) -> None:
        poll(lambda: get(self.monitor, "/varz")[0] == 200, DEADLINE_S, f"{self.name} serving")

    def launch(self) -> None:
        routes = ",".join(f"{n}=127.0.0.1:{p[1]}" for n, p in self.ports.items() if n != self.name)
        args = ["-c", str(self.config), "--name", self.name, "-sd", self.store_dir, "-p", str(self.client),
                "-m", str(self.monitor), "--tick-ms", "50"]
        if routes:
            args += ["--cluster-port", str(self.cluster), "--routes", routes]
        with open(self.log_path, "a") as log:  # the node's warnings, kept for a failure's report
            self.process = subprocess.Popen([sys.executable, "-m", "jsraft", "serve", *args],
                                            stdout=subprocess.DEVNULL, stderr=log)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            stop(self.process, signal.SIGKILL)
        self.process = None

    def restart(self) -> None:
        self.kill()
        self.start()

    def jsz(self) -> dict:
        status, body = get(self.monitor, "/jsz")
        return body if status == 200 and body else {}

    def local(self, stream: str) -> dict | None:
        for entry in self.jsz().get("jsraft", {}).get("streams", []):
            if entry["name"] == stream:
                return entry["local"]
        return None

    def msgs_dir(self, stream: str) -> str:
        return os.path.join(self.store_dir, "streams", stream, "msgs")


@pytest.fixture
def nodes(tmp_path, request):
    count = request.param
    names = [f"n{i}" for i in range(1, count + 1)]
    free = free_ports(3 * count)
    ports = {name: tuple(free[3 * i: 3 * i + 3]) for i, name in enumerate(names)}
    made = [Node(tmp_path, name, ports) for name in names]
    try:
        # Start all before waiting for any: a clustered node is ready only once the meta group has a leader.
        for node in made:
            node.launch()
        for node in made:
            node.wait_serving()
        yield made
    finally:
        for node in made:
            node.kill()


async def connect(node: Node):
    return await nats.connect(f"nats://127.0.0.1:{node.client}", connect_timeout=5, max_reconnect_attempts=-1,
                              reconnect_time_wait=0.2)


async def until(predicate, what: str, timeout_s: float = DEADLINE_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = await predicate()
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what} not reached in {timeout_s}s")


def in_asyncio(scenario, *args):
    return asyncio.run(asyncio.wait_for(scenario(*args), 240))


async def create_and_fill(node: Node, memory_msgs: int, file_msgs: int) -> None:
    """R3 memory stream M (`m.>`, payloads x0, x1, ...) and R3 file stream F (`f.>`, y0, y1, ...)."""
    nc = await connect(node)
    js = nc.jetstream()
    await js.add_stream(name="M", subjects=["m.>"], storage="memory", num_replicas=3)
    await js.add_stream(name="F", subjects=["f.>"], num_replicas=3)
    for i in range(memory_msgs):
        assert (await js.publish("m.a", f"x{i}".encode())).seq == i + 1
    for i in range(file_msgs):
        assert (await js.publish("f.a", f"y{i}".encode())).seq == i + 1
    await nc.close()


def agreement(node: Node, stream: str):
    local = node.local(stream)
    if not local or local.get("health") != "current":
        return None
    return (local["first_seq"], local["last_seq"], local["messages"], local["bytes"], local["digest"])


@pytest.mark.parametrize("nodes", [1], indirect=True)
def test_r1_memory_stream_restarts_empty_and_takes_publishes(nodes):
    (node,) = nodes

    async def before():
        nc = await connect(node)
        js = nc.jetstream()
        await js.add_stream(name="M", subjects=["m.>"], storage="memory")
        for i in range(25):  # past two Raft snapshots (every 10 entries)
            assert (await js.publish("m.a", f"x{i}".encode())).seq == i + 1
        assert (await js.get_msg("M", 7)).data == b"x6"
        info = await js.stream_info("M")
        assert str(getattr(info.config.storage, "value", info.config.storage)) == "memory" and info.state.messages == 25
        account = await js.account_info()  # $JS.API.INFO: the bytes count as memory, none as storage
        assert account.memory == info.state.bytes > 0 and account.storage == 0, account
        await nc.close()

    in_asyncio(before)
    stats = node.jsz()
    assert stats["memory"] > 0 and stats["storage"] == 0, stats
    assert not os.path.exists(node.msgs_dir("M"))
    node.restart()

    async def after():
        nc = await connect(node)
        js = nc.jetstream()

        async def usable():
            try:
                return (await js.stream_info("M")) if agreement(node, "M") else None
            except Exception:
                return None

        info = await until(usable, "M current after the restart")
        assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (0, 26, 25)
        assert (await js.publish("m.a", b"after")).seq == 26
        assert (await js.get_msg("M", 26)).data == b"after"
        await nc.close()

    in_asyncio(after)
    assert not os.path.exists(node.msgs_dir("M"))


@pytest.mark.parametrize("nodes", [3], indirect=True)
def test_r3_memory_stream_survives_a_follower_then_a_leader_restart(nodes):
    by_name = {node.name: node for node in nodes}

    def leader() -> str | None:
        for node in nodes:
            for entry in node.jsz().get("jsraft", {}).get("streams", []):
                if entry["name"] == "M" and entry["leader"]:
                    return entry["leader"]
        return None

    def all_agree(stream: str, messages: int):
        found = {agreement(node, stream) for node in nodes}
        return len(found) == 1 and None not in found and next(iter(found))[2] == messages

    in_asyncio(create_and_fill, nodes[0], 100, 20)
    poll(lambda: all_agree("M", 100) and all_agree("F", 20), DEADLINE_S, "three replicas agree")
    before_m, before_f = agreement(nodes[0], "M"), agreement(nodes[0], "F")

    first_leader = poll(leader, DEADLINE_S, "a stream leader")
    follower = next(node for node in nodes if node.name != first_leader)

    async def restart_follower() -> list[str]:
        """The follower restarted and caught up, with what `$JS.EVENT.ADVISORY.>` carried meanwhile."""
        nc = await connect(by_name[first_leader])
        seen: list[str] = []

        async def note(msg) -> None:
            seen.append(msg.subject)

        await nc.subscribe("$JS.EVENT.ADVISORY.>", cb=note)
        await nc.flush()
        await asyncio.to_thread(follower.restart)

        async def caught_up() -> bool:
            return await asyncio.to_thread(all_agree, "M", 100)

        await until(caught_up, "the restarted follower caught up")
        await asyncio.sleep(ADVISORY_WINDOW_S)  # a drift advisory would follow the repair at once
        await nc.close()
        return seen

    seen = in_asyncio(restart_follower)
    # A memory store emptied by a restart is not damage: no drift advisory (stream_repair invariant 5).
    assert not [subject for subject in seen if "STREAM_DRIFT" in subject.upper()], seen
    assert agreement(follower, "M") == before_m and agreement(follower, "F") == before_f

    by_name[first_leader].restart()
    poll(lambda: all_agree("M", 100), DEADLINE_S, "the restarted leader caught up")
    assert agreement(by_name[first_leader], "M") == before_m

    async def read_all():
        nc = await connect(nodes[0])
        js = nc.jetstream()
        for seq in range(1, 101):
            assert (await js.get_msg("M", seq)).data == f"x{seq - 1}".encode()
        assert (await js.publish("m.a", b"more")).seq == 101
        await nc.close()

    in_asyncio(read_all)
    for node in nodes:
        assert not os.path.exists(node.msgs_dir("M")), node.name
        assert os.path.isdir(node.msgs_dir("F")), node.name
        stats = node.jsz()
        assert stats["memory"] > 0 and stats["storage"] > 0, stats


@pytest.mark.parametrize("nodes", [3], indirect=True)
def test_r3_memory_stream_after_every_replica_restarted_is_empty_at_its_position(nodes):
    def all_agree(stream: str):
        found = {agreement(node, stream) for node in nodes}
        return next(iter(found)) if len(found) == 1 and None not in found else None

    in_asyncio(create_and_fill, nodes[0], 30, 30)
    poll(lambda: all_agree("M") and all_agree("F"), DEADLINE_S, "three replicas agree")
    file_state = all_agree("F")
    for node in nodes:
        node.kill()
    for node in nodes:
        node.launch()
    for node in nodes:
        node.wait_serving()
    # No replica holds M's messages any more: the group goes on empty after sequence 30, on all three.
    state = poll(lambda: all_agree("M"), DEADLINE_S, "M current on all three after the full restart")
    assert state[:4] == (31, 30, 0, 0), state
    assert all_agree("F") == file_state

    async def usable():
        nc = await connect(nodes[1])
        js = nc.jetstream()
        info = await js.stream_info("M")
        assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (0, 31, 30)
        assert (await js.publish("m.a", b"again")).seq == 31
        assert (await js.get_msg("M", 31)).data == b"again"
        assert (await js.get_msg("F", 30)).data == b"y29"
        await nc.close()

    in_asyncio(usable)
    poll(lambda: (all_agree("M") or (0, 0, 0))[2] == 1, DEADLINE_S, "the new message on all three")
