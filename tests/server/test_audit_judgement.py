"""A replica whose store awaits an audit's confirmation, on a real 3-node cluster: the leader tells it the
agreeing verdict, and the mark on disk survives a restart until then.

Method: a real `Cluster` (real TCP, real files; audits only when asked). A follower's store is made
unjudged as a catch-up the session could not verify leaves it (`Judgement.repaired(verified=False)`, the
call `finish_session` makes). While unjudged it refuses to serve a repair (`source_unjudged`) and offers no
snapshot of its own. It asks for an audit, as its repair would; its report says it awaits a verdict, so
the leader, finding it agreeing, sends it `stream.audit_agreed`: the follower is judged again and its
mark on disk is cleared. A leader so marked refuses a follower's resync (`stream.snapshot`) and is judged
by the verdict of its own audit, leading throughout. Then the restart: marked again and stopped, its directory holds the mark; once
restarted, the audit after its recovery clears it — which only a mark read back at open can show (one
never loaded would stay on disk as written). Every wait polls with a deadline.
"""

from __future__ import annotations

import pytest
import trio
from drift_kit import replica, setup_stream, start, stream_leader

from jsraft.disk import OsDisk
from jsraft.replica.install_mark import AuditMark
from jsraft.server.groups.repair_serve import _source_refusal, leader_snapshot
from jsraft.stream import RefusalCode, RepairSourceRefused

STREAM = "S"


def _mark(cluster, name: str) -> int | None:
    return AuditMark(OsDisk(cluster.stream_dir(name, STREAM))).pending()


async def test_an_unjudged_follower_is_told_the_agreeing_verdict_and_serves_again(tmp_path):
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path) as cluster:
            _, _, leader, follower = await setup_stream(cluster, 300)
            target = replica(cluster, follower)
            verdicts = replica(cluster, leader).audit.verdicts
            applied = target.machine.applied_index
            target.adapter.judgement.repaired(applied, verified=False)
            assert _mark(cluster, follower) == applied
            refusal = _source_refusal(target)
            assert refusal is not None and refusal.code == RefusalCode.source_unjudged
            assert not target.adapter.snapshot_ready()

            target.audit.request_soon()  # what the end of its repair episode does
            await cluster.wait_until(lambda: not target.adapter.judgement.unjudged, 20,
                                     what="the agreeing verdict reached the follower")
            assert replica(cluster, leader).audit.verdicts > verdicts
            assert _mark(cluster, follower) is None
            assert _source_refusal(target) is None and target.adapter.snapshot_ready()


async def test_an_unjudged_leader_is_judged_by_its_own_audit_and_serves_no_snapshot_meanwhile(tmp_path):
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path) as cluster:
            _, _, leader, follower = await setup_stream(cluster, 300)
            own = replica(cluster, leader)
            own.adapter.judgement.repaired(own.machine.applied_index, verified=False)  # as after its catch-up
            refusal = _source_refusal(own)
            assert refusal is not None and refusal.code == RefusalCode.source_unjudged
            with pytest.raises(RepairSourceRefused, match="source_unjudged"):
                await leader_snapshot(own)  # what a follower's resync asks of it
            own.audit.request()
            await cluster.wait_until(lambda: not own.adapter.judgement.unjudged, 20,
                                     what="the leader's own audit judged its store")
            assert stream_leader(cluster) == leader and _mark(cluster, leader) is None
            assert _source_refusal(own) is None and replica(cluster, follower).adapter.judgement.awaiting is None


async def test_the_mark_survives_a_restart_until_an_audit_after_the_recovery_agrees(tmp_path):
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path) as cluster:
            _, _, _, follower = await setup_stream(cluster, 300)
            target = replica(cluster, follower)
            applied = target.machine.applied_index
            target.adapter.judgement.repaired(applied, verified=False)
            await cluster.stop(follower)
            assert _mark(cluster, follower) == applied  # on disk while the node is down

            await cluster.start_node(follower)
            await cluster.wait_until(lambda: _mark(cluster, follower) is None, 30,
                                     what="the audit after the recovery cleared the mark")
            restarted = replica(cluster, follower)
            assert restarted is not None and not restarted.adapter.judgement.unjudged
            assert restarted.adapter.judgement.repaired_at == 0  # judged by the verdict, not by a repair
