"""`StreamAdapter` holding entries back while a repair runs (unit tests: no network, no trio).

Method: a leader and a follower `StreamStateMachine` on MemStores apply one log of real stream entries
(MSGS batches from `entries.encode_msgs`, AUDIT), the follower's through `StreamAdapter.apply` as its Raft
group would feed it, with `Entry` values at consecutive indexes. Repairs run in-process: a
`CatchupSession` on the follower answered by `serve_catchup` on the leader's machine. Checked: the
adapter's invariants — entries after a plan's index wait and apply in order once it is carried out, the
runtime always sees every entry applied, a resync restores exactly at its index, too much held back
abandons the plan, snapshots and audit reports only leave a current machine.
"""

from __future__ import annotations

import pytest

from jsraft.jsapi.stream_config import parse_stream_config
from jsraft.raft.types import Entry
from jsraft.replica import stream_adapter
from jsraft.replica.stream_adapter import StreamAdapter
from jsraft.store.memstore import MemStore
from jsraft.stream import (
    CatchupSession, Finding, FindingKind, Health, MalformedSnapshot, StaleSnapshot, StreamStateMachine,
)
from jsraft.stream import entries as stream_entries
from jsraft.stream import serve_catchup, store_config_for

NOW = 1_700_000_000_000_000_000


def machine() -> StreamStateMachine:
    config, raw = parse_stream_config(b'{"name": "S", "subjects": ["s.>"]}')
    return StreamStateMachine(MemStore(store_config_for(config)), config, raw)


class Log:
    """The group's log, applied by the leader as it grows; `entries` for the follower to be fed."""

    def __init__(self) -> None:
        self.leader = machine()
        self.entries: list[Entry] = []
        self.last_seq = 0
        self.audits = 0

    def _append(self, data: bytes) -> Entry:
        entry = Entry(index=len(self.entries) + 1, term=1, data=data)
        self.entries.append(entry)
        self.leader.apply(entry.index, data)
        return entry

    def msgs(self, count: int) -> Entry:
        first = self.last_seq + 1
        batch = [(b"s.x", b"", f"m{first + i}".encode(), NOW + first + i, b"", 0) for i in range(count)]
        self.last_seq += count
        return self._append(stream_entries.encode_msgs(first, batch))

    def audit(self) -> Entry:
        self.audits += 1
        return self._append(stream_entries.encode_audit(self.audits))


def follower(reports: list | None = None) -> StreamAdapter:
    adapter = StreamAdapter(machine(), on_audit=(reports.append if reports is not None else lambda _: None))
    adapter.recovery_target = 0  # open: a snapshot restored from now on is the leader's
    return adapter


def repair(adapter: StreamAdapter, leader: StreamStateMachine) -> CatchupSession:
    pending = adapter.plan
    session = CatchupSession(adapter.machine, pending.plan.group, snapshot_index=pending.index)
    request = session.start(pending.plan)
    while request is not None:
        request = session.on_chunk(serve_catchup(leader, request))
    adapter.release()
    return session


def test_entries_after_a_restored_plan_wait_and_apply_in_order_once_it_is_carried_out():
    log, adapter = Log(), follower()
    adapter.apply([log.msgs(100)])
    log.msgs(100), log.msgs(100)
    adapter.restore(log.leader.snapshot())  # InstallSnapshot at index 3: the store lacks 101..300
    assert adapter.plan is not None and adapter.plan.index == 3 and adapter.plan.source == "install"
    assert adapter.plan.plan.fetch == ((101, 300),) and adapter.machine.health is Health.repairing

    later = [log.msgs(50), log.audit(), log.msgs(50)]
    assert adapter.apply(later) == [None, None, None]
    assert adapter.applied_index == 6 and adapter.machine.applied_index == 3  # the runtime sees 6
    assert adapter.holding and adapter.deferred == 3 and not adapter.snapshot_ready()
    assert adapter.machine.store.state().last_seq == 100

    session = repair(adapter, log.leader)
    assert session.result.verified is True and session.result.fetched_msgs == 200
    assert not adapter.holding and adapter.deferred == 0 and adapter.plan is None
    assert adapter.machine.applied_index == 6 and adapter.machine.health is Health.current
    assert adapter.machine.store.state().agreement_key() == log.leader.store.state().agreement_key()
    assert adapter.snapshot_ready()


