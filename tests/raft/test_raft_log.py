"""RaftLog, the in-memory log view: terms, faulty placeholders, truncation, writes handed to storage.

Method: build logs directly and check each operation against the invariants in `log.py`'s docstring.
"""

from __future__ import annotations

import pytest

from jsraft.errors import InvariantViolation
from jsraft.raft.log import RaftLog
from jsraft.raft.types import Entry


def make_log(terms: list[int], *, faulty=(), commit=0, applied=0, snapshot=(0, 0)) -> RaftLog:
    snapshot_index, snapshot_term = snapshot
    entries = [Entry(index=snapshot_index + 1 + i, term=t, data=f"e{snapshot_index + 1 + i}".encode())
               for i, t in enumerate(terms)]
    return RaftLog(snapshot_index=snapshot_index, snapshot_term=snapshot_term, entries=entries,
                   faulty=set(faulty), commit_index=commit, applied_index=applied)


def test_term_at_covers_snapshot_entries_and_faulty():
    log = make_log([2, 2, 3], faulty={6}, snapshot=(4, 1))
    assert log.term_at(4) == 1  # the snapshot's
    assert log.term_at(3) is None  # compacted
    assert log.term_at(5) == 2
    assert log.term_at(6) is None  # faulty: untrusted
    assert log.term_at(7) == 3
    assert log.term_at(8) is None  # beyond the end
    assert log.verified_last_index() == 5


def test_find_conflict_by_term_skips_higher_terms_and_faulty():
    log = make_log([1, 1, 2, 2, 3, 3])
    assert log.find_conflict_by_term(6, 2) == (4, 2)
    assert log.find_conflict_by_term(6, 1) == (2, 1)
    assert log.find_conflict_by_term(6, 0) == (0, 0)
    log = make_log([1, 1, 2, 2, 3, 3], faulty={4})
    assert log.find_conflict_by_term(6, 5) == (3, 2)  # never hints at or past a faulty index


def test_next_known_term_skips_faulty_placeholders():
    log = make_log([2, 3, 3, 2], faulty={6, 7}, snapshot=(4, 1))  # 5@2, 6-7 faulty, 8@2
    assert log.next_known_term(5) == 2  # past the faulty run: entry 8
    assert log.next_known_term(4) == 2  # entry 5
    assert log.next_known_term(2) == 2  # from below the snapshot: the first entry after it
    assert log.next_known_term(8) is None  # nothing after the last entry
    assert make_log([2, 2], faulty={2}).next_known_term(1) is None  # only placeholders follow


def test_committed_entries_stop_before_the_first_faulty_one():
    log = make_log([1, 1, 1, 1], faulty={3}, commit=4)
    assert [e.index for e in log.committed_to_apply(100)] == [1, 2]
    log.replace_faulty(Entry(index=3, term=1, data=b"fixed"))
    assert [e.index for e in log.committed_to_apply(100)] == [1, 2, 3, 4]
    assert [e.index for e in log.committed_to_apply(2)] == [1, 2]


def test_truncation_never_removes_a_committed_entry():
    log = make_log([1, 1, 1], commit=2)
    with pytest.raises(InvariantViolation, match="rule 5"):
        log.truncate_from(2)
    log.truncate_from(3)
    assert log.last_index == 2


def test_writes_track_what_storage_holds():
    log = make_log([1, 1])  # restored: on disk
    assert log.take_writes() == (None, [], [])
    log.append([Entry(index=3, term=2), Entry(index=4, term=2)])
    truncate_from, entries, repaired = log.take_writes()
    assert truncate_from is None and [e.index for e in entries] == [3, 4] and not repaired
    log.mark_stable(entries[-1])
    assert log.stable_index == 4 and not log.has_writes()
    # A conflict below what storage holds must reach storage as a truncation.
    log.truncate_from(3)
    log.append([Entry(index=3, term=3)])
    truncate_from, entries, _ = log.take_writes()
    assert truncate_from == 3 and [e.index for e in entries] == [3]


def test_mark_stable_ignores_entries_replaced_meanwhile():
    log = make_log([1])
    log.append([Entry(index=2, term=1)])
    _, written, _ = log.take_writes()
    log.truncate_from(2)  # before the driver confirmed the write
    log.append([Entry(index=2, term=2)])
    log.mark_stable(written[-1])
    assert log.stable_index == 1  # the term-1 entry 2 is no longer ours
    truncate_from, entries, _ = log.take_writes()
    assert truncate_from == 2 and entries == [Entry(index=2, term=2)]


def test_repaired_faulty_entries_are_rewritten_in_place():
    log = make_log([1, 1, 1], faulty={2})
    log.replace_faulty(Entry(index=2, term=1, data=b"good"))
    truncate_from, entries, repaired = log.take_writes()
    assert truncate_from is None and entries == [] and repaired == [Entry(index=2, term=1, data=b"good")]
    assert not log.faulty and log.last_index == 3


def test_compaction_needs_applied_and_durable_entries():
    log = make_log([1, 1, 2], commit=3, applied=2)
    with pytest.raises(InvariantViolation):
        log.compact(3)  # not applied yet
    assert log.compact(2) == 1
    assert (log.snapshot_index, log.snapshot_term, log.first_index) == (2, 1, 3)


def test_snapshot_install_keeps_a_matching_suffix_and_drops_a_conflicting_one():
    log = make_log([1, 1, 2, 2], commit=1)
    log.install_snapshot(2, 1, keep_suffix=True)
    assert (log.snapshot_index, log.last_index, log.commit_index) == (2, 4, 2)
    log = make_log([1, 1, 2, 2], commit=1)
    log.install_snapshot(3, 3, keep_suffix=False)
    assert (log.snapshot_index, log.last_index, log.entries) == (3, 3, [])
    assert log.take_writes()[0] == 4  # storage drops what it held above the snapshot
    log = make_log([1, 1, 2, 2], commit=4)
    with pytest.raises(InvariantViolation, match="rule 5"):
        log.install_snapshot(3, 3, keep_suffix=False)
