"""A group's first durable cycle writes its marker and its entry on the node's record of started groups side
by side (`replica.persist` step 3, `runtime.persist` invariant 5), and sends only once both are durable;
its WAL's witness write runs beside them, after the segment's fsync (`replica.persist` invariant 4).

Method: the production driver's own step (`runtime.persist.persist_jobs`) on a real `OsDisk` and a real
`GroupRecord`, with a `Work` carrying a hard state (the first durable cycle), the marker and the `started`
call. Side by side is shown, not timed: the marker's write and `started` each wait at one two-party
barrier (with a deadline), which only two concurrent calls can pass — one after the other, the first waits
out the deadline and the job fails. Then: the job returns only after both are durable (a `drop` power cut
right after it keeps both), an error of either fails the job after the other finished, and the default
(`sync_work` without `together`, the simulator's) runs them one after the other, marker first. The
witness is shown beside them the same way (a three-party barrier), and after the segment's fsync by the
order of the calls; the simulator's order is the segment, the witness, the marker, the record.
"""

from __future__ import annotations

import threading

import pytest

from jsraft.disk import OsDisk, power_cut
from jsraft.raft.types import HardState
from jsraft.replica import persist
from jsraft.replica.persist import GROUP_MARKER, Work, marker_contents
from jsraft.runtime.group_record import GroupRecord
from jsraft.runtime.persist import Job, persist_jobs, started_fn
from jsraft.wal import Wal

GROUP = "S-ORDERS-7"
BARRIER_DEADLINE_S = 10.0  # two concurrent parties meet at once; only a serial run waits this out


def _job(root: str, started) -> Job:
    node = OsDisk(root, shadow=True)
    raft = node.sub(f"streams/ORDERS/raft")
    wal, _ = Wal.open(raft)
    work = Work(ready=None, hard_state=HardState(current_term=2, voted_for="n1"),
                marker=marker_contents(GROUP, "n1"), started=started)
    return Job(wal, raft, work)


def _record(root: str) -> GroupRecord:
    return GroupRecord.open(OsDisk(root, shadow=True), node_existed=False)


def test_the_marker_and_the_record_are_written_side_by_side_and_durable_before_the_job_returns(tmp_path, monkeypatch):
    root = str(tmp_path / "node")
    record = _record(root)
    barrier = threading.Barrier(2, timeout=BARRIER_DEADLINE_S)
    started = started_fn(record, GROUP)
    assert started is not None
    real_write_atomic = OsDisk.write_atomic

    def write_atomic(self, path, data):
        if path == GROUP_MARKER:
            barrier.wait()  # the record's write must be under way at the same time
        real_write_atomic(self, path, data)
    monkeypatch.setattr(OsDisk, "write_atomic", write_atomic)

    def started_at_the_barrier(term: int) -> None:
        barrier.wait()  # the marker's write must be under way at the same time
        started(term)
    job = _job(root, started_at_the_barrier)
    persist_jobs([job])
    job.wal.close()
    assert job.error is None
    power_cut(root, "drop", 3)
    node = OsDisk(root)
    assert node.read_file(f"streams/ORDERS/raft/{GROUP_MARKER}") == marker_contents(GROUP, "n1")
    assert GroupRecord.open(node, node_existed=True).on_open(GROUP, formatted=False, empty=True, assigned_index=None)


@pytest.mark.parametrize("failing", ["marker", "record"])
def test_an_error_of_either_fails_the_job_once_the_other_finished(tmp_path, monkeypatch, failing):
    root = str(tmp_path / "node")
    finished = []
    real_write_atomic = OsDisk.write_atomic

    def write_atomic(self, path, data):
        if path == GROUP_MARKER:
            if failing == "marker":
                raise OSError("marker: disk full")
            real_write_atomic(self, path, data)
            finished.append("marker")
            return
        real_write_atomic(self, path, data)
    monkeypatch.setattr(OsDisk, "write_atomic", write_atomic)

    def started(term: int) -> None:
        if failing == "record":
            raise OSError("record: disk full")
        finished.append("record")
    job = _job(root, started)
    persist_jobs([job])
    job.wal.close()
    assert isinstance(job.error, OSError) and failing in str(job.error)
    assert finished == ["record" if failing == "marker" else "marker"]


def test_without_a_driver_choice_they_run_one_after_the_other_marker_first(tmp_path, monkeypatch):
    root = str(tmp_path / "node")
    order = []
    real_write_atomic = OsDisk.write_atomic

    def write_atomic(self, path, data):
        real_write_atomic(self, path, data)
        if path == GROUP_MARKER:
            order.append(("marker", threading.get_ident()))
    monkeypatch.setattr(OsDisk, "write_atomic", write_atomic)
    job = _job(root, lambda term: order.append(("record", threading.get_ident())))
    persist.sync_work(job.wal, job.disk, job.work)
    job.wal.close()
    assert order == [("marker", threading.get_ident()), ("record", threading.get_ident())]


def test_the_witness_is_written_beside_the_marker_and_the_record_after_the_segments_fsync(tmp_path, monkeypatch):
    root = str(tmp_path / "node")
    record = _record(root)
    barrier = threading.Barrier(3, timeout=BARRIER_DEADLINE_S)
    calls = []
    started = started_fn(record, GROUP)
    assert started is not None
    real_write_atomic, real_sync_log, real_sync_witness = OsDisk.write_atomic, Wal.sync_log, Wal.sync_witness

    def write_atomic(self, path, data):
        if path == GROUP_MARKER:
            barrier.wait()
        real_write_atomic(self, path, data)

    def sync_log(self):
        real_sync_log(self)
        calls.append("log")

    def sync_witness(self):
        calls.append("witness")
        barrier.wait()  # the marker's and the record's writes must be under way at the same time
        real_sync_witness(self)
    monkeypatch.setattr(OsDisk, "write_atomic", write_atomic)
    monkeypatch.setattr(Wal, "sync_log", sync_log)
    monkeypatch.setattr(Wal, "sync_witness", sync_witness)

    def started_at_the_barrier(term: int) -> None:
        barrier.wait()
        started(term)
    job = _job(root, started_at_the_barrier)
    persist_jobs([job])
    job.wal.close()
    assert job.error is None
    assert calls == ["log", "witness"]
    power_cut(root, "drop", 3)
    _, recovered = Wal.open(OsDisk(root).sub("streams/ORDERS/raft"))
    assert recovered.hard_state.current_term == 2 and not recovered.repairing and not recovered.reasons


def test_the_simulators_order_is_segment_witness_marker_record(tmp_path, monkeypatch):
    root = str(tmp_path / "node")
    order = []
    real_write_atomic, real_sync_log, real_sync_witness = OsDisk.write_atomic, Wal.sync_log, Wal.sync_witness

    def write_atomic(self, path, data):
        real_write_atomic(self, path, data)
        if path == GROUP_MARKER:
            order.append("marker")
    monkeypatch.setattr(OsDisk, "write_atomic", write_atomic)
    monkeypatch.setattr(Wal, "sync_log", lambda self: (real_sync_log(self), order.append("log")))
    monkeypatch.setattr(Wal, "sync_witness", lambda self: (real_sync_witness(self), order.append("witness")))
    job = _job(root, lambda term: order.append("record"))
    persist.sync_work(job.wal, job.disk, job.work)
    job.wal.close()
    assert order == ["log", "witness", "marker", "record"]
