"""`/metrics` on the HTTP monitor: Prometheus text from a per-node registry, parsed with
prometheus_client's own parser and checked against the node's state.

Method: real nodes (`jsraft.open_node`, real files, loopback ports 0) with a `Monitor` each, a stream
written through `jsraft.client` over real TCP, and scrapes over raw HTTP. Values that only move forward
while the test reads them (Raft indexes: audits keep proposing) are checked between a reading taken
before the scrape and one taken after; values that cannot move meanwhile are checked for equality.
Two nodes in one process must each export only themselves, and nothing may land in the process-wide
default registry.
"""

from __future__ import annotations

import prometheus_client
import trio
from prometheus_client.parser import text_string_to_metric_families

import jsraft
import jsraft.client as jc
from jsraft.server import NodeConfig
from jsraft.server.groups.meta_service import META_GROUP
from jsraft.server.ops.monitor import Monitor


def config(tmp_path, name: str = "m1") -> NodeConfig:
    return NodeConfig(name=name, store_dir=str(tmp_path / name), cluster_name=f"c-{name}", cluster_port=0,
                      client_port=0, tick_ms=20, election_ticks=5, test_mode=True)


async def scrape(address: tuple[str, int]) -> tuple[str, dict[tuple[str, tuple], float]]:
    """`(content type, {(sample name, sorted labels): value})` of one GET /metrics."""
    stream = await trio.open_tcp_stream(*address)
    async with stream:
        await stream.send_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        answer = bytearray()
        with trio.fail_after(10):
            while chunk := await stream.receive_some(65536):
                answer += chunk
    head, _, body = bytes(answer).partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.0 200 OK", lines[0]
    headers = dict(line.split(": ", 1) for line in lines[1:])
    assert int(headers["Content-Length"]) == len(body)
    samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return headers["Content-Type"], samples


async def test_metrics_follow_the_node(tmp_path):
    async with jsraft.open_node(config(tmp_path)) as node:
        monitor = Monitor(node.monitor_parts, "127.0.0.1", 0)
        async with trio.open_nursery() as nursery:
            address = await nursery.start(monitor.run)
            monitor.mark_running()
            async with await jc.connect(node.url) as client, await jc.connect(node.url) as watcher:
                await watcher.subscribe("orders.>")
                js = client.jetstream()
                await js.add_stream(name="ORDERS", subjects=["orders.>"])
                for i in range(30):
                    await js.publish(f"orders.{i % 4}", b"x" * i)
                await js.delete_msg("ORDERS", 2)
                await watcher.flush()
                replica = node.streams.replicas["ORDERS"]
                before = {group: node.runtime.status(group).raft for group in (META_GROUP, replica.group)}
                content_type, samples = await scrape(address)
                after = {group: node.runtime.status(group).raft for group in (META_GROUP, replica.group)}
                clients_in, clients_out = node.clients.stats.in_msgs, node.clients.stats.out_msgs
                jsapi_total = node.jsapi.total

            assert content_type == prometheus_client.CONTENT_TYPE_LATEST
            state = replica.store.state()
            stream = (("stream", "ORDERS"),)
            assert samples[("jsraft_stream_messages", stream)] == state.msgs == 29
            assert samples[("jsraft_stream_last_seq", stream)] == state.last_seq == 30
            assert samples[("jsraft_stream_first_seq", stream)] == state.first_seq == 1
            assert samples[("jsraft_stream_bytes", stream)] == state.bytes
            assert samples[("jsraft_stream_deleted", stream)] == state.num_deleted == 1
            assert samples[("jsraft_stream_health", (("health", "current"), ("stream", "ORDERS")))] == 1
            assert samples[("jsraft_stream_health", (("health", "drifted"), ("stream", "ORDERS")))] == 0
            assert samples[("jsraft_stream_leader", stream)] == 1
            assert samples[("jsraft_stream_faults", stream)] == 0

            for group in (META_GROUP, replica.group):
                labels = (("group", group),)
                assert samples[("jsraft_raft_role", (("group", group), ("role", "leader")))] == 1
                assert samples[("jsraft_raft_role", (("group", group), ("role", "follower")))] == 0
                assert samples[("jsraft_raft_term", labels)] == before[group].current_term == after[group].current_term
                for name in ("commit_index", "applied_index", "last_index"):
                    assert getattr(before[group], name) <= samples[(f"jsraft_raft_{name}", labels)] \
                        <= getattr(after[group], name)
                assert samples[("jsraft_raft_voters", labels)] == 1
                assert samples[("jsraft_raft_repairing", labels)] == 0
            assert samples[("jsraft_raft_applied_index", (("group", replica.group),))] >= 30  # 30 publishes, 1 delete

            assert samples[("jsraft_client_connections_open", ())] == 2
            assert samples[("jsraft_client_connections_total", ())] == 2
            assert samples[("jsraft_client_subscriptions", ())] >= 2  # the watcher's and the client's inbox
            assert 31 <= samples[("jsraft_client_messages_in_total", ())] <= clients_in  # publishes and API requests
            assert 30 <= samples[("jsraft_client_messages_out_total", ())] <= clients_out  # the watcher's copies
            assert 2 <= samples[("jsraft_jsapi_requests_total", ())] <= jsapi_total  # create, delete_msg
            assert samples[("jsraft_node_ready", ())] == 1 and samples[("jsraft_node_running", ())] == 1
            assert samples[("jsraft_meta_streams", ())] == 1
            assert samples[("jsraft_node_info", (("cluster", "c-m1"), ("server_name", "m1"),
                                                 ("version", jsraft.__version__)))] == 1

            await until_gone(node)
            _, later = await scrape(address)
            assert later[("jsraft_client_connections_open", ())] == 0
            assert later[("jsraft_client_connections_total", ())] == 2  # a counter never goes back
            nursery.cancel_scope.cancel()


async def until_gone(node) -> None:
    with trio.fail_after(10):
        while node.clients.clients:
            await trio.sleep(0.005)


async def test_each_node_has_its_own_registry(tmp_path):
    async with jsraft.open_node(config(tmp_path, "a")) as node_a, jsraft.open_node(config(tmp_path, "b")) as node_b:
        await node_a.jetstream().add_stream(name="ONLY_A", subjects=["a.>"])
        monitors = [Monitor(node.monitor_parts, "127.0.0.1", 0) for node in (node_a, node_b)]
        async with trio.open_nursery() as nursery:
            addresses = [await nursery.start(monitor.run) for monitor in monitors]
            (_, samples_a), (_, samples_b) = [await scrape(address) for address in addresses]
            nursery.cancel_scope.cancel()
    names_a = {dict(labels).get("server_name") for name, labels in samples_a if name == "jsraft_node_info"}
    names_b = {dict(labels).get("server_name") for name, labels in samples_b if name == "jsraft_node_info"}
    assert (names_a, names_b) == ({"a"}, {"b"})
    assert ("jsraft_stream_messages", (("stream", "ONLY_A"),)) in samples_a
    assert not any(dict(labels).get("stream") == "ONLY_A" for _, labels in samples_b)
    assert samples_a[("jsraft_node_running", ())] == 0  # nobody called mark_running
    default = prometheus_client.generate_latest(prometheus_client.REGISTRY).decode()
    assert "jsraft_" not in default
