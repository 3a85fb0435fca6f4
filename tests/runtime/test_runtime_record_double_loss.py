"""A node that loses its record of started groups AND a group's directory (issue #14: the double loss)
answers nothing until every voter told it the term, then is fenced through the highest.

Method, two tiers. (1) Real files, the runtime's own steps (`open_storage`, `prepare`, `GroupCycle`,
`persist_jobs`, `GroupRecord`) on an `OsDisk` in shadow mode: n1 votes for n2 in term 2 and for n3 in term 3,
is cut by `jsraft.disk.power_cut`, and loses `groups.rec` and `groups/<G>/`. Restarted, it is term unknown:
a leader of term 2 gets no acknowledgement, a RequestVote of term 3 no vote, and its cycles persist nothing
(a restart before the answers is term unknown again). n2's answer alone (term 2) changes nothing; once n3,
the candidate its lost vote went to, answered (term 3), it is fenced above 3 (one above the highest answer,
`raft.term_query.finish`), in that term with no vote: it refuses the term-2 leader and a second vote in term
3, and follows a leader of term 4. The same run with the query disabled (`rule_term_query_voters` returning
None, the simulator's mutant `no-term-query`) shows those problems: `_problems` must return nothing with the
query and something without it. (2) Three real `NodeRuntime`s (RecordingDisk, in-memory router, autojump clock): a follower that
lost both restarts waiting, stays waiting while one voter is stopped, and rejoins with every acknowledged
entry once that voter is back (the liveness cost of a double fault, `raft.term_query`).
"""

from __future__ import annotations

import os
import shutil

import trio

from record_kit import RECORD_VOTERS as VOTERS
from record_kit import open_member, run_cycle
from runtime_harness import GROUP, TICK_MS, Cluster, RecordingDisk, eventually

from jsraft.disk import OsDisk, power_cut
from jsraft.raft import (
    AppendEntries, AppendEntriesResponse, RaftNode, RequestVote, RequestVoteResponse, TermQueryResponse,
)
from jsraft.raft.config import RaftConfig
from jsraft.raft.rules import SafetyRules
from jsraft.raft.term_query import WAITING_REASON
from jsraft.replica import GroupCycle
from jsraft.runtime.group_record import GROUP_RECORD_FILE, GroupRecord


def _heartbeat(term: int, leader: str) -> AppendEntries:
    return AppendEntries(from_id=leader, to_id="n1", term=term, leader_id=leader, prev_log_index=0,
                         prev_log_term=0, leader_commit=0, heartbeat=True)


def _acked_below(messages: list, term: int) -> bool:
    return any(isinstance(m, AppendEntriesResponse) and m.success and m.term < term for m in messages)


def _granted(messages: list) -> bool:
    return any(isinstance(m, RequestVoteResponse) and m.vote_granted for m in messages)


def _lose_record_and_directory(tmp_path) -> str:
    """n1 votes in terms 2 (for n2) and 3 (for n3), then a power cut, then `groups.rec` and the group's
    directory are gone. Returns the node's root."""
    root = str(tmp_path / "node")
    record = GroupRecord.open(OsDisk(root, shadow=True), node_existed=False)
    node, cycle = open_member(root, record)
    run_cycle(cycle)  # the bootstrap's first durable cycle
    for term, candidate in ((2, "n2"), (3, "n3")):
        node.step(RequestVote(from_id=candidate, to_id="n1", term=term, last_log_index=node.log.last_index,
                              last_log_term=node.log.last_term()))
        assert _granted(run_cycle(cycle)), term
    cycle.wal.close()
    power_cut(root, "drop", 1)
    shutil.rmtree(tmp_path / "node" / "groups" / GROUP)
    os.remove(tmp_path / "node" / GROUP_RECORD_FILE)
    return root


