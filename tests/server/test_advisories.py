"""Advisories published on `$JS.EVENT.ADVISORY.>` by a 3-node cluster, as a subscriber sees them:
nats-server's stream and consumer lifecycle and leader-election advisories (its subjects and `type`s),
and jsraft's own — an asset this node cannot run (asset_offline) and a drift repaired
(stream_drift_repaired) — under `io.jsraft.advisory.v1.*` on `$JS.EVENT.ADVISORY.JSRAFT.>`.

Method: a real 3-node `Cluster` (real TCP, real files); a `jsraft.client` connection subscribes to
`$JS.EVENT.ADVISORY.>` on one node and the test waits (polling, with a deadline) until every node routes
that interest before acting. Actions are driven through the JetStream API of another node: a create, an
update, a leader stepdown, a consumer create and delete, a stream delete; then one node runs at API level
0 and a paused consumer (level 1) is created through a stream leader that can run it (one at level 0
refuses it: the leadership is then moved), which the level-0 node must announce as an offline asset; then a
follower's copy of a message is changed on disk while it is stopped, and its repair after the restart is
announced. Every advisory the subscriber got is collected until the expected ones arrived (or the deadline).
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import trio

import jsraft.client
from jsraft.replica.stream_events import ACTION_TYPE, LEADER_ELECTED_TYPE
from jsraft.server.groups.versioning import OFFLINE_TYPE
from jsraft.stream import DRIFT_REPAIRED_ADVISORY
from drift_kit import change_body, converged, setup_stream, start, with_store
from nats_kit import interest

ALL = "$JS.EVENT.ADVISORY.>"
COUNT = 600


async def _collect(sub: Any, seen: list[tuple[str, dict[str, Any]]], want: Any, timeout_s: float = 20.0) -> None:
    """Read advisories into `seen` until `want(seen)` holds; fail at the deadline."""
    with trio.move_on_after(timeout_s):
        while not want(seen):
            msg = await sub.next_msg(timeout=timeout_s)
            seen.append((msg.subject, json.loads(msg.data)))
        return
    raise AssertionError(f"advisories not all seen in {timeout_s}s: {[(s, b.get('leader')) for s, b in seen]}")


def _has(seen: list, subject: str, event_type: str, **fields: Any) -> bool:
    return any(s == subject and body["type"] == event_type and all(body.get(k) == v for k, v in fields.items())
               for s, body in seen)


async def _interest_everywhere(cluster: Any, subject: str, subscriber_node: str) -> None:
    """Every node knows where `subject` is wanted: locally on the subscriber's node, by route elsewhere."""
    def known() -> bool:
        return all(interest(node, subject) if node.name == subscriber_node
                   else subscriber_node in node.routes.interested_peers(subject) for node in cluster.running())
    await cluster.wait_until(known, 10, what=f"interest in {subject} on every node")


async def subscribed_on_n2(cluster: Any, probe: str) -> tuple[Any, Any]:
    """Once the cluster is ready: a client on n2 subscribed to every advisory, its interest (checked with
    `probe`, a subject under it) known to every node."""
    await cluster.wait_for_meta_leader()
    await cluster.wait_ready()
    client = await jsraft.client.connect(cluster.node("n2").url)
    sub = await client.subscribe(ALL)
    await client.flush()
    await _interest_everywhere(cluster, probe, "n2")
    return client, sub


