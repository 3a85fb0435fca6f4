"""`AuditWish`: a replica that recovered or was repaired keeps asking for an audit until it reported one.

Method: drive the value directly, as `AuditRunner` and the simulator's repair step do — `want` at the
repair's applied index, `due` with the machine's health, `asked` after a leader took a request,
`taken` with the leader's applied index when a leader took a request, `on_reported` for each AUDIT the
replica reported — and check when asking is due. The case that made this
necessary (simulator `--app consumer` seed 10410) is the second test: the AUDIT the replica asked for was
covered by an InstallSnapshot, so the replica never reported it, and a leader taking the request must not
end the wish.
"""

from __future__ import annotations

from jsraft.replica.audit_wish import AuditWish


def test_a_fresh_wish_is_not_due() -> None:
    wish = AuditWish()
    assert not wish.wanted and not wish.due(current=True) and not wish.due(current=False)


def test_a_taken_request_does_not_end_the_wish_only_a_reported_audit_after_it_does() -> None:
    wish = AuditWish()
    wish.want(236)  # caught up (unverified) at index 236
    assert wish.due(current=True)
    wish.asked = True  # the leader took the request and proposed an AUDIT at 237 ...
    wish.on_reported(234)  # ... an older audit, replayed late, answers nothing
    assert wish.wanted and wish.due(current=True)  # 237 was skipped by a snapshot at 238: ask again
    wish.on_reported(237)
    assert not wish.wanted and not wish.due(current=True)


def test_an_asked_wish_waits_while_the_replica_could_not_report() -> None:
    wish = AuditWish()
    wish.want(10)
    assert wish.due(current=False)  # the first ask goes out whatever the health (a recovery's audit)
    wish.asked = True
    assert not wish.due(current=False) and wish.due(current=True)


def test_a_later_want_raises_the_index_and_asks_again() -> None:
    wish = AuditWish()
    wish.want(50)
    wish.asked = True
    wish.want(40)  # never lowers the index
    assert wish.after_index == 50 and not wish.asked
    wish.on_reported(50)
    assert wish.wanted
    wish.want(70)
    wish.taken(65)
    wish.on_reported(60)  # answered the first wish, not the second
    assert wish.wanted
    wish.on_reported(71)
    assert not wish.wanted


def test_only_an_audit_after_a_taken_request_answers_and_the_leaders_index_raises_it() -> None:
    """Seeds 398 and 986: a catch-up served by a leader that had applied up to 300 ended at 290; an AUDIT
    at 291, already in flight, was reported — but an audit below the leader's index cannot settle that
    catch-up, and it ended the wish while the replica stayed unjudged."""
    wish = AuditWish()
    wish.want(290)
    wish.on_reported(291)  # in flight before any leader took this wish's request: answers nothing
    assert wish.wanted and wish.due(current=True)
    wish.taken(300)  # the leader took the request at its applied index 300: its AUDIT comes after
    assert wish.asked and wish.after_index == 300
    wish.on_reported(295)
    assert wish.wanted
    wish.on_reported(301)
    assert not wish.wanted


def test_a_leading_replica_drops_its_wish() -> None:
    wish = AuditWish()
    wish.want(5)
    wish.drop()
    assert not wish.wanted


def test_a_report_while_unjudged_keeps_the_wish_for_another_audit():
    """Invariant 5: the verdict on an unjudged store may never come; the wish stays until another audit."""
    wish = AuditWish()
    wish.want(10)
    wish.taken(12)
    assert wish.on_reported(13, unjudged=True) and wish.wanted and wish.after_index == 13
    wish.taken(13)
    assert not wish.on_reported(14) and not wish.wanted  # judged by then: the wish is answered
    assert not wish.on_reported(15, unjudged=False) and not wish.wanted