def _problems(tmp_path) -> list[str]:
    """Drive the restarted n1 through the double loss; what it did that the query must prevent."""
    root = _lose_record_and_directory(tmp_path)
    problems: list[str] = []
    record = GroupRecord.open(OsDisk(root, shadow=True), node_existed=True)
    assert record.lost and record.vote_ceiling(GROUP) == 0, "no ceiling left: the double loss"
    node, cycle = open_member(root, record)
    assert node.status().repairing, "a lost group never bootstraps again (record decision 2)"
    if _acked_below([*_step(node, cycle, _heartbeat(2, "n2"))], 3):
        problems.append("acknowledged a term-2 leader before the answers")
    if _granted(_step(node, cycle, RequestVote(from_id="n2", to_id="n1", term=3, last_log_index=9,
                                               last_log_term=3))):
        problems.append("voted twice in term 3 before the answers")
    cycle.wal.close()
    node, cycle = open_member(root, GroupRecord.open(OsDisk(root, shadow=True), node_existed=True))
    query = node.term_query
    if query is None:
        problems.append("a restart before the answers forgot that its term is unknown")
    else:
        node.step(TermQueryResponse(from_id="n2", to_id="n1", term=2, query_id=query.query_id))
        if node.term_query is None or _acked_below(_step(node, cycle, _heartbeat(2, "n2")), 3):
            problems.append("n2's answer alone (a majority with n1) ended the query")
        node.step(TermQueryResponse(from_id="n3", to_id="n1", term=3, query_id=query.query_id))
    if not (node.term_query is None and node.vote_fence_term >= 3 and node.current_term == node.vote_fence_term
            and node.voted_for is None):
        problems.append(f"not fenced through term 3 after every answer: term {node.current_term}, "
                        f"fence {node.vote_fence_term}, vote {node.voted_for}")
    answers = _step(node, cycle, _heartbeat(2, "n2"))
    if _acked_below(answers, 3) or node.leader_id == "n2":
        problems.append("followed the term-2 leader after the answers")
    if _granted(_step(node, cycle, RequestVote(from_id="n2", to_id="n1", term=3, last_log_index=9,
                                               last_log_term=3))):
        problems.append("voted twice in term 3")
    _step(node, cycle, _heartbeat(4, "n2"))
    if node.leader_id != "n2" or node.current_term != 4:
        problems.append("did not follow the term-4 leader: it cannot rejoin")
    cycle.wal.close()
    return problems


def _step(node: RaftNode, cycle: GroupCycle, message) -> list:
    node.step(message)
    return run_cycle(cycle)


def test_a_double_loss_answers_nothing_until_every_voter_told_its_term_on_real_files(tmp_path):
    assert _problems(tmp_path) == []


def test_the_double_loss_check_fails_with_the_term_query_disabled(tmp_path, monkeypatch):
    monkeypatch.setattr(SafetyRules, "rule_term_query_voters", lambda self, restored: None)
    problems = _problems(tmp_path)
    assert "acknowledged a term-2 leader before the answers" in problems
    assert "a restart before the answers forgot that its term is unknown" in problems


# --- Three runtimes: the liveness cost, and the rejoin ------------------------------------------------


async def test_a_double_loss_waits_for_a_stopped_voter_then_rejoins(autojump_clock):
    disks = {n: RecordingDisk(seed=11) for n in VOTERS}
    options = {n: {"group_record": GroupRecord.open(disk, node_existed=False)} for n, disk in disks.items()}
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, disks=disks, node_options=options)
        await cluster.start_all()
        leader = await cluster.wait_leader()
        await cluster.runtimes[leader].propose(GROUP, b"acknowledged")
        await eventually(lambda: all(m.values == [b"acknowledged"] for m in cluster.machines.values()))
        lost, other = [n for n in VOTERS if n != leader]
        await cluster.stop(lost)
        image = disks[lost].durable_image()
        image.remove_tree(f"groups/{GROUP}")
        image.remove(GROUP_RECORD_FILE)
        image.sync_dir("")
        cluster.disks[lost] = RecordingDisk(image)
        cluster.node_options[lost] = {"group_record": GroupRecord.open(cluster.disks[lost], node_existed=True)}
        await cluster.stop(other)  # one voter cannot answer: the lost one must wait for it
        runtime = await cluster.start(lost)
        assert WAITING_REASON in (runtime.status(GROUP).raft.repair_reason or "")
        # Virtual time (autojump clock): dozens of election timeouts, each resending the query to `other`.
        await trio.sleep(50 * RaftConfig(node_id=lost).election_ticks * TICK_MS / 1000)
        status = runtime.status(GROUP).raft
        assert status.repairing and WAITING_REASON in (status.repair_reason or ""), "it waits for every voter"
        assert cluster.machines[lost].values == [], "and takes nothing from the leader meanwhile"
        await cluster.start(other)
        await eventually(lambda: not runtime.status(GROUP).raft.repairing
                         and cluster.machines[lost].values == [b"acknowledged"])
        leader = await cluster.wait_leader()
        await cluster.runtimes[leader].propose(GROUP, b"after the rejoin")
        await eventually(lambda: all(m.values == [b"acknowledged", b"after the rejoin"]
                                     for m in cluster.machines.values()))
        await cluster.stop_all()
        nursery.cancel_scope.cancel()
