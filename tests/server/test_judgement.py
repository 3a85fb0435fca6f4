"""`replica.judgement.Judgement`: a store that awaits an audit's confirmation stays so across a restart, takes
no snapshot of its own and serves no repair until an agreeing verdict or a verified repair.

Method: the rules on a `Judgement` over a real `AuditMark` (`OsDisk` in a temporary directory), re-read by
a fresh instance as a restart would: an unverified repair and a disagreeing verdict mark the store, a
stale verdict (at or below the last repair) changes nothing, only an agreeing verdict *above* the marked
index or a verified repair clears it, and a mark that does not read counts as set. Then production's
`StreamAdapter` (the `Log` and `repair` of test_repair_adapter.py): a catch-up whose session could not
verify (the leader removed messages after its snapshot) leaves the replica unjudged through
`finish_session` — durably, before the held entries apply — so `snapshot_ready()` says no and
`source_refusal` refuses with `source_unjudged`; a fresh adapter over the same directory (the restart)
is still unjudged; the agreeing verdict of a later audit lets it snapshot and serve again. The control:
the same catch-up verified clears the mark. Last, `bound_recovery`: a replay whose target lay in a log
tail that a new leader replaced ends when the log falls below it (simulator consumer seed 51287).
"""

from __future__ import annotations

from test_repair_adapter import Log, follower

from jsraft.disk import OsDisk
from jsraft.replica import stream_repair as decide
from jsraft.replica.install_mark import AUDIT_MARK_FILE, AuditMark
from jsraft.replica.judgement import Judgement
from jsraft.replica.stream_adapter import StreamAdapter
from jsraft.stream import Health, RefusalCode
from jsraft.stream import entries as stream_entries
from jsraft.stream.catchup import CatchupSession


def test_the_rules_and_their_durability(tmp_path):
    disk = OsDisk(str(tmp_path))
    judgement = Judgement(AuditMark(disk))
    assert not judgement.unjudged and not disk.exists(AUDIT_MARK_FILE)  # nothing written for nothing
    judgement.repaired(10, verified=False)
    assert Judgement(AuditMark(disk)).awaiting == 10  # a restart reads it back
    assert not judgement.verdict(10, True)  # at the repair's index: about the store before it
    assert Judgement(AuditMark(disk)).unjudged
    assert judgement.verdict(11, True) and not judgement.unjudged
    assert not Judgement(AuditMark(disk)).unjudged  # cleared on disk too
    assert judgement.verdict(12, False) and judgement.disagreed
    assert Judgement(AuditMark(disk)).awaiting == 12
    assert judgement.verdict(12, True) and judgement.unjudged  # only above the disagreement
    judgement.repaired(13, verified=True)
    assert not judgement.unjudged and not Judgement(AuditMark(disk)).unjudged
    disk.write_atomic(AUDIT_MARK_FILE, b"\xff garbage")  # a mark that does not read: the safe side
    damaged = Judgement(AuditMark(disk))
    assert damaged.unjudged and damaged.awaiting == 0
    assert damaged.verdict(1, True) and not Judgement(AuditMark(disk)).unjudged


def _caught_up(tmp_path, *, removed_after_snapshot: bool) -> tuple[OsDisk, Log, StreamAdapter, int]:
    """A follower with an audit mark installs the leader's snapshot at index 2 and catches up; the leader
    applied a DELETE after its snapshot when `removed_after_snapshot` (the session cannot verify then)."""
    log, disk = Log(), OsDisk(str(tmp_path))
    adapter = StreamAdapter(follower().machine, audit_mark=AuditMark(disk))
    adapter.recovery_target = 0
    log.msgs(10), log.msgs(10)
    adapter.restore(log.leader.snapshot())
    index = adapter.plan.index
    if removed_after_snapshot:
        log._append(stream_entries.encode_delete(5))
    pending = adapter.plan
    session = CatchupSession(adapter.machine, pending.plan.group, snapshot_index=pending.index)
    request = session.start(pending.plan)
    while request is not None:
        request = session.on_chunk(decide.answer_catchup(log.leader, "S", request))
    assert decide.finish_session(adapter, session, pending.generation)
    return disk, log, adapter, index


def test_an_unverified_catch_up_leaves_the_store_unjudged_until_an_agreeing_verdict(tmp_path):
    disk, log, adapter, index = _caught_up(tmp_path, removed_after_snapshot=True)
    assert adapter.machine.health is Health.current and adapter.plan is None  # caught up, but unverified
    assert adapter.judgement.awaiting == index and AuditMark(disk).pending() == index
    assert not adapter.snapshot_ready()  # no snapshot of its own would state its tuple as the group's
    refusal = decide.source_refusal(adapter.machine, adapter.judgement)
    assert refusal is not None and refusal.code == RefusalCode.source_unjudged
    assert Judgement(AuditMark(disk)).unjudged  # the restart keeps it: not laundered (sim seed 49983)

    adapter.apply(log.entries[2:])  # the DELETE the leader applied, then the AUDIT the leader proposes
    audit = log.audit()
    adapter.apply([audit])
    assert adapter.judgement.verdict(audit.index, True)  # the leader's verdict: it agreed
    assert adapter.snapshot_ready() and decide.source_refusal(adapter.machine, adapter.judgement) is None
    assert AuditMark(disk).pending() is None


def test_a_verified_catch_up_judges_the_store_by_itself(tmp_path):
    disk, _, adapter, _ = _caught_up(tmp_path, removed_after_snapshot=False)
    assert not adapter.judgement.unjudged and AuditMark(disk).pending() is None
    assert adapter.snapshot_ready() and decide.source_refusal(adapter.machine, adapter.judgement) is None


def test_a_replay_whose_target_was_truncated_away_ends_when_the_log_falls_below_it():
    log = Log()
    entries = [log.msgs(5), log.msgs(5), log.msgs(5)]
    adapter = StreamAdapter(follower().machine)
    adapter.machine.replaying = True  # restored its own snapshot at open: the replay verifies the store
    adapter.recovery_target = 5  # the WAL held an uncommitted tail up to 5 when it opened
    adapter.apply(entries)
    assert adapter.machine.replaying  # 3 of 5: the tail 4..5 may still come
    adapter.bound_recovery(6)  # a longer log says nothing
    assert adapter.machine.replaying and adapter.recovery_target == 5
    adapter.bound_recovery(3)  # a new leader's entries replaced the tail: 4 and 5 were never committed
    assert not adapter.machine.replaying and adapter.recovery_target == 3
