"""Repairs that cannot go on yet: their status in stream info, retries with backoff, a leader change.

Method: a real 3-node `Cluster`. A follower loses its oldest block file while stopped; when it restarts,
its recovery plan needs that range from the stream leader. The test holds the leader's `stream.catchup`
answers back (the handler's `serve_catchup_request` is wrapped: it refuses while a gate is closed), so the
repair is visibly stuck: the follower must show as `repairing` in stream info, naming the missing range,
and keep retrying. Then the leader is stopped: another replica leads (the repairing one must not — it
hands the leadership on if elected), the follower retries against it, the gate opens, and the repair ends
with the follower current and identical to the others — and, once the stopped node is back, all three.
Likewise a follower whose changed message only an audit can see must show as `drifted` (and as having
disagreed at the last audit) while the leader holds its snapshot back (`leader_snapshot` wrapped), then
resync and agree at the next audit. Every wait polls with a deadline.
"""

from __future__ import annotations

import os

import trio
from drift_kit import (
    check_identical, converged, drift_of, msgs_dir, replica, repaired_of, setup_stream, start, stream_leader,
    with_store,
)

from jsraft.disk import OsDisk
from jsraft.server.groups import handlers
from jsraft.store.blocks import block_name
from jsraft.store.filestore import FileStore
from jsraft.stream import CatchupRefusal, StreamNotHealthy, encode_refusal


async def test_a_stuck_repair_is_visible_retries_and_survives_a_leader_change(tmp_path, monkeypatch):
    gate = {"open": False, "refused": 0, "served_by": set()}
    serve = handlers.serve_catchup_request

    async def gated(replica_, blob):
        if not gate["open"]:
            gate["refused"] += 1
            return encode_refusal(CatchupRefusal(reason="held back by the test"))
        gate["served_by"].add(replica_.node_id)
        return await serve(replica_, blob)

    monkeypatch.setattr(handlers, "serve_catchup_request", gated)
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path) as cluster:
            _, acked, leader, follower = await setup_stream(cluster, 1500)
            third = next(name for name in cluster.names if name not in (leader, follower))
            await cluster.stop(follower)
            store = FileStore.open(OsDisk(msgs_dir(cluster, follower), read_only=True), read_only=True)
            first_block = store.blocks[0]
            lost = (first_block.first_seq, first_block.last_seq)
            store.close()
            os.remove(os.path.join(msgs_dir(cluster, follower), block_name(first_block.number)))
            await cluster.start_node(follower)

            async def shows_repairing(via: str) -> dict | None:
                info = await cluster.node(via).jetstream().stream_info("S")
                seen = info.cluster["replicas"][follower]
                return seen if seen.get("status") == "repairing" else None

            seen = await cluster.wait_until(lambda: shows_repairing(leader), 20, what="status repairing")
            assert seen["current"] is False and seen["holding"] is True
            assert {"kind": "missing_head", "first_seq": lost[0], "last_seq": lost[1], "detail": ""} in \
                seen["repair"]["episode_findings"]
            await cluster.wait_until(lambda: gate["refused"] >= 3, 20, what="retries after refusals")
            assert "refused" in replica(cluster, follower).repair.last_error
            assert drift_of(cluster, follower) and not repaired_of(cluster, follower)

            await cluster.stop(leader)
            await cluster.wait_until(lambda: stream_leader(cluster) == third, 20, what=f"{third} leads")
            refused = gate["refused"]
            await cluster.wait_until(lambda: gate["refused"] > refused, 20, what="retries at the new leader")
            assert await shows_repairing(third)
            gate["open"] = True
            last = max(acked.values())

            def two_agree() -> bool:
                stores = [replica(cluster, name).store for name in (follower, third)]
                return (all(str(replica(cluster, name).machine.health) == "current" for name in (follower, third))
                        and len({s.state().agreement_key() for s in stores}) == 1
                        and stores[0].state().last_seq == last)

            await cluster.wait_until(two_agree, 20, what="the follower repaired from the new leader")
            assert gate["served_by"] == {third}
            (repaired,) = repaired_of(cluster, follower)
            assert repaired["fetched_msgs"] == lost[1] - lost[0] + 1

            await cluster.start_node(leader)
            await cluster.wait_until(lambda: converged(cluster, last), 30, what="all three converged")
            check_identical(cluster, acked)
            info = await cluster.node(third).jetstream().stream_info("S")
            assert {r["status"] for r in info.cluster["replicas"].values()} == {"current"}


