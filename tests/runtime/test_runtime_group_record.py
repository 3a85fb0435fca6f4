"""When the runtime puts a group on the node's record of started groups (`runtime.group_record` decisions
4, 5): after the group's first durable cycle and before it sends, never at open.

Method, two tiers. (1) Three real `NodeRuntime`s on `RecordingDisk`s (a `SimDisk` with an exact model of what
is durable), each with a `GroupRecord` on its node root. At every message a runtime hands to the network, a
crashed copy of the sender's disk is taken and the record read from it: the group must be on it (a message may
be a vote or an acknowledgement, which a lost directory must never let a fresh bootstrap contradict), and its
vote-term ceiling must cover the sender's term (decision 6: the term its hard state holds while the cycle
sends). The same check is run once with `GroupRecord.started` disabled and once with the ceiling never raised,
to show it fails when the record is never written. A coordinated power cut right after a create — every node's
durable image taken as its `open_group` returned, before its first cycle — restarts as three fresh members
that elect a leader and commit (the seed-424 halt, at the runtime level); a node whose group directory is lost
after it served restarts repairing, in its vote-term ceiling with no vote, and the group elects a leader above
it that repairs it (liveness of `raft.vote_fence` invariant 4). (2) The runtime's own steps (`open_storage`,
`GroupCycle`, `persist_jobs`, `started_fn`) on a real `OsDisk` in shadow mode, cut with
`jsraft.disk.power_cut` (`drop`) before and after the first durable cycle, then the group's directory removed:
before, the group bootstraps again; after, it opens as a member that lost its storage. And the ceiling on real
files: n1 votes in term after term, loses its group directory, and restores fenced through at least the last
term it voted in, in that term (`raft.vote_fence` invariant 4), refusing a leader of a lower term and a second
vote; a version-1 record (no ceilings) is read, and the open covers the WAL's recovered term.
"""

from __future__ import annotations

import json
import random
import shutil

import pytest
import trio

from record_kit import open_member, run_cycle
from runtime_harness import GROUP, Cluster, RecordingDisk, eventually

from jsraft.codec.records import FILE_HEADER, FILE_MAGIC, Kind, encode_record
from jsraft.disk import OsDisk, power_cut
from jsraft.raft import AppendEntries, RaftNode, RequestVote, RequestVoteResponse
from jsraft.raft.config import RaftConfig, RestoredState
from jsraft.replica import GroupCycle
from jsraft.runtime.group_record import GROUP_RECORD_FILE, GROUP_RECORD_FILE_TYPE, GroupRecord
from jsraft.runtime.persist import Job, persist_jobs

VOTERS = ("n1", "n2", "n3")
CHECKED_PER_NODE = 8  # messages checked per sender, from its first


def _records(disks: dict[str, RecordingDisk]) -> dict[str, dict[str, object]]:
    return {n: {"group_record": GroupRecord.open(disk, node_existed=False)} for n, disk in disks.items()}


def _durably_recorded(disk: RecordingDisk) -> bool:
    return GroupRecord.open(disk.durable_image(), node_existed=True).recorded(GROUP)


def _durable_ceiling(disk: RecordingDisk) -> int:
    return GroupRecord.open(disk.durable_image(), node_existed=True).vote_ceiling(GROUP)


async def _sends_only_when_recorded(nursery: trio.Nursery) -> tuple[int, list[str]]:
    disks = {n: RecordingDisk(seed=3) for n in VOTERS}
    cluster = Cluster(nursery, disks=disks, node_options=_records(disks))
    problems: list[str] = []
    checked = {n: 0 for n in VOTERS}

    def check(from_node, to_node, group, message) -> None:
        # A crashed copy per message is costly: each node's first messages are the ones at stake (its
        # first vote, its first acknowledgement); a group once durably recorded stays recorded.
        if checked[from_node] >= CHECKED_PER_NODE:
            return
        checked[from_node] += 1
        if not _durably_recorded(disks[from_node]):
            problems.append(f"{from_node} sent {type(message).__name__} to {to_node} unrecorded")
        # The core is busy while its cycle sends: its term is the one the cycle made durable.
        raft = cluster.runtimes[from_node].status(GROUP).raft
        if _durable_ceiling(disks[from_node]) < max(raft.current_term, 1):
            problems.append(f"{from_node} sent {type(message).__name__} in term {raft.current_term} above "
                            f"its durable ceiling")

    cluster.router.on_send.append(check)
    await cluster.start_all()
    leader = await cluster.wait_leader()
    for value in (b"a", b"b", b"c"):
        await cluster.runtimes[leader].propose(GROUP, value)
    await eventually(lambda: all(m.values == [b"a", b"b", b"c"] for m in cluster.machines.values()))
    await cluster.stop_all()
    nursery.cancel_scope.cancel()  # the router's delivery tasks
    return sum(checked.values()), problems


