"""A server taken out with `$JS.API.SERVER.REMOVE` comes back (issue #7, CHAOS.md S11): with its old store
directory it stays out, is told so and disturbs nobody; wiped (a new storage UUID) it is readmitted —
learner, voter, peer — and streams are placed on it again, with no acked message lost.

Method: a `jsraft.testing.cluster.Cluster` (real nodes, TCP, files) in the test's trio loop; publishes and
admin requests are nats-py code under asyncio in a worker thread (`nats_kit.in_asyncio`). Membership is
read from each node's meta Raft status and meta state, "the replicas agree" from the meta state digests,
messages from the replicas' own stores. Waits are polls with deadlines; "no term churn" is checked over
a fixed window of many election timeouts while the stale server runs (its pre-votes would show there).
The rule itself (`meta_members.plan`) is also checked as a pure function.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from typing import Any

import trio

from jsraft.raft.membership import ConfChange, ConfChangeType
from jsraft.server.groups.meta_members import Notify, Readmit, Seen, plan
from jsraft.server.groups.meta_service import META_GROUP
from jsraft.server.ops.monitor import Monitor
from jsraft.testing.cluster import Cluster
from nats_kit import in_asyncio, nats_connect, until
from test_consumers_nats import live_seqs
from test_stream_peer_remove import assigned, meta_leader, meta_voters, publish_once

TIMEOUT_S = 150
TICK_MS = 20
ELECTION_TICKS = 25
STALE_WINDOW_S = 4.0  # 8 election timeouts of the stale server


def meta_term(cluster: Cluster, name: str) -> int:
    return cluster.node(name).runtime.status(META_GROUP).raft.current_term


def learners(cluster: Cluster, name: str) -> tuple[str, ...]:
    return tuple(cluster.node(name).runtime.status(META_GROUP).raft.learners)


def digests_agree(cluster: Cluster, names: list[str]) -> bool:
    return len({cluster.meta(name).digest() for name in names}) == 1


def all_seen(cluster: Cluster) -> bool:
    """Every node's meta state holds every member's storage UUID (rule 1), as the nodes' own identity."""
    expected = {node.name: str(node.identity.storage_uuid) for node in cluster.running()}
    return all(cluster.meta(node.name).storage_uuids() == expected for node in cluster.running())