async def test_a_replica_an_audit_outvoted_shows_drifted_until_its_resync(tmp_path, monkeypatch):
    gate = {"open": False, "refused": 0}
    snapshot = handlers.leader_snapshot

    async def gated(replica_):
        if not gate["open"]:
            gate["refused"] += 1
            raise StreamNotHealthy("held back by the test")
        return await snapshot(replica_)

    monkeypatch.setattr(handlers, "leader_snapshot", gated)
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path) as cluster:
            js, acked, leader, follower = await setup_stream(cluster, 800)
            await cluster.stop(follower)
            last = max(acked.values())

            def rewrite(store) -> None:
                msg = store.load(last)
                store.truncate(last - 1)
                store.append(last, msg.subject, msg.headers, b"changed on disk", msg.timestamp_ns)

            with_store(cluster, follower, rewrite)
            await cluster.start_node(follower)

            async def status() -> dict:
                return (await js.stream_info("S")).cluster["replicas"][follower]

            async def drifted() -> dict | None:
                seen = await status()  # the audit's verdict first, then the follower's own health
                return seen if seen["status"] == "drifted" and seen["health"] == "drifted" else None

            seen = await cluster.wait_until(drifted, 20, what="the follower shown drifted")
            assert seen["current"] is False and seen["agreed_at_last_audit"] is False
            assert seen["last_audit_index"] > 0
            await cluster.wait_until(lambda: gate["refused"] >= 2, 10, what="resync retries")

            gate["open"] = True
            await cluster.wait_until(lambda: converged(cluster, last), 20, what="resynced")
            check_identical(cluster, acked)

            async def agreed_again() -> bool:
                seen = await status()
                return seen["status"] == "current" and seen["agreed_at_last_audit"] is True
            await cluster.wait_until(agreed_again, 20, what="agreeing at the audit after the repair")
            (repaired,) = repaired_of(cluster, follower)
            assert repaired["fetched_msgs"] == 1



async def test_a_fault_the_store_found_shows_repairing_before_any_repair_began(tmp_path):
    """A bit flips in a running follower's sealed block; the store's verifying scan (what the background
    verifier runs) finds it. From that moment, before the replica's repair has even looked, its own health
    (what /healthz, /jsz and the metrics show) is `repairing`, not `current` (issue #14: monitoring shows
    repairing wherever it is) — the test asserts with no scheduling point between the scan and the check.
    Then the repair runs as usual and the follower ends identical to the others."""
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path) as cluster:
            _, acked, leader, follower = await setup_stream(cluster, 1500)
            live = replica(cluster, follower)
            assert str(live.repair.health()) == "current"
            middle = live.store.blocks[len(live.store.blocks) // 2]
            target = (middle.first_seq + middle.last_seq) // 2
            block, offset, length, _ = live.store.locate(target)
            with open(os.path.join(msgs_dir(cluster, follower), block_name(block.number)), "r+b") as handle:
                handle.seek(offset + length - 20)
                byte = handle.read(1)[0]
                handle.seek(offset + length - 20)
                handle.write(bytes([byte ^ 0x08]))
            assert (target, target, "corrupt") in [(f.first, f.last, str(f.kind)) for f in live.store.scan()]
            assert str(live.repair.health()) == "repairing"
            last = max(acked.values())
            await cluster.wait_until(lambda: converged(cluster, last) and not live.store.faults(), 30,
                                     what="repaired and converged")
            await cluster.wait_until(lambda: str(live.repair.health()) == "current", 20, what="current again")
            check_identical(cluster, acked)
