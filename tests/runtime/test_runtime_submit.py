"""`NodeRuntime.submit`: proposals that do not wait for their outcome, in call order, and chains of them.

Method: a 3-node cluster of real runtimes on `RecordingDisk`s under `autojump_clock` (runtime_harness).
Order is read from the state machines (what every node applied) and from the order of the `on_settled`
callbacks. The chain rule (`submit(after=...)`: a proposal enters the log only behind a predecessor that
is in it, in the same term) is driven with predecessors in each state a real one can be in — failed,
withdrawn, proposed in an older term, proposed in this term, applied — and checked on what the machines
applied: a dropped proposal must never be applied anywhere.
"""

from __future__ import annotations

import pytest
import trio

from runtime_harness import GROUP, Cluster, eventually

from jsraft.raft import NotLeader, ProposalDropped
from jsraft.runtime.errors import OutcomeUnknown
from jsraft.runtime.proposals import Proposal, ProposalState


async def _cluster(nursery: trio.Nursery) -> tuple[Cluster, str]:
    cluster = Cluster(nursery)
    await cluster.start_all()
    return cluster, await cluster.wait_leader()


async def test_submitted_proposals_keep_call_order_and_settle_through_the_callback(autojump_clock):
    async with trio.open_nursery() as nursery:
        cluster, leader = await _cluster(nursery)
        runtime = cluster.runtimes[leader]
        settled: list[object] = []
        proposals = []
        previous = None
        for i in range(60):  # one task, no await on outcomes: many are queued while a cycle is busy
            previous = await runtime.submit(GROUP, b"p%d" % i, after=previous,
                                            on_settled=lambda p: settled.append(p.result))
            proposals.append(previous)
        await eventually(lambda: len(settled) == 60)
        expected = [b"p%d" % i for i in range(60)]
        assert [data for _, data in settled] == expected  # type: ignore[misc]
        indexes = [index for index, _ in settled]  # type: ignore[misc]
        assert indexes == sorted(indexes) and len(set(indexes)) == 60
        assert [await runtime.outcome(GROUP, p) for p in proposals] == settled
        await eventually(lambda: all(m.values[-60:] == expected for m in cluster.machines.values()))
        await cluster.stop_all()
        nursery.cancel_scope.cancel()


def _predecessor(state: ProposalState, term: int, error: BaseException | None = None) -> Proposal:
    proposal = Proposal(b"earlier")
    proposal.state, proposal.term, proposal.error = state, term, error
    return proposal


@pytest.mark.parametrize("case", ["failed", "withdrawn", "older term"])
async def test_a_proposal_behind_a_broken_chain_is_dropped_and_never_applied(autojump_clock, case):
    async with trio.open_nursery() as nursery:
        cluster, leader = await _cluster(nursery)
        runtime = cluster.runtimes[leader]
        term = runtime.status(GROUP).raft.current_term
        after = {
            "failed": _predecessor(ProposalState.SETTLED, term, NotLeader(None)),
            "withdrawn": _predecessor(ProposalState.SETTLED, 0, OutcomeUnknown("withdrawn")),
            "older term": _predecessor(ProposalState.PROPOSED, term - 1),
        }[case]
        proposal = await runtime.submit(GROUP, b"dependent", after=after)
        with pytest.raises((ProposalDropped, NotLeader)):
            await runtime.outcome(GROUP, proposal)
        # The log moves on without it: a later independent proposal applies, and nothing applied it.
        await runtime.propose(GROUP, b"independent")
        await eventually(lambda: all(b"independent" in m.values for m in cluster.machines.values()))
        assert all(b"dependent" not in m.values for m in cluster.machines.values())
        assert proposal.after is None  # the chain keeps no references once the core has seen it
        await cluster.stop_all()
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("state", [ProposalState.PROPOSED, ProposalState.SETTLED])
async def test_a_proposal_behind_an_intact_chain_is_proposed(autojump_clock, state):
    async with trio.open_nursery() as nursery:
        cluster, leader = await _cluster(nursery)
        runtime = cluster.runtimes[leader]
        after = _predecessor(state, runtime.status(GROUP).raft.current_term)
        proposal = await runtime.submit(GROUP, b"dependent", after=after)
        index, data = await runtime.outcome(GROUP, proposal)  # type: ignore[misc]
        assert data == b"dependent"
        await eventually(lambda: all(b"dependent" in m.values for m in cluster.machines.values()))
        await cluster.stop_all()
        nursery.cancel_scope.cancel()


async def test_submit_on_a_follower_raises_not_leader_at_once(autojump_clock):
    async with trio.open_nursery() as nursery:
        cluster, leader = await _cluster(nursery)
        follower = next(n for n in cluster.ids if n != leader)
        with pytest.raises(NotLeader) as info:
            await cluster.runtimes[follower].submit(GROUP, b"x")
        assert info.value.leader_id == leader
        assert cluster.runtimes[follower].leader_id(GROUP) == leader
        assert cluster.runtimes[leader].is_leader(GROUP) and not cluster.runtimes[follower].is_leader(GROUP)
        await cluster.stop_all()
        nursery.cancel_scope.cancel()
