"""Network faults for the chaos harness: the userspace relay, the nft partitioner, the shared link helpers.

Method: the relay is checked with plain blocking TCP sockets (a "server" socket as each node's cluster
listener, clients dialling `relay.peer_address`) and byte counts with deadlines: bytes arrive intact in
both directions; after a cut nothing arrives within a window while the bytes flow again (or a new
connection works) after the heal; a one-way cut stalls exactly one direction of *both* connections of a
pair; a delay holds bytes at least that long and keeps their order under jitter. Each "nothing arrives"
check is paired with a positive check on the same socket, so a relay that drops everything fails too.
Then a real three-node jsraft cluster (`jsraft.testing.cluster.Cluster` with each node's peers pointing
at the relay): isolating the stream leader gets a new leader elected among the other two and a publish
through one of them acked; after the heal the isolated node's own store holds every message. The nft
partitioner runs in a private network namespace (`unshare -n`) made for the test, in a child process;
those tests skip, with the reason, where unshare or nft is missing.
"""

from __future__ import annotations

import json
import os
import random
import socket
import sys
import textwrap
import threading
import time

import pytest
import trio

import jsraft.client as jc
from jsraft.testing.chaos import netns
from jsraft.testing.chaos.net import SwizzleStep, isolate_links, partition_links
from jsraft.testing.chaos.network import make_network
from jsraft.testing.chaos.relay import Relay
from jsraft.testing.cluster import Cluster, relayed_configs

DEADLINE_S = 10.0
QUIET_S = 0.5  # how long "no bytes arrive" is watched


# --- Plain TCP helpers --------------------------------------------------------------------------------------

def _listener() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.settimeout(DEADLINE_S)
    return sock


def _address(sock: socket.socket) -> str:
    return "%s:%d" % sock.getsockname()[:2]


def _dial(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=DEADLINE_S)
    return sock


def _pair(relay: Relay, src: str, dst: str, server: socket.socket) -> tuple[socket.socket, socket.socket]:
    """(src's end, dst's end) of a connection src dialled through the relay to dst's listener `server`."""
    client = _dial(relay.peer_address(src, dst))
    accepted, _ = server.accept()
    accepted.settimeout(DEADLINE_S)
    return client, accepted