async def test_every_message_leaves_a_group_that_is_durably_recorded(autojump_clock):
    async with trio.open_nursery() as nursery:
        checked, problems = await _sends_only_when_recorded(nursery)
    assert checked == CHECKED_PER_NODE * len(VOTERS) and problems == []


async def test_the_send_check_fails_when_the_group_is_never_recorded(autojump_clock, monkeypatch):
    monkeypatch.setattr(GroupRecord, "started", lambda self, name, term=0: None)
    async with trio.open_nursery() as nursery:
        checked, problems = await _sends_only_when_recorded(nursery)
    assert checked > 10 and sum("unrecorded" in p for p in problems) == checked


async def test_the_send_check_fails_when_the_ceiling_is_never_raised(autojump_clock, monkeypatch):
    monkeypatch.setattr(GroupRecord, "_raise_ceiling", lambda self, name, term: None)
    async with trio.open_nursery() as nursery:
        checked, problems = await _sends_only_when_recorded(nursery)
    assert checked > 10 and len(problems) == checked and all("ceiling" in p for p in problems)


async def test_a_coordinated_power_cut_right_after_a_create_bootstraps_again(autojump_clock):
    disks = {n: RecordingDisk(seed=5) for n in VOTERS}
    images = {}
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, disks=disks, node_options=_records(disks))
        for node_id in VOTERS:
            await cluster.start(node_id)
            # No checkpoint since `open_group` returned: the group has run no cycle. Power cut now.
            images[node_id] = disks[node_id].durable_image()
        await cluster.stop_all()
        nursery.cancel_scope.cancel()
    for node_id, image in images.items():
        assert not GroupRecord.open(image, node_existed=True).recorded(GROUP), node_id
    restarted = {n: RecordingDisk(image) for n, image in images.items()}
    options = {n: {"group_record": GroupRecord.open(disk, node_existed=True)} for n, disk in restarted.items()}
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, disks=restarted, node_options=options, seed=6)
        await cluster.start_all()
        assert not any(r.status(GROUP).raft.repairing for r in cluster.runtimes.values())
        leader = await cluster.wait_leader(timeout_s=30)
        await cluster.runtimes[leader].propose(GROUP, b"after the cut")
        await eventually(lambda: all(m.values == [b"after the cut"] for m in cluster.machines.values()))
        assert all(_durably_recorded(disk) for disk in restarted.values())
        await cluster.stop_all()
        nursery.cancel_scope.cancel()


async def test_a_group_that_served_and_lost_its_directory_restarts_repairing(autojump_clock):
    disks = {n: RecordingDisk(seed=7) for n in VOTERS}
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, disks=disks, node_options=_records(disks))
        await cluster.start_all()
        leader = await cluster.wait_leader()
        await cluster.runtimes[leader].propose(GROUP, b"acknowledged")
        await eventually(lambda: all(m.values == [b"acknowledged"] for m in cluster.machines.values()))
        lost = next(n for n in VOTERS if n != leader)
        await cluster.stop(lost)
        image = disks[lost].durable_image()
        image.remove_tree(f"groups/{GROUP}")
        image.sync_dir("groups")
        cluster.disks[lost] = RecordingDisk(image)
        cluster.node_options[lost] = {"group_record": GroupRecord.open(cluster.disks[lost], node_existed=True)}
        runtime = await cluster.start(lost)
        status = runtime.status(GROUP).raft
        assert status.repairing, "a group that voted and acknowledged must never bootstrap again"
        # Restored in its vote-term ceiling (`raft.vote_fence` invariant 4), it deposes the leader once; the
        # group still elects one above that term, which repairs it, and it rejoins with what it lost.
        ceiling = cluster.node_options[lost]["group_record"].vote_ceiling(GROUP)
        assert status.current_term == ceiling > 0 and status.voted_for is None
        await eventually(lambda: not runtime.status(GROUP).raft.repairing
                         and cluster.machines[lost].values == [b"acknowledged"])
        leader = await cluster.wait_leader()
        assert cluster.runtimes[leader].status(GROUP).raft.current_term > ceiling
        await cluster.runtimes[leader].propose(GROUP, b"after the repair")
        await eventually(lambda: all(m.values == [b"acknowledged", b"after the repair"]
                                     for m in cluster.machines.values()))
        await cluster.stop_all()
        nursery.cancel_scope.cancel()


# --- Real files: the runtime's steps on OsDisk, cut with `power_cut` ---------------------------------


def _first_durable_cycle(cycle: GroupCycle) -> None:
    work = cycle.take()
    assert work.must_sync, "a bootstrapped member's first cycle makes its log durable"
    (job,) = persist_jobs([Job(wal=cycle.wal, disk=cycle.disk, work=work)])
    assert job.error is None
    cycle.finish(work)


