"""`Sublist`: subject interest with `*`/`>` wildcards and queue groups.

Method: examples pin the NATS wildcard rules (`*` one token, `>` one or more trailing tokens) and queue
grouping; then a Hypothesis model test (bounded, derandomized) inserts and removes generated
subscriptions over a small token alphabet, so wildcards collide often, and after every step compares
`match` for generated literal subjects with a brute-force filter using `jsraft.subjects.matches`
(sublist invariant 1), checks the cache never returns a stale answer, and that removing everything leaves
an empty trie (invariant 2). Observers are checked by example (invariant 4). The second-sight cache
(invariant 3): by example, subjects matched once (reply inboxes) never enter the cache and leave a cached
subject in place, a subject matched twice does; a Hypothesis test interleaves changes with repeated probes
and compares every `match` with the uncached `walk`.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jsraft import subjects
from jsraft.server.nats.sublist import CACHE_SUBJECTS_MAX, Sublist


class S:
    """A subscription as the sublist sees one: a subject, a queue, identity."""

    def __init__(self, subject: str, queue: str | None = None) -> None:
        self.subject = subject
        self.queue = queue

    def __repr__(self) -> str:
        return f"S({self.subject!r}, {self.queue!r})"


def test_wildcards():
    sublist = Sublist()
    exact, star, full, root_full, mid = S("a.b"), S("a.*"), S("a.>"), S(">"), S("*.b.c")
    for sub in (exact, star, full, root_full, mid):
        sublist.insert(sub)
    assert set(sublist.match("a.b").plain) == {exact, star, full, root_full}
    assert set(sublist.match("a").plain) == {root_full}  # '>' needs at least one token after "a."
    assert set(sublist.match("a.b.c").plain) == {full, root_full, mid}
    assert set(sublist.match("x.b.c").plain) == {root_full, mid}
    assert sublist.match("a.b").queues == ()


def test_queue_groups_span_subjects():
    sublist = Sublist()
    q1, q2, q3, other = S("orders.*", "workers"), S("orders.new", "workers"), S("orders.>", "audit"), S("orders.new")
    for sub in (q1, q2, q3, other):
        sublist.insert(sub)
    result = sublist.match("orders.new")
    assert result.plain == (other,)
    assert sorted(map(set, result.queues), key=len) == [{q3}, {q1, q2}]


def test_insert_is_idempotent_and_remove_prunes():
    sublist = Sublist()
    sub = S("a.b.c")
    sublist.insert(sub)
    sublist.insert(sub)
    assert len(sublist) == 1
    assert sublist.match("a.b.c").plain == (sub,)
    assert sublist.remove(sub) and not sublist.remove(sub)
    assert len(sublist) == 0 and sublist._root.empty()
    assert sublist.remove(S("never.there")) is False
    assert sublist.match("a.b.c").plain == ()  # the cached answer was dropped on removal


def test_observers_see_each_change_once_after_it_is_made():
    sublist = Sublist()
    seen = []
    sublist.observers.append(lambda sub, added: seen.append((sub, added, len(sublist))))
    plain, member = S("a.b"), S("a.*", "q")
    sublist.insert(plain)
    sublist.insert(plain)  # already there: no change, no call
    sublist.insert(member)
    sublist.remove(plain)
    sublist.remove(plain)
    assert seen == [(plain, True, 1), (member, True, 2), (plain, False, 1)]


def test_cache_is_bounded():
    sublist = Sublist()
    sublist.insert(S(">"))
    for i in range(CACHE_SUBJECTS_MAX + 10):
        sublist.match(f"s.{i}")
    assert len(sublist._cache) <= CACHE_SUBJECTS_MAX
    assert len(sublist._seen) <= CACHE_SUBJECTS_MAX


def test_subjects_that_never_repeat_do_not_churn_the_cache():
    sublist = Sublist()
    inbox, stream = S("_INBOX.abc.*"), S("orders.>")
    sublist.insert(inbox)
    sublist.insert(stream)
    assert sublist.match("orders.1").plain == (stream,)
    assert sublist.match("orders.1").plain == (stream,)
    assert list(sublist._cache) == ["orders.1"]  # cached on its second match
    for n in range(CACHE_SUBJECTS_MAX * 2 + 5):
        assert sublist.match(f"_INBOX.abc.{n}").plain == (inbox,)
    assert list(sublist._cache) == ["orders.1"]  # a reply subject per message neither entered nor evicted
    sublist.insert(S("orders.1"))
    assert sublist._cache == {} and sublist._seen == set()  # a change clears both
    assert len(sublist.match("orders.1").plain) == 2


_tokens = st.sampled_from(["a", "b", "c"])
_filter_tokens = st.sampled_from(["a", "b", "c", "*"])
_filters = st.builds(
    lambda head, tail: ".".join(head + ([tail] if tail else [])),
    st.lists(_filter_tokens, min_size=1, max_size=3), st.sampled_from(["", ">"]),
) | st.just(">")
_literals = st.lists(_tokens, min_size=1, max_size=4).map(".".join)
_steps = st.lists(st.tuples(st.booleans(), _filters, st.none() | st.sampled_from(["q1", "q2"]), st.integers(0, 30)),
                  max_size=30)


def _step(sublist: Sublist, live: list[S], insert: bool, subject: str, queue: str | None, pick: int) -> None:
    """Insert a new subscription, or remove a live one (always insert when none is live)."""
    if insert or not live:
        sub = S(subject, queue)
        sublist.insert(sub)
        live.append(sub)
    else:
        assert sublist.remove(live.pop(pick % len(live)))


@settings(max_examples=200, derandomize=True, deadline=None, database=None)
@given(_steps, st.lists(_literals, min_size=1, max_size=6))
def test_match_equals_brute_force(steps, probes):
    sublist = Sublist()
    live: list[S] = []
    for insert, subject, queue, pick in steps:
        _step(sublist, live, insert, subject, queue, pick)
        assert len(sublist) == len(live)
        for probe in probes:
            result = sublist.match(probe)
            expected = [s for s in live if subjects.matches(s.subject, probe)]
            assert sorted(map(id, result.plain)) == sorted(id(s) for s in expected if s.queue is None)
            groups = {}
            for s in expected:
                if s.queue is not None:
                    groups.setdefault(s.queue, set()).add(id(s))
            assert sorted(map(sorted, (set(map(id, members)) for members in result.queues))) == \
                sorted(map(sorted, groups.values()))
    for sub in live:
        assert sublist.remove(sub)
    assert len(sublist) == 0 and sublist._root.empty()


_probes_with_repeats = st.lists(st.sampled_from(["a", "b", "c", "a.b", "a.b.c", "b.c", "c.a.b.a"]),
                                min_size=1, max_size=12)


@settings(max_examples=200, derandomize=True, deadline=None, database=None)
@given(st.lists(st.tuples(st.booleans(), _filters, st.none() | st.sampled_from(["q1", "q2"]),
                          st.integers(0, 30), _probes_with_repeats), max_size=20))
def test_cached_match_equals_uncached_walk(steps):
    sublist = Sublist()
    live: list[S] = []
    for insert, subject, queue, pick, probes in steps:
        _step(sublist, live, insert, subject, queue, pick)
        for probe in probes + probes:  # every probe at least twice, so the cached path answers too
            assert sublist.match(probe) == sublist.walk(probe)