def _receive(sock: socket.socket, count: int, timeout_s: float = DEADLINE_S) -> bytes:
    """Exactly `count` bytes, or fewer if the deadline passes or the peer closes."""
    data = bytearray()
    deadline = time.monotonic() + timeout_s
    while len(data) < count and (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            chunk = sock.recv(count - len(data))
        except TimeoutError:
            break
        if not chunk:
            break
        data += chunk
    return bytes(data)


def _quiet(sock: socket.socket) -> bool:
    """True if nothing arrives on `sock` for `QUIET_S` (the connection stays open)."""
    sock.settimeout(QUIET_S)
    try:
        sock.recv(1, socket.MSG_PEEK)  # data, or b"" for a closed connection: not quiet
    except TimeoutError:
        return True
    return False


def _closed(sock: socket.socket) -> bool:
    """True if `sock` is reset or closed by the other end within the deadline, before any byte arrives."""
    try:
        return _receive(sock, 1) == b"" and not _timed_out(sock)
    except ConnectionResetError:
        return True


def _timed_out(sock: socket.socket) -> bool:
    sock.settimeout(0.0)
    try:
        return sock.recv(1, socket.MSG_PEEK) is None
    except BlockingIOError:
        return True  # still open and silent: `_receive` gave up at its deadline
    except OSError:
        return False


@pytest.fixture
def relay():
    with Relay(["a", "b", "c"]) as relay:
        yield relay


# --- The relay over plain sockets ---------------------------------------------------------------------------

def test_relay_forwards_bytes_both_ways_intact(relay):
    server = _listener()
    relay.set_target("b", _address(server))
    client, accepted = _pair(relay, "a", "b", server)
    rng = random.Random(7)
    up, down = rng.randbytes(3 << 20), rng.randbytes(2 << 20)
    received: dict[str, bytes] = {}
    reader = threading.Thread(target=lambda: received.update(down=_receive(client, len(down))))
    reader.start()
    writer = threading.Thread(target=accepted.sendall, args=(down,))
    writer.start()
    client.sendall(up)
    assert _receive(accepted, len(up)) == up
    writer.join(DEADLINE_S)
    reader.join(DEADLINE_S)
    assert received["down"] == down
    # The relay counts a chunk just after its send returns: the far end can read it first.
    deadline = time.monotonic() + DEADLINE_S
    while (relay.forwarded_bytes[("a", "b")], relay.forwarded_bytes[("b", "a")]) != (len(up), len(down)):
        assert time.monotonic() < deadline, dict(relay.forwarded_bytes)
        time.sleep(0.005)
    client.shutdown(socket.SHUT_WR)  # a half-close is passed on, and the other direction still works
    assert _receive(accepted, 1) == b""
    accepted.sendall(b"after")
    assert _receive(client, 5) == b"after"


def test_cut_stalls_bytes_and_heal_lets_them_through(relay):
    server = _listener()
    relay.set_target("b", _address(server))
    client, accepted = _pair(relay, "a", "b", server)
    client.sendall(b"before")
    assert _receive(accepted, 6) == b"before"
    relay.cut_pair("a", "b")
    client.sendall(b"during")
    accepted.sendall(b"back")
    assert _quiet(accepted) and _quiet(client)
    # A new connection while cut: accepted by the relay but never dialled onward.
    late = _dial(relay.peer_address("a", "b"))
    late.sendall(b"late")
    server.settimeout(QUIET_S)
    with pytest.raises(TimeoutError):
        server.accept()
    relay.heal_pair("a", "b")
    # Blackholed bytes were held, not lost: they flow after the heal, like retransmitted segments.
    assert _receive(accepted, 6) == b"during" and _receive(client, 4) == b"back"
    server.settimeout(DEADLINE_S)
    late_accepted, _ = server.accept()
    assert _receive(late_accepted, 4) == b"late"


def test_reject_mode_resets_connections_and_refuses_new_ones(relay):
    server = _listener()
    relay.set_target("b", _address(server))
    client, accepted = _pair(relay, "a", "b", server)
    relay.cut("b", "a", mode="reject")  # one direction in reject mode resets the whole connection
    assert _closed(client)
    with pytest.raises(OSError):
        for _ in range(50):  # the reset reaches the sender on a later write
            accepted.sendall(b"x" * 1024)
            time.sleep(0.01)
    try:
        refused = _dial(relay.peer_address("a", "b"))
    except ConnectionResetError:
        pass  # reset before connect() even returned
    else:
        assert _closed(refused)
    relay.heal("b", "a")
    client, accepted = _pair(relay, "a", "b", server)
    client.sendall(b"ok")
    assert _receive(accepted, 2) == b"ok"


def test_one_way_cut_stalls_one_direction_on_both_connections(relay):
    server_a, server_b = _listener(), _listener()
    relay.set_target("a", _address(server_a))
    relay.set_target("b", _address(server_b))
    a_dialled, b_accepted = _pair(relay, "a", "b", server_b)   # the connection a dialled
    b_dialled, a_accepted = _pair(relay, "b", "a", server_a)   # the connection b dialled
    relay.cut("a", "b")
    for sender, receiver in ((a_dialled, b_accepted), (a_accepted, b_dialled)):  # a -> b: stalled
        sender.sendall(b"lost?")
        assert _quiet(receiver)
    for sender, receiver in ((b_accepted, a_dialled), (b_dialled, a_accepted)):  # b -> a: flows
        sender.sendall(b"fine")
        assert _receive(receiver, 4) == b"fine"
    assert relay.cut_links() == {("a", "b")}
    relay.heal("a", "b")
    assert _receive(b_accepted, 5) == b"lost?" and _receive(b_dialled, 5) == b"lost?"


def test_delay_holds_bytes_at_least_the_delay_and_keeps_order(relay):
    server = _listener()
    relay.set_target("b", _address(server))
    client, accepted = _pair(relay, "a", "b", server)
    relay.delay("a", "b", 300, jitter_ms=50)
    for i in range(5):
        started = time.monotonic()
        client.sendall(b"ping%d" % i)
        assert _receive(accepted, 5) == b"ping%d" % i
        assert time.monotonic() - started >= 0.3
    # Under jitter many small writes still arrive in order.
    payload = b"".join(b"%05d" % i for i in range(400))
    for i in range(400):
        client.sendall(b"%05d" % i)
    assert _receive(accepted, len(payload)) == payload
    relay.delay("a", "b", 0)
    started = time.monotonic()
    client.sendall(b"fast")
    assert _receive(accepted, 4) == b"fast" and time.monotonic() - started < 0.3


# --- Link helpers and the fault log -------------------------------------------------------------------------

def test_helpers_replace_the_cut_set_and_log_each_change():
    log: list[tuple] = []
    with make_network("relay", ["n1", "n2", "n3"], faults_log=lambda *entry: log.append(entry)) as net:
        net.partition([["n1"], ["n2", "n3"]])
        assert net.cut_links() == {("n1", "n2"), ("n2", "n1"), ("n1", "n3"), ("n3", "n1")}
        net.bridge("n1", "n3", via="n2")
        assert net.cut_links() == {("n1", "n3"), ("n3", "n1")}
        net.isolate("n2")
        assert net.cut_links() == partition_links(net.nodes, [["n2"], ["n1", "n3"]]) == isolate_links(net.nodes, "n2")
        net.cut("n1", "n3")
        net.rejoin("n2")  # additive: the n1 -> n3 cut stays
        assert net.cut_links() == {("n1", "n3")}
        net.heal_all()
        assert net.cut_links() == set()
        steps = net.swizzle(random.Random(3))
        assert [step.op for step in steps] == ["cut"] * 3 + ["restore"] * 3
        assert sorted(step.node for step in steps[:3]) == ["n1", "n2", "n3"]
        for step in steps:
            step.apply(net)
            assert all(link[0] in step.cut_nodes or link[1] in step.cut_nodes for link in net.cut_links())
        assert steps[2].cut_nodes == {"n1", "n2", "n3"} and net.cut_links() == set()
        assert isinstance(steps[0], SwizzleStep)
    kinds = [(kind, phase, detail["op"]) for kind, phase, _, detail in log]
    assert kinds[:5] == [("partition", "start", "partition"), ("partition", "start", "bridge"),
                         ("heal", "end", "bridge"), ("partition", "start", "isolate"), ("heal", "end", "isolate")]
    assert ("heal", "end", "heal_all") in kinds
    assert log[0][3]["groups"] == [["n1"], ["n2", "n3"]] and len(log[0][3]["links"]) == 4


# --- A real cluster behind the relay ------------------------------------------------------------------------

def _stream_leader(cluster: Cluster, among: list[str], stream: str = "NET") -> str | None:
    """A node of `among` that leads `stream` now (its replica holds a `StreamLeader`)."""
    for name in among:
        replica = cluster.node(name).streams.replicas.get(stream)
        if replica is not None and replica.leader is not None:
            return name
    return None


async def _publish_until_acked(js, subject: str, payload: bytes, msg_id: str, timeout_s: float = 20.0):
    """Publish (same msg id on every try) until acked: during an election a try may time out or fail."""
    with trio.fail_after(timeout_s):
        while True:
            try:
                return await js.publish(subject, payload, timeout=2.0, msg_id=msg_id)
            except jc.ClientError:
                await trio.sleep(0.05)
            except jc.ApiError:
                await trio.sleep(0.05)


async def isolate_leader_then_heal(cluster: Cluster, net, names: list[str]) -> None:
    """The scenario on a started cluster behind `net` (relay or nft): isolate the stream leader; a new
    leader among the others, publishes through one of them acked, none through the isolated node; heal;
    the isolated node's own store catches up with every acked message."""
    await cluster.wait_for_meta_leader(timeout=20)
    await cluster.wait_ready(timeout=20)
    client = await jc.connect(cluster.node(names[0]).url)
    js = client.jetstream(timeout=5)
    await js.add_stream(name="NET", subjects=["net.>"], num_replicas=3)
    leader = await cluster.wait_until(lambda: _stream_leader(cluster, names), 20, what="a stream leader")
    expected = {}
    for i in range(10):
        ack = await _publish_until_acked(js, "net.before", b"before-%d" % i, f"b{i}")
        expected[ack.seq] = b"before-%d" % i
    await client.close()

    net.isolate(leader)
    majority = [name for name in names if name != leader]
    await cluster.wait_until(lambda: _stream_leader(cluster, majority), 20,
                             what="a new stream leader among the other two")
    # The isolated node cannot get a publish acknowledged: it has no majority. The publish is then
    # indeterminate, not refused: the node keeps carrying it to a leader for up to the router's deadline
    # (stream_publish invariant 3), so it may still be stored once the partition heals.
    isolated = await jc.connect(cluster.node(leader).url)
    with pytest.raises((jc.ClientError, jc.ApiError)):
        await isolated.jetstream(timeout=1.5).publish("net.lost", b"nope", timeout=1.5)
    await isolated.close()
    client = await jc.connect(cluster.node(majority[0]).url)
    js = client.jetstream(timeout=5)
    for i in range(10):
        ack = await _publish_until_acked(js, "net.during", b"during-%d" % i, f"d{i}")
        expected[ack.seq] = b"during-%d" % i
    await client.close()
    assert sorted(expected) == list(range(1, 21))

    net.heal_all()

    def caught_up() -> bool:
        replica = cluster.node(leader).streams.replicas.get("NET")
        if replica is None or replica.store is None or replica.store.state().last_seq < 20:
            return False
        return all(replica.store.load(seq).payload == payload for seq, payload in expected.items())
    await cluster.wait_until(caught_up, 30, what="the healed node's store holding every message")
    store = cluster.node(leader).streams.replicas["NET"].store
    state = store.state()
    # Every acked message, and nothing else but (at most) the indeterminate one, stored after them.
    extra = [store.load(seq) for seq in range(21, state.last_seq + 1)]
    assert state.msgs == 20 + len(extra) and len(extra) <= 1, state
    assert all((msg.subject, msg.payload) == ("net.lost", b"nope") for msg in extra), extra


async def test_isolated_stream_leader_is_replaced_then_catches_up_after_heal(tmp_path):
    names = ["n1", "n2", "n3"]
    with Relay(names) as relay:
        async with trio.open_nursery() as nursery:
            cluster = Cluster(nursery, relayed_configs(tmp_path, relay, names))
            try:
                for name in names:
                    await cluster.start_node(name)
                await isolate_leader_then_heal(cluster, relay, names)
            finally:
                await cluster.stop_all()
                nursery.cancel_scope.cancel()


# --- nft in a private network namespace ---------------------------------------------------------------------

NFT_UNAVAILABLE = netns.unavailable_reason()

# Runs inside the namespace: listeners on each node's address, connects from each node's address (bound,
# as the nodes bind their outgoing sockets), the outcome of every directed connect after each change.
_NFT_CHILD = textwrap.dedent("""
    import json, socket, subprocess
    from jsraft.testing.chaos.network import make_network
    from jsraft.testing.chaos.netns import default_addresses, in_private_netns

    addresses = default_addresses(["n1", "n2", "n3"])
    listeners = {}
    for name, host in addresses.items():
        listeners[name] = socket.socket()
        listeners[name].bind((host, 0))
        listeners[name].listen(64)

    def outcome(src, dst):
        sock = socket.socket()
        sock.bind((addresses[src], 0))
        sock.settimeout(0.5)
        try:
            sock.connect(listeners[dst].getsockname())
            return "ok"
        except TimeoutError:
            return "timeout"
        except ConnectionRefusedError:
            return "refused"
        finally:
            sock.close()

    def matrix():
        return {f"{a}>{b}": outcome(a, b) for a in addresses for b in addresses if a != b}

    out = {"private": in_private_netns(), "log": []}
    log = lambda kind, phase, nodes, detail: out["log"].append([kind, phase, detail["op"]])
    with make_network("nft", list(addresses), faults_log=log) as net:
        out["open"] = matrix()
        net.cut("n1", "n2")
        out["cut"] = matrix()
        out["rules"] = net.ruleset()
        net.heal("n1", "n2")
        out["healed"] = matrix()
        net.isolate("n3", mode="reject")
        out["isolated"] = matrix()
        net.bridge("n1", "n3", via="n2")
        out["bridge"] = matrix()
        net.heal_all()
        out["end"] = matrix()
    out["tables_after"] = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    print(json.dumps(out))
""")


def _matrix(blocked: dict[str, str]) -> dict[str, str]:
    every = {f"{a}>{b}": "ok" for a in ("n1", "n2", "n3") for b in ("n1", "n2", "n3") if a != b}
    return {**every, **blocked}


@pytest.mark.skipif(NFT_UNAVAILABLE is not None, reason=f"nft namespace mode unavailable: {NFT_UNAVAILABLE}")
def test_nft_partitioner_cuts_and_heals_inside_a_private_namespace(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(_NFT_CHILD)
    result = netns.run_in_netns([sys.executable, str(script)], timeout_s=60, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["private"] is True
    assert out["open"] == out["healed"] == out["end"] == _matrix({})
    # One-way: n1's packets to n2 are dropped. n2 -> n1 also fails to connect: n1's SYN-ACK is lost.
    assert out["cut"] == _matrix({"n1>n2": "timeout", "n2>n1": "timeout"})
    assert "ip saddr 127.0.0.11 ip daddr 127.0.0.12 drop" in out["rules"]
    assert out["isolated"] == _matrix({"n1>n3": "refused", "n2>n3": "refused", "n3>n1": "refused",
                                       "n3>n2": "refused"})
    assert out["bridge"] == _matrix({"n1>n3": "timeout", "n3>n1": "timeout"})
    assert netns.NFT_TABLE not in out["tables_after"]  # close() removed the table
    assert ["partition", "start", "cut"] in out["log"] and ["heal", "end", "heal_all"] in out["log"]


def test_nft_partitioner_refuses_the_host_namespace():
    if netns.in_private_netns():
        pytest.skip("this test process already runs in a private namespace")
    with pytest.raises(Exception, match="private network namespace"):
        netns.NftPartitioner(netns.default_addresses(["n1", "n2"]))


# Runs inside the namespace: the same scenario as the relay test, nodes on 127.0.0.11-13 with their outgoing
# sockets bound to their own address (a node does that when its test hooks are on; on a node without that
# option, this test-only child sets `transport.bind_host` itself once the node is built).
_NFT_CLUSTER_CHILD = textwrap.dedent("""
    import sys
    import trio
    sys.path.insert(0, sys.argv[2])
    from jsraft.cli.local_cluster import free_ports
    from jsraft.server import NodeConfig
    from jsraft.server.node import Node
    from jsraft.testing.chaos.network import make_network
    from jsraft.testing.chaos.netns import default_addresses
    from jsraft.testing.cluster import Cluster, relayed_configs
    from test_chaos_net import isolate_leader_then_heal

    if not hasattr(Node, "_outgoing_host"):
        prepare = Node.prepare

        async def bound_prepare(self):
            await prepare(self)
            self.transport.bind_host = self.config.cluster_host

        Node.prepare = bound_prepare

    async def main():
        names = ["n1", "n2", "n3"]
        hosts = default_addresses(names)
        ports = dict(zip(names, free_ports(3)))
        configs = {name: NodeConfig(
            name=name, store_dir=f"{sys.argv[1]}/{name}", cluster_name="chaos", cluster_host=hosts[name],
            cluster_port=ports[name], client_port=0, tick_ms=20, election_ticks=10, test_mode=True,
            test_hooks=True, peers={p: f"{hosts[p]}:{ports[p]}" for p in names if p != name}) for name in names}
        with make_network("nft", names, addresses=hosts) as net:
            async with trio.open_nursery() as nursery:
                cluster = Cluster(nursery, configs)
                try:
                    for name in names:
                        await cluster.start_node(name)
                    await isolate_leader_then_heal(cluster, net, names)
                finally:
                    await cluster.stop_all()
                    nursery.cancel_scope.cancel()
        print("scenario passed")

    trio.run(main)
""")


@pytest.mark.skipif(NFT_UNAVAILABLE is not None, reason=f"nft namespace mode unavailable: {NFT_UNAVAILABLE}")
def test_nft_isolated_stream_leader_is_replaced_then_catches_up_after_heal(tmp_path):
    script = tmp_path / "cluster_child.py"
    script.write_text(_NFT_CLUSTER_CHILD)
    result = netns.run_in_netns([sys.executable, str(script), str(tmp_path), os.path.dirname(__file__)],
                                timeout_s=90, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "scenario passed" in result.stdout