@pytest.mark.parametrize("cut_after_first_cycle", [False, True])
def test_a_power_cut_then_a_lost_directory_on_real_files(tmp_path, cut_after_first_cycle):
    root = str(tmp_path / "node")
    record = GroupRecord.open(OsDisk(root, shadow=True), node_existed=False)
    node, cycle = open_member(root, record)
    assert not node.status().repairing and not record.recorded(GROUP)
    if cut_after_first_cycle:
        _first_durable_cycle(cycle)
        assert record.recorded(GROUP)
    cycle.wal.close()
    power_cut(root, "drop", 1)
    shutil.rmtree(tmp_path / "node" / "groups" / GROUP)  # the group's directory is lost too
    reopened = GroupRecord.open(OsDisk(root, shadow=True), node_existed=True)
    assert not reopened.lost and reopened.recorded(GROUP) == cut_after_first_cycle
    node, cycle = open_member(root, reopened)
    try:
        status = node.status()
        if cut_after_first_cycle:
            assert status.repairing, "it was durable before it could send: a lost directory is lost storage"
        else:
            fresh = RaftNode(RaftConfig(node_id="n1"), random.Random(1), RestoredState.bootstrap(VOTERS))
            assert status == fresh.status(), "nothing durable: a fresh bootstrap, as on the first start"
    finally:
        cycle.wal.close()


def _granted(messages: list) -> bool:
    return any(isinstance(m, RequestVoteResponse) and m.vote_granted for m in messages)


def test_a_lost_group_directory_restores_fenced_through_every_term_it_voted_in(tmp_path):
    root = str(tmp_path / "node")
    record = GroupRecord.open(OsDisk(root, shadow=True), node_existed=False)
    node, cycle = open_member(root, record)
    _first_durable_cycle(cycle)
    writes = []
    voted = node.current_term
    for _ in range(12):  # n2 and n3 take turns campaigning, one term up each time (the one-step rule)
        voted += 1
        candidate = "n2" if voted % 2 else "n3"
        before = GroupRecord.open(OsDisk(root, shadow=True), node_existed=True).vote_ceiling(GROUP)
        node.step(RequestVote(from_id=candidate, to_id="n1", term=voted, last_log_index=node.log.last_index,
                              last_log_term=node.log.last_term()))
        assert _granted(run_cycle(cycle)), voted
        durable = GroupRecord.open(OsDisk(root, shadow=True), node_existed=True).vote_ceiling(GROUP)
        assert durable >= voted, "the ceiling is durable before the vote leaves"
        writes.append(durable != before)
    assert 1 <= sum(writes) <= 2, "raised a step at a time, not at every election"
    cycle.wal.close()
    power_cut(root, "drop", 1)
    shutil.rmtree(tmp_path / "node" / "groups" / GROUP)  # the whole group directory: no hard state at all

    node, cycle = open_member(root, GroupRecord.open(OsDisk(root, shadow=True), node_existed=True))
    try:
        status = node.status()
        assert status.repairing and node.vote_fence_term >= voted
        assert node.current_term == node.vote_fence_term and node.voted_for is None
        # A leader of an older term, or of the term it voted in, is refused (the answer carries the fence
        # term) ...
        for term in (voted - 1, voted):
            node.step(AppendEntries(from_id="n3", to_id="n1", term=term, leader_id="n3", prev_log_index=0,
                                    prev_log_term=0, leader_commit=0, heartbeat=True))
            answers = run_cycle(cycle)
            assert answers and all(not m.success and m.term == node.vote_fence_term for m in answers), term
            assert node.leader_id is None
        # ... and no second vote in the term it voted in, nor up to the fence.
        for term in (voted, node.vote_fence_term):
            node.step(RequestVote(from_id="n3", to_id="n1", term=term, last_log_index=99, last_log_term=term))
            assert not _granted(run_cycle(cycle)), term
    finally:
        cycle.wal.close()


def test_a_version_1_record_is_read_and_the_open_covers_the_recovered_term(tmp_path):
    root = str(tmp_path / "node")
    record = GroupRecord.open(OsDisk(root, shadow=True), node_existed=False)
    node, cycle = open_member(root, record)
    _first_durable_cycle(cycle)
    node.step(RequestVote(from_id="n2", to_id="n1", term=2, last_log_index=node.log.last_index,
                          last_log_term=node.log.last_term()))
    assert _granted(run_cycle(cycle))
    cycle.wal.close()
    # The same node under the previous release: its record has version 1 and no ceilings.
    disk = OsDisk(root)
    body = json.dumps({"version": 1, "groups": [GROUP], "unknown_through_meta_index": None}).encode()
    disk.write_atomic(GROUP_RECORD_FILE, FILE_HEADER.pack(FILE_MAGIC, 1, GROUP_RECORD_FILE_TYPE)  # format 1: one record
                      + encode_record(Kind.GROUP_RECORD, 1, 0, body))
    old = GroupRecord.open(disk, node_existed=True)
    assert not old.lost and old.recorded(GROUP) and old.vote_ceiling(GROUP) == 0
    node, cycle = open_member(root, old)
    cycle.wal.close()
    assert node.current_term == 2
    assert GroupRecord.open(OsDisk(root), node_existed=True).vote_ceiling(GROUP) >= 2, "covered at open"