def test_a_resync_restores_the_leaders_snapshot_exactly_at_its_index():
    log, adapter = Log(), follower()
    adapter.apply([log.msgs(100), log.msgs(100)])
    adapter.machine.mark_drifted(Finding(kind=FindingKind.audit_mismatch))  # told by an audit
    log.msgs(100), log.msgs(100)
    with pytest.raises(StaleSnapshot):
        adapter.begin_resync(1, b"")  # the leader's snapshot must not be behind this replica
    with pytest.raises(MalformedSnapshot):
        adapter.begin_resync(4, b"not a snapshot")  # refused now, not when the log reaches index 4
    with pytest.raises(MalformedSnapshot):
        adapter.begin_resync(5, log.leader.snapshot())  # taken at 4, claimed for 5

    adapter.begin_resync(4, log.leader.snapshot())  # the leader stands at 4, this replica at 2
    assert adapter.resync_pending == 4 and adapter.plan is None
    adapter.apply([log.entries[2], log.entries[3], log.msgs(10)])  # 3 and 4 move the position; 5 waits
    assert adapter.resync_pending is None and adapter.plan is not None and adapter.plan.index == 4
    assert adapter.plan.source == "resync" and adapter.deferred == 1
    assert adapter.plan.plan.fetch == ((201, 400),)  # a drifted machine stopped writing at 200

    repair(adapter, log.leader)
    assert adapter.machine.applied_index == 5 and adapter.machine.health is Health.current
    assert adapter.machine.store.state().agreement_key() == log.leader.store.state().agreement_key()


def test_a_resync_whose_store_already_agrees_needs_no_plan():
    log, adapter = Log(), follower()
    adapter.apply([log.msgs(100)])
    adapter.machine.mark_drifted(Finding(kind=FindingKind.audit_mismatch))
    adapter.begin_resync(1, log.leader.snapshot())
    assert adapter.plan is None and not adapter.holding and adapter.machine.health is Health.current


def test_holding_back_too_much_abandons_the_plan_and_lets_the_entries_apply(monkeypatch):
    monkeypatch.setattr(stream_adapter, "DEFERRED_ENTRIES_MAX", 2)
    log, adapter = Log(), follower()
    adapter.apply([log.msgs(10)])
    log.msgs(10)
    adapter.restore(log.leader.snapshot())
    generation = adapter.generation
    adapter.apply([log.msgs(10), log.msgs(10), log.msgs(10)])
    assert adapter.abandoned == 1 and adapter.plan is None and not adapter.holding
    assert adapter.generation > generation  # a session for the old plan is dropped
    assert adapter.machine.applied_index == 5 and adapter.machine.last_seq == 50
    assert adapter.machine.health is Health.repairing  # still to be repaired: by a fresh resync


def test_audit_reports_leave_only_a_current_machine():
    reports: list = []
    log, adapter = Log(), follower(reports)
    adapter.apply([log.msgs(10), log.audit()])
    assert [r.index for r in reports] == [2]
    log.msgs(10)
    adapter.restore(log.leader.snapshot())  # a plan: what follows is held back
    adapter.apply([log.audit()])
    assert [r.index for r in reports] == [2]
    repair(adapter, log.leader)
    assert [r.index for r in reports] == [2, 4]  # computed after the repair, at its own index
    assert reports[1].agreement_key() == log.leader.store.state().agreement_key()
    adapter.machine.mark_drifted(Finding(kind=FindingKind.audit_mismatch))
    adapter.apply([log.audit()])
    assert [r.index for r in reports] == [2, 4]  # a drifted store does not stand for the group
