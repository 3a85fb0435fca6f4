"""`InterestWaits`, the node's registry of push consumers waiting for a subscriber, and its upkeep by the
consumer services (`ConsumerService` invariant 9).

Method: the unit tests drive the registry with stand-in owners (a `leading` table and a wake counter)
holding real `PushLeading`s over a consumer set built through the log: what `note`,
`sync`, `forget` and `matching` keep and return, and `check` refusing a registry that differs from the
full scan. The property test runs real `ConsumerService`s on stand-in replicas (the consumer state a
`ConsumerSet` over a MemStore, fed through the service's listener as the replica feeds it) and a stand-in
port holding the registry and a set of subscribed subjects; hypothesis draws sequences of push and pull
consumer creates, deliver subject updates, deletes, interest gained or lost (a subject subscribed or
unsubscribed, then the consumer's pass — `serve_push`, or the service serving applied messages), leadership
lost, gained and rebuilt, a consumer restarted from its state, and a replica closed (its task cancelled)
and opened again. After every step the registry must equal the full scan of the open services, no entry
may have been found stale, and `matching` must return, for every subject drawn, the services the old scan
(`awaits_interest` of every open replica) woke.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from jsraft import subjects
from jsraft.consumer import ConsumerSet, CreateOp, DeleteOp, encode_ops
from jsraft.errors import InvariantViolation
from jsraft.replica.advisories import AdvisoryLog
from jsraft.replica.consumer_push import PushLeading, make_leading, serve_push
from jsraft.server.groups.consumer_service import ConsumerService
from jsraft.server.groups.interest_waits import InterestWaits, waiting_scan
from jsraft.store.memstore import MemStore

NOW_NS = 5_000_000_000_000


class Cluster:
    """A consumer set over a MemStore with a few messages, changed through its log (as `consumer_kit`'s)."""

    def __init__(self, subjects_: list[str]) -> None:
        self.store = MemStore()
        for seq, subject in enumerate(subjects_, 1):
            self.store.append(seq, subject, b"", b"data", NOW_NS - 1_000_000_000 + seq)
        self.set = ConsumerSet(self.store)
        self.index = 0

    def apply(self, *ops: Any) -> Any:
        self.index += 1
        return self.set.apply(self.index, encode_ops(list(ops)))

    def create(self, name: str, **fields: Any) -> Any:
        config = json.dumps({"durable_name": name, **fields}).encode()
        return self.apply(CreateOp(name=name, config=config, created_ns=1))


def _leader(cluster: Cluster, name: str, deliver: str | None) -> Any:
    if deliver is None:
        cluster.create(name, ack_policy="explicit")
    else:
        cluster.create(name, deliver_subject=deliver, ack_policy="none")
    return make_leading("S", cluster.set.consumers[name], NOW_NS, nonce=lambda: "n")


class _Owner:
    """A stand-in consumer service: its table of leaders, and how often it was woken."""

    def __init__(self, stream: str, **leading: Any) -> None:
        self.stream, self.leading, self.woken = stream, dict(leading), 0

    def wake(self) -> None:
        self.woken += 1


def _open(owner: Any) -> bool:
    return True


# --- The registry's bookkeeping -------------------------------------------------------------------------


def test_a_new_push_consumer_waits_until_its_interest_turns_true_and_again_when_it_turns_false():
    cluster = Cluster(["a"])
    push = _leader(cluster, "P", "d.p")
    owner, waits = _Owner("S", P=push), InterestWaits()
    push.watch = lambda leading: waits.note(owner, leading)
    waits.note(owner, push)  # made: no interest before its first pass
    assert waits.entries() == {(owner, push)} and len(waits) == 1 and waits
    push.interest = True  # through `watch`: the property notes every change
    assert waits.entries() == set() and not waits
    push.interest = True  # no change: nothing noted
    assert not waits
    push.interest = False
    assert waits.entries() == {(owner, push)}
    waits.check([owner])


def test_sync_follows_the_owners_table_and_keeps_only_push_consumers_without_interest():
    cluster = Cluster(["a"])
    pull, p1, p2 = _leader(cluster, "L", None), _leader(cluster, "P1", "d.1"), _leader(cluster, "P2", "d.2")
    p2.interest = True  # no watch set: the registry learns it from `sync`
    owner, waits = _Owner("S", L=pull, P1=p1, P2=p2), InterestWaits()
    waits.sync(owner)
    assert waits.entries() == {(owner, p1)}
    del owner.leading["P1"]
    waits.sync(owner)
    assert not waits  # an owner with nothing waiting has no key left
    waits.check([owner])


def test_forget_drops_every_entry_of_a_closed_owner_and_no_other():
    cluster = Cluster(["a"])
    p1, p2 = _leader(cluster, "P1", "d.1"), _leader(cluster, "P2", "d.2")
    one, two, waits = _Owner("S1", P1=p1), _Owner("S2", P2=p2), InterestWaits()
    waits.sync(one)
    waits.sync(two)
    waits.forget(one)
    assert waits.entries() == {(two, p2)}


def test_matching_returns_each_open_owner_once_whose_waiting_consumer_the_subject_matches():
    cluster = Cluster(["a"])
    a1, a2, b = _leader(cluster, "A1", "d.a.1"), _leader(cluster, "A2", "d.a.2"), _leader(cluster, "B", "d.b")
    busy = _leader(cluster, "BUSY", "d.a.3")
    busy.interest = True  # has a subscriber: not woken by another
    one, two, closed = _Owner("S1", A1=a1, A2=a2, BUSY=busy), _Owner("S2", B=b), _Owner("S3", A=_leader(cluster, "A", "d.a.9"))
    waits = InterestWaits()
    for owner in (one, two, closed):
        waits.sync(owner)
    is_open = lambda owner: owner is not closed  # noqa: E731
    assert waits.matching("d.a.1", is_open) == [one]
    assert waits.matching("d.a.*", is_open) == [one]  # two of its consumers match: one wake
    assert waits.matching("d.>", is_open) == [one, two]
    assert waits.matching("d.a.3", is_open) == []  # its consumer has interest
    assert waits.matching("d.c", is_open) == [] and waits.matching("d", is_open) == []
    assert waits.matching("d.a.9", _open) == [closed]  # kept while closed to the caller (invariant 4)
    assert waits.stale == 0


def test_a_stale_entry_is_dropped_and_counted_never_returned():
    cluster = Cluster(["a"])
    gone, replaced, flipped = _leader(cluster, "G", "d.g"), _leader(cluster, "R", "d.r"), _leader(cluster, "F", "d.f")
    owner, waits = _Owner("S", G=gone, R=replaced, F=flipped), InterestWaits()
    waits.sync(owner)
    # Three removals missed (no `sync`, no `watch`): deleted, replaced by a new leader, gained interest.
    del owner.leading["G"]
    owner.leading["R"] = make_leading("S", cluster.set.consumers["R"], NOW_NS, nonce=lambda: "m")
    flipped.interest = True
    assert waits.matching(">", _open) == []
    assert waits.stale == 3 and not waits


def test_check_refuses_a_registry_that_misses_a_waiting_consumer_or_holds_an_extra_one():
    cluster = Cluster(["a"])
    p1, p2 = _leader(cluster, "P1", "d.1"), _leader(cluster, "P2", "d.2")
    owner, waits = _Owner("S", P1=p1), InterestWaits()
    with pytest.raises(InvariantViolation, match=r"missing \[\('S', 'P1'\)\]"):
        waits.check([owner])
    waits.note(owner, p1)
    waits.note(owner, p2)  # not in the owner's table
    with pytest.raises(InvariantViolation, match=r"extra \[\('S', 'P2'\)\]"):
        waits.check([owner])


# --- The services keep it exact (property) --------------------------------------------------------------


class _Port:
    """The stand-in hub: the registry, the subjects subscribed, and a sink for what is sent."""

    def __init__(self) -> None:
        self.waits = InterestWaits()
        self.subscribed: set[str] = set()

    def has_interest(self, subject: str) -> bool:
        return any(subjects.matches(sub, subject) for sub in self.subscribed)

    def publish(self, send: Any) -> None:
        pass

    def publish_all(self, sends: list[Any], now: bool = False) -> None:
        pass


class _Stream:
    """One stream's stand-in replica and the consumer set its log builds, with a real `ConsumerService`."""

    def __init__(self, name: str, port: _Port) -> None:
        self.cluster = Cluster(["m.1", "m.2", "m.3"])
        consumers = SimpleNamespace(entries=self.cluster.set.consumers, listener=None,
                                    machine=SimpleNamespace(last_seq=3))
        self.replica = SimpleNamespace(
            name=name, node_id="n1", peers=["n1"], repair=SimpleNamespace(advisories=AdvisoryLog("n1")),
            adapter=SimpleNamespace(consumers=consumers), config=SimpleNamespace(max_msg_size=-1),
            runtime=SimpleNamespace(clock=SimpleNamespace(wall_ns=lambda: NOW_NS)), closed=False, leader=None,
            store=self.cluster.store, stopped_reason=None)
        self.service = ConsumerService(self.replica)  # type: ignore[arg-type]
        self.service.port = port
        consumers.listener = self.service._on_applied  # as the replica's adapter calls it, leading or not

    def applied(self, result: Any) -> None:
        self.replica.adapter.consumers.listener(self.cluster.index, result)

    def lead(self, leading: bool) -> None:
        self.replica.leader = object() if leading else None  # a new StreamLeader each time: a rebuild
        self.service.follow(self.replica.leader)

    def close(self) -> None:
        """`StreamReplica.close`: marked closed, its tasks cancelled (the service's task ends)."""
        self.replica.closed = True

        async def cancelled_run() -> None:
            with trio.CancelScope() as scope:
                scope.cancel()
                await self.service.run()

        trio.run(cancelled_run)


NAMES = ["C0", "C1", "C2"]  # few names and subjects: steps meet the same consumer often
DELIVER = ["d.a", "d.b", "d.c.x"]
SUBSCRIBED = ["d.a", "d.*", "d.>", "e"]
STEPS = st.one_of(
    st.tuples(st.just("create_push"), st.integers(0, 1), st.sampled_from(NAMES), st.sampled_from(DELIVER)),
    st.tuples(st.just("create_pull"), st.integers(0, 1), st.sampled_from(NAMES), st.none()),
    st.tuples(st.just("delete"), st.integers(0, 1), st.sampled_from(NAMES), st.none()),
    st.tuples(st.just("subscribe"), st.integers(0, 1), st.sampled_from(NAMES), st.sampled_from(SUBSCRIBED)),
    st.tuples(st.just("unsubscribe"), st.integers(0, 1), st.sampled_from(NAMES), st.sampled_from(SUBSCRIBED)),
    st.tuples(st.just("messages_applied"), st.integers(0, 1), st.none(), st.none()),
    st.tuples(st.just("lead"), st.integers(0, 1), st.none(), st.booleans()),
    st.tuples(st.just("restart"), st.integers(0, 1), st.sampled_from(NAMES), st.none()),
    st.tuples(st.just("close_and_reopen"), st.integers(0, 1), st.none(), st.none()),
)


def _step(streams: list[_Stream], port: _Port, step: tuple[str, int, Any, Any]) -> None:
    kind, at, name, arg = step
    stream = streams[at]
    if kind == "create_push":  # a new consumer, or a deliver subject update of an existing push one
        entry = stream.cluster.set.consumers.get(name)
        if entry is None or entry.config.deliver_subject is not None:
            stream.applied(stream.cluster.create(name, deliver_subject=arg, ack_policy="none"))
    elif kind == "create_pull" and name not in stream.cluster.set.consumers:
        stream.applied(stream.cluster.create(name, ack_policy="explicit"))
    elif kind == "delete":
        stream.applied(stream.cluster.apply(DeleteOp(name=name)))
    elif kind in ("subscribe", "unsubscribe"):  # then the consumer's pass looks, as the service's task does
        (port.subscribed.add if kind == "subscribe" else port.subscribed.discard)(arg)
        leading = stream.service.leading.get(name)
        if type(leading) is PushLeading:
            serve_push(leading, stream.cluster.store, NOW_NS, port.has_interest(leading.deliver_subject))
    elif kind == "messages_applied":  # push consumers that keep up look for interest as messages apply
        stream.applied(None)
    elif kind == "lead":
        stream.lead(arg)
    elif kind == "restart":
        stream.service.restart_from_state(name)
    elif kind == "close_and_reopen":
        stream.close()
        streams[at] = _Stream(stream.replica.name, port)


def _old_scan(open_services: list[ConsumerService], subscribed: str) -> set[ConsumerService]:
    """What `ConsumerHub._on_subscription` woke before the registry: `awaits_interest` of every open replica."""
    return {service for service in open_services if any(
        type(leading) is PushLeading and not leading.interest and subjects.matches(subscribed, leading.deliver_subject)
        for leading in service.leading.values())}


@settings(max_examples=500)
@given(st.lists(STEPS, max_size=40))
def test_after_any_sequence_the_registry_equals_the_full_scan_of_the_open_services(steps):
    port = _Port()
    streams = [_Stream(f"S{i}", port) for i in range(2)]
    streams[0].lead(True)
    closed: list[ConsumerService] = []
    for step in steps:
        before = streams[step[1]].service
        _step(streams, port, step)
        if streams[step[1]].service is not before:
            closed.append(before)
        open_services = [stream.service for stream in streams]
        port.waits.check(open_services)
        assert not any(owner in closed for owner, _ in port.waits.entries())
        is_open = lambda service: service in open_services  # noqa: E731
        for subscribed in SUBSCRIBED:
            assert set(port.waits.matching(subscribed, is_open)) == _old_scan(open_services, subscribed)
        assert port.waits.stale == 0  # every removal was made when it happened, none found late


def test_waiting_scan_is_what_the_services_lead_without_interest():
    port = _Port()
    stream = _Stream("S", port)
    stream.lead(True)
    stream.applied(stream.cluster.create("P", deliver_subject="d.p", ack_policy="none"))
    stream.applied(stream.cluster.create("L", ack_policy="explicit"))
    assert waiting_scan([stream.service]) == {(stream.service, stream.service.leading["P"])}
    assert port.waits.entries() == waiting_scan([stream.service])