async def test_lifecycle_leader_offline_and_drift_advisories(tmp_path):
    seen: list[tuple[str, dict[str, Any]]] = []
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path) as cluster:
            client, sub = await subscribed_on_n2(cluster, "$JS.EVENT.ADVISORY.STREAM.CREATED.A")
            admin = await jsraft.client.connect(cluster.node("n3").url)  # the API of another node
            js = admin.jetstream(timeout=10)
            await js.add_stream(name="A", subjects=["a.>"], num_replicas=3)
            await _collect(sub, seen, lambda s: _has(s, "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.A",
                                                      LEADER_ELECTED_TYPE, stream="A"))
            first = next(b["leader"] for s, b in seen if b["type"] == LEADER_ELECTED_TYPE)
            await js.update_stream(name="A", subjects=["a.>"], num_replicas=3, description="updated")

            def moved(s: list) -> bool:
                return any(b.get("leader") not in (None, first) for _, b in s if b["type"] == LEADER_ELECTED_TYPE)
            # A stepdown whose new leader loses the group again before it is ready to lead (seen once in CI:
            # leadership went back to the first leader) advises nothing for that short term: ask again,
            # at most three times, until a leader other than the first is announced.
            for _ in range(3):
                await client.request("$JS.API.STREAM.LEADER.STEPDOWN.A", b"", timeout=10)
                try:
                    await _collect(sub, seen, moved, timeout_s=10.0)
                    break
                except Exception:  # noqa: BLE001 — not announced in time (either way _collect reports it)
                    continue
            await js.add_consumer("A", durable_name="D", ack_policy="explicit")
            await js.delete_consumer("A", "D")
            await js.delete_stream("A")
            await _collect(sub, seen, lambda s: _has(s, "$JS.EVENT.ADVISORY.STREAM.DELETED.A", ACTION_TYPE)
                           and moved(s))

            # n1 at API level 0: a paused consumer (level 1) is an asset it cannot run.
            await cluster.stop("n1")
            cluster.configs["n1"] = attrs.evolve(cluster.configs["n1"], api_level=0)
            await cluster.start_node("n1")
            await cluster.wait_for_meta_leader(timeout=20)
            await cluster.wait_ready(20)
            await _interest_everywhere(cluster, "$JS.EVENT.ADVISORY.JSRAFT.ASSET_OFFLINE.P.C", "n2")
            await js.add_stream(name="P", subjects=["p.>"], num_replicas=3)
            paused = json.dumps({"stream_name": "P", "config": {"durable_name": "C",
                                                                 "pause_until": "2999-01-01T00:00:00Z"}}).encode()
            for _ in range(5):  # a level-0 stream leader (n1) refuses a level-1 consumer: move it and ask again
                answer = json.loads((await client.request("$JS.API.CONSUMER.CREATE.P.C", paused, timeout=10)).data)
                if answer.get("error", {}).get("err_code") != 10185:
                    break
                await client.request("$JS.API.STREAM.LEADER.STEPDOWN.P", b"", timeout=10)
            assert "error" not in answer, answer
            await _collect(sub, seen, lambda s: _has(s, "$JS.EVENT.ADVISORY.JSRAFT.ASSET_OFFLINE.P.C", OFFLINE_TYPE,
                                                      server="n1", stream="P", consumer="C"))
            await client.close()
            await admin.close()
    assert _has(seen, "$JS.EVENT.ADVISORY.STREAM.CREATED.A", ACTION_TYPE, stream="A", action="create")
    assert _has(seen, "$JS.EVENT.ADVISORY.STREAM.UPDATED.A", ACTION_TYPE, stream="A", action="modify")
    assert _has(seen, "$JS.EVENT.ADVISORY.STREAM.DELETED.A", ACTION_TYPE, stream="A", action="delete")
    assert _has(seen, "$JS.EVENT.ADVISORY.CONSUMER.CREATED.A.D", "io.nats.jetstream.advisory.v1.consumer_action",
                action="create")
    assert _has(seen, "$JS.EVENT.ADVISORY.CONSUMER.DELETED.A.D", "io.nats.jetstream.advisory.v1.consumer_action",
                action="delete")
    elected = [body for subject, body in seen if body["type"] == LEADER_ELECTED_TYPE]
    assert len({body["leader"] for body in elected}) >= 2  # the stepdown moved it
    assert all(len(body["replicas"]) == 2 and body["leader"] not in [r["name"] for r in body["replicas"]]
               for body in elected)
    offline = [body for subject, body in seen if body["type"] == OFFLINE_TYPE]
    assert offline[0]["reason"] == "unsupported - required API level: 1, current API level: 0"


async def test_a_drift_repair_is_announced(tmp_path):
    seen: list[tuple[str, dict[str, Any]]] = []
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path) as cluster:
            js, acked, leader, follower = await setup_stream(cluster, COUNT)
            client = await jsraft.client.connect(cluster.node(leader).url)
            sub = await client.subscribe("$JS.EVENT.ADVISORY.JSRAFT.>")
            await client.flush()
            await cluster.stop(follower)
            with_store(cluster, follower, change_body(COUNT - 10, COUNT))
            await cluster.start_node(follower)  # its recovery's audit finds the changed message
            await cluster.wait_until(lambda: converged(cluster, max(acked.values())), 30, what="repaired")
            await _collect(sub, seen, lambda s: any(b["type"] == DRIFT_REPAIRED_ADVISORY for _, b in s))
            await client.close()
    repaired = next(body for subject, body in seen if body["type"] == DRIFT_REPAIRED_ADVISORY)
    assert DRIFT_REPAIRED_ADVISORY == "io.jsraft.advisory.v1.stream_drift_repaired"
    assert repaired["replica"] == follower and repaired["stream"] == "S"
    assert ("$JS.EVENT.ADVISORY.JSRAFT.STREAM_DRIFT_REPAIRED.S", repaired) in seen