async def _request(nc: Any, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = await nc.request(subject, json.dumps(body).encode(), timeout=10)
    return json.loads(reply.data)


def _uuid(cluster: Cluster, name: str) -> str:
    return str(cluster.node(name).identity.storage_uuid)


async def readmitted(cluster: Cluster, gone: str, old_uuid: str) -> None:
    """Wait until `gone` is back as a meta voter and peer on every node, with a new UUID, all agreeing."""
    names = cluster.names
    new_uuid = trio.from_thread.run_sync(_uuid, cluster, gone)
    assert new_uuid != old_uuid
    for name in names:
        await until(lambda name=name: meta_voters(cluster, name) == tuple(names), f"{name}: meta voters all three",
                    60)
        await until(lambda name=name: gone in cluster.meta(name).peers(), f"{name}: {gone} a meta peer again", 30)
    await until(lambda: digests_agree(cluster, names), "the three meta states agree", 30)
    for name in names:
        state = trio.from_thread.run_sync(lambda name=name: cluster.meta(name))
        assert state.storage_uuids()[gone] == new_uuid and gone not in state.removed_servers(), name
        assert learners(cluster, name) == ()


async def remove_then_return(cluster: Cluster, url: str) -> None:
    nc = await nats_connect(url)
    js = nc.jetstream()
    gone, rest = "n3", ["n1", "n2"]
    try:
        await until(lambda: all_seen(cluster), "every member's storage UUID in the meta state")
        await js.add_stream(name="THREE", subjects=["three.>"], num_replicas=3)
        acked = [(await js.publish(f"three.{i % 4}", b"t%d" % i)).seq for i in range(100)]
        old_uuid = trio.from_thread.run_sync(_uuid, cluster, gone)
        trio.from_thread.run(cluster.kill, gone)
        removed = await _request(nc, "$JS.API.SERVER.REMOVE", {"peer": gone})
        assert removed.get("success") is True, removed
        for name in rest:
            await until(lambda name=name: cluster.meta(name).removed_servers() == {gone: old_uuid},
                        f"{name}: {gone} removed with its storage UUID")
        await until(lambda: assigned(cluster, "THREE") == tuple(rest), "THREE re-placed on n1, n2")

        # Back with its old disk: told it is out, stays out, and the others' terms do not move.
        terms = {name: trio.from_thread.run_sync(meta_term, cluster, name) for name in rest}
        trio.from_thread.run(cluster.restart, gone)
        await until(lambda: cluster.node(gone).meta_service.members.notice is not None, f"{gone} told it is out", 30)
        notice = trio.from_thread.run_sync(lambda: cluster.node(gone).meta_service.members.notice)
        assert notice.storage_uuid == old_uuid
        monitor = Monitor(cluster.node(gone).monitor_parts)
        monitor.mark_running()
        status, body = monitor.healthz()
        assert status == 503 and "removed" in body["error"], body
        for i in range(int(STALE_WINDOW_S / 0.2)):
            acked.append(await publish_once(js, "three.s", b"stale %d" % i, f"stale-{i}"))
            await asyncio.sleep(0.2)
        for name in rest:
            assert trio.from_thread.run_sync(meta_term, cluster, name) == terms[name], f"{name}'s meta term moved"
            assert trio.from_thread.run_sync(meta_voters, cluster, name) == tuple(rest)
            assert trio.from_thread.run_sync(learners, cluster, name) == ()
            assert gone in trio.from_thread.run_sync(lambda name=name: cluster.meta(name).removed_servers())

        # Wiped: a new storage UUID, readmitted; a new R3 stream uses it; nothing acked is lost.
        trio.from_thread.run(cluster.kill, gone)
        await asyncio.to_thread(shutil.rmtree, cluster.configs[gone].store_dir)
        trio.from_thread.run(cluster.restart, gone)
        await readmitted(cluster, gone, old_uuid)
        await js.add_stream(name="AGAIN", subjects=["again.>"], num_replicas=3)
        assert trio.from_thread.run_sync(assigned, cluster, "AGAIN") == tuple(cluster.names)
        again = [await publish_once(js, "again.x", b"a%d" % i, f"again-{i}") for i in range(20)]
        await until(lambda: live_seqs(cluster.replica_store(gone, "AGAIN")) == again, f"AGAIN stored on {gone}", 30)
        acked.append(await publish_once(js, "three.x", b"after", "after-readmit"))
        for name in rest:
            await until(lambda name=name: live_seqs(cluster.replica_store(name, "THREE")) == acked,
                        f"every acked THREE message on {name}", 30)
        assert (await js.stream_info("THREE")).state.messages == len(acked)
    finally:
        await nc.close()


async def test_removed_server_stays_out_with_its_old_disk_and_is_readmitted_wiped(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=TICK_MS, election_ticks=ELECTION_TICKS) as cluster:
            await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            await in_asyncio(remove_then_return, cluster, cluster.node("n1").url, timeout_s=TIMEOUT_S)


async def remove_the_leader(cluster: Cluster) -> None:
    await until(lambda: all_seen(cluster), "every member's storage UUID in the meta state")
    leader = trio.from_thread.run_sync(meta_leader, cluster)
    assert leader is not None
    rest = [name for name in cluster.names if name != leader]
    nc = await nats_connect(trio.from_thread.run_sync(lambda: cluster.node(rest[0]).url))
    js = nc.jetstream()
    try:
        await js.add_stream(name="THREE", subjects=["three.>"], num_replicas=3)
        acked = [(await js.publish(f"three.{i % 4}", b"t%d" % i)).seq for i in range(50)]
        old_uuid = trio.from_thread.run_sync(_uuid, cluster, leader)
        # The leader hands over, the new leader removes it; still running, it is then told it is out.
        gone = await _request(nc, "$JS.API.SERVER.REMOVE", {"peer": leader})
        assert gone.get("success") is True, gone
        for name in rest:
            await until(lambda name=name: meta_voters(cluster, name) == tuple(rest), f"{name}: meta voters {rest}")
        await until(lambda: cluster.node(leader).meta_service.members.notice is not None, f"{leader} told it is out",
                    30)
        trio.from_thread.run(cluster.kill, leader)
        await asyncio.to_thread(shutil.rmtree, cluster.configs[leader].store_dir)
        trio.from_thread.run(cluster.restart, leader)
        await readmitted(cluster, leader, old_uuid)
        acked.append(await publish_once(js, "three.x", b"after", "after-readmit"))
        for name in rest:
            await until(lambda name=name: live_seqs(cluster.replica_store(name, "THREE")) == acked,
                        f"every acked THREE message on {name}", 30)
    finally:
        await nc.close()


async def test_removed_meta_leader_wiped_is_readmitted(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=TICK_MS, election_ticks=ELECTION_TICKS) as cluster:
            await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            await in_asyncio(remove_the_leader, cluster, timeout_s=TIMEOUT_S)


# --- The rule as a pure function -----------------------------------------------------------------------

_BASE = dict(voters=("n1", "n2"), learners=(), peers={"n1": None, "n2": None},
             storage_uuids={"n1": "u1", "n2": "u2"})


def test_plan_keeps_the_removed_disk_out_and_readmits_a_wiped_one_step_by_step():
    online = {"n1": "u1", "n2": "u2", "n3": "old"}
    assert plan(online=online, removed={"n3": "old"}, **_BASE) == (None, (Notify("n3", "old"),))
    wiped = {**online, "n3": "new"}
    assert plan(online=wiped, removed={"n3": "old"}, **_BASE) == (Readmit("n3", "new"), ())
    readmit_applied = {**_BASE, "storage_uuids": {"n1": "u1", "n2": "u2", "n3": "new"}}
    assert plan(online=wiped, removed={}, **readmit_applied) == (
        ConfChange(type=ConfChangeType.ADD_LEARNER, node_id="n3"), ())
    assert plan(online=wiped, removed={}, **{**readmit_applied, "learners": ("n3",)}) == (
        ConfChange(type=ConfChangeType.PROMOTE_LEARNER, node_id="n3"), ())
    promoted = {**readmit_applied, "voters": ("n1", "n2", "n3")}
    assert plan(online=wiped, removed={}, **promoted) == (None, ())  # PEER_ADD: MetaService registers voters


def test_plan_records_uuids_and_leaves_a_half_done_remove_alone():
    assert plan(online={"n1": "u1", "n2": "u9"}, removed={}, **_BASE) == (Seen("n2", "u9"), ())
    # n3 out of the configuration but still a peer: SERVER.REMOVE is half done; nothing is proposed.
    half = {**_BASE, "peers": {"n1": None, "n2": None, "n3": None}, "storage_uuids": {"n1": "u1", "n2": "u2"}}
    assert plan(online={"n1": "u1", "n2": "u2", "n3": "u3"}, removed={}, **half) == (None, ())
    # Removed before its disk was ever seen: any disk is readmitted (nothing proves it is the old one).
    assert plan(online={"n1": "u1", "n2": "u2", "n3": "u3"}, removed={"n3": ""}, **_BASE) == (Readmit("n3", "u3"), ())
