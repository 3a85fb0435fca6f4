"""Cluster routing without sockets: the `$route` wire format, the interest sync state machines, and
`Routes` on an in-memory mesh with refused and lost frames.

Method: the wire format round-trips every frame kind and refuses malformed bytes with
`TransportProtocolError` (route_wire invariants 1 and 2). `PeerView` is driven frame by frame: gaps,
foreign epochs, missing STATE chunks and wrong digests must ask for a resync and keep the old entries
(route_interest invariant 3). Then three `Routes` run on `route_kit.Mesh`, where the test moves every
frame itself: messages reach exactly the interested nodes, queue groups get one member in the cluster
with local members first, a routed message is never forwarded again, internal subscriptions stay local,
and after refused or silently lost interest frames (the two ways the real transport loses frames) every
view converges again within a digest tick or two — checked by comparing each node's view of a peer with
that peer's advertised set. Digest ticks pass on trio's `autojump_clock`.
"""

from __future__ import annotations

import collections

import pytest

from jsraft.server.nats.route_interest import InterestSet, LocalInterest, PeerView
from jsraft.server.nats.route_wire import (
    STATE_CHUNK_BYTES_MAX, Digest, Interest, Kind, Msgs, Resync, RoutedMsg, decode, encode_delta, encode_digest,
    encode_msg, encode_msgs, encode_resync, encode_state,
)
from jsraft.transport.errors import TransportProtocolError
from route_kit import Mesh, kind_of

# --- Wire format ----------------------------------------------------------------------------------------


def msg(*args) -> bytes:
    """A MSGS frame of one message."""
    return encode_msgs([encode_msg(*args)])


def test_messages_round_trip_with_and_without_reply_headers_and_queues():
    batch = decode(encode_msgs([
        encode_msg(b"orders.eu", None, (), None, b"body"),
        encode_msg(b"a.b", b"_INBOX.x\xff", ("workers", "audit.q"), b"NATS/1.0\r\n\r\n", b""),
        encode_msg(b"a", None, (), b"", b"x"),
    ]))
    assert batch == Msgs([RoutedMsg("orders.eu", b"orders.eu", None, (), None, b"body"),
                          RoutedMsg("a.b", b"a.b", b"_INBOX.x\xff", ("workers", "audit.q"), b"NATS/1.0\r\n\r\n", b""),
                          RoutedMsg("a", b"a", None, (), b"", b"x")])
    assert decode(encode_msgs([])) == Msgs([])


def test_interest_frames_round_trip_and_a_large_state_is_chunked():
    entries = [((f"s.{i}.>", "q" if i % 2 else ""), i + 1) for i in range(20_000)]
    frames = encode_state(7, 100, entries)
    assert len(frames) > 1 and all(len(f) <= STATE_CHUNK_BYTES_MAX + 64 for f in frames)
    decoded = [decode(f) for f in frames]
    assert [(d.seq, d.first, d.last) for d in decoded] == \
        [(100 + i, i == 0, i == len(frames) - 1) for i in range(len(frames))]
    assert {k: w for d in decoded for k, w in d.entries.items()} == dict(entries)
    assert decode(encode_state(7, 1, [])[0]) == Interest(Kind.STATE, 7, 1, True, True, {})
    delta = [decode(f) for f in encode_delta(9, 5, [(("a.*", ""), 0), (("b", "w"), 3)])]
    assert delta == [Interest(Kind.DELTA, 9, 5, False, False, {("a.*", ""): 0, ("b", "w"): 3})]
    assert decode(encode_digest(1, 2, 3, 2**64 - 1)) == Digest(1, 2, 3, 2**64 - 1)
    assert decode(encode_resync()) == Resync()


@pytest.mark.parametrize("payload, why", [
    (b"", "truncated"),
    (b"\x09", "unknown route frame kind"),
    (encode_resync() + b"x", "trailing"),
    (msg(b"a.>.b", None, (), None, b""), "invalid subject"),
    (msg(b"a..b", None, (), None, b""), "invalid subject"),
    (msg(b"\xff", None, (), None, b""), "UTF-8"),
    (msg(b"a", None, ("bad queue",), None, b""), "invalid queue"),
    (msg(b"a", None, (), None, b"")[:5] + b"\x08" + msg(b"a", None, (), None, b"")[6:], "undefined flag"),
    (msg(b"a", None, (), b"hdr", b"")[:-4], "truncated"),
    (msg(b"a", None, (), None, b"xy") + b"z", "trailing"),
    (encode_msgs([])[:1] + b"\x02\x00\x00\x00" + encode_msg(b"a", None, (), None, b""), "cannot fit"),
    (encode_msgs([encode_msg(b"a", None, (), None, b"")] * 2)[:-1], "truncated"),
    (encode_state(1, 1, [(("a", ""), 0)])[0], "weight 0 below 1"),
    (encode_state(1, 1, [(("a b", ""), 1)])[0], "invalid subject"),
    (encode_delta(1, 1, [(("a", ""), 1)])[0][:-1], "truncated"),
    (encode_delta(1, 1, [])[0][:-4] + b"\xff\xff\xff\x00", "cannot fit"),
    (encode_digest(1, 1, 1, 1)[:-1], "truncated"),
])
def test_malformed_frames_are_protocol_errors(payload, why):
    with pytest.raises(TransportProtocolError, match=why):
        decode(payload)


@pytest.mark.parametrize("subject", [b"t.a.>", b"t.*.b", b"*"])
def test_a_message_published_on_wildcard_tokens_travels(subject):
    """A client may publish on `t.a.>` (nats-server routes it to `t.*.>`): the peer must take it, not
    close the link over it."""
    (routed,) = decode(msg(subject, None, (), None, b"x")).messages  # the fast path (no queue groups)
    assert (routed.subject, routed.payload) == (subject.decode(), b"x")
    (queued,) = decode(msg(subject, None, ("q",), None, b"y")).messages  # the general path
    assert (queued.subject, queued.queues) == (subject.decode(), ("q",))


# --- Interest sets and the receiver's state machine ------------------------------------------------------


def test_digest_does_not_depend_on_order_and_local_weights():
    one, other = InterestSet(), InterestSet()
    for key, weight in [(("a", ""), 1), (("b", "q"), 3), (("c.>", ""), 1)]:
        one.set(key, weight)
    for key, weight in [(("c.>", ""), 1), (("b", "q"), 5), (("a", ""), 1), (("b", "q"), 3), (("x", ""), 1)]:
        other.set(key, weight)
    other.set(("x", ""), 0)
    assert one.weights == other.weights and one.digest == other.digest
    local = LocalInterest()
    assert local.change(("a", ""), 1) and not local.change(("a", ""), 1)  # plain: weight 1 however many
    assert local.change(("w", "q"), 1) and local.change(("w", "q"), 1)  # queue: one per member
    assert local.take_pending() == {("a", ""): 1, ("w", "q"): 2} and local.take_pending() == {}
    assert not local.change(("a", ""), -1) and local.change(("a", ""), -1)
    assert local.pending == {("a", ""): 0} and dict(local.advertised.items()) == {("w", "q"): 2}


def state(epoch, seq, entries, first=True, last=True):
    return Interest(Kind.STATE, epoch, seq, first, last, entries)


def delta(epoch, seq, entries):
    return Interest(Kind.DELTA, epoch, seq, False, False, entries)


def test_peer_view_applies_in_sequence_and_asks_for_a_resync_otherwise():
    view = PeerView(entries_max=10)
    changes, lost = view.on_interest(state(5, 1, {("a", ""): 1, ("b", "q"): 2}))
    assert not lost and sorted(changes) == [(("a", ""), 0, 1), (("b", "q"), 0, 2)] and view.synced
    assert view.on_interest(delta(5, 2, {("a", ""): 0, ("c", ""): 1})) == \
        ([(("a", ""), 1, 0), (("c", ""), 0, 1)], False)
    # A gap: nothing applied, the old entries kept, a resync asked; later deltas are refused too.
    assert view.on_interest(delta(5, 4, {("d", ""): 1})) == ([], True)
    assert not view.synced and dict(view.interest.items()) == {("b", "q"): 2, ("c", ""): 1}
    assert view.on_interest(delta(5, 5, {("e", ""): 1})) == ([], True)
    # The STATE that answers the resync replaces everything (a foreign epoch, as after a restart).
    changes, lost = view.on_interest(state(6, 9, {("c", ""): 1, ("f", ""): 1}))
    assert not lost and sorted(changes) == [(("b", "q"), 2, 0), (("f", ""), 0, 1)]
    assert view.on_interest(delta(5, 10, {("g", ""): 1})) == ([], True)  # the old epoch's delta


def test_peer_view_gathers_state_chunks_and_drops_an_incomplete_state():
    view = PeerView(entries_max=10)
    view.on_interest(state(1, 1, {("old", ""): 1}))
    assert view.on_interest(state(1, 2, {("a", ""): 1}, last=False)) == ([], False)
    assert view.on_interest(state(1, 3, {("b", ""): 1}, first=False, last=False)) == ([], False)
    assert dict(view.interest.items()) == {("old", ""): 1}  # nothing replaced before the last chunk
    changes, lost = view.on_interest(state(1, 4, {("c", ""): 1}, first=False))
    assert not lost and dict(view.interest.items()) == {("a", ""): 1, ("b", ""): 1, ("c", ""): 1}
    view.on_interest(state(1, 5, {("x", ""): 1}, last=False))
    assert view.on_interest(state(1, 7, {("y", ""): 1}, first=False)) == ([], True)  # chunk 6 lost
    assert view.on_interest(state(1, 8, {("z", ""): 1}, first=False)) == ([], True)  # no FIRST since
    assert dict(view.interest.items()) == {("a", ""): 1, ("b", ""): 1, ("c", ""): 1}


def test_peer_view_checks_digests_and_bounds_its_entries():
    sender = LocalInterest()
    sender.change(("a", ""), 1)
    view = PeerView(entries_max=3)
    view.on_interest(state(1, 1, dict(sender.advertised.items())))
    good = Digest(1, 1, len(sender.advertised), sender.advertised.digest)
    assert not view.check(good)
    assert view.check(good._replace(digest=good.digest ^ 1)) and not view.synced
    view.on_interest(state(1, 2, dict(sender.advertised.items())))
    assert view.check(good._replace(seq=3))  # a frame after seq 2 never arrived
    with pytest.raises(TransportProtocolError, match="more than 3"):
        view.on_interest(state(1, 4, {(f"s{i}", ""): 1 for i in range(4)}))


# --- Routes on an in-memory mesh ----------------------------------------------------------------------


def in_sync(mesh: Mesh) -> bool:
    """Every node's view of every linked peer equals what that peer advertises."""
    for name, routes in mesh.routes.items():
        for peer in mesh.names:
            if peer == name or frozenset((name, peer)) not in mesh.links:
                continue
            if not routes.synced(peer) or routes.advertised_by(peer) != mesh.routes[peer].local.advertised.weights:
                return False
    return True


async def test_messages_reach_interested_nodes_once_and_are_never_forwarded_again():
    mesh = Mesh(["n1", "n2", "n3"])
    mesh.connect_all()
    star, full, other = mesh.subscribe("n2", "orders.*"), mesh.subscribe("n2", "orders.>"), \
        mesh.subscribe("n3", "orders.eu.new")
    local = mesh.subscribe("n1", "orders.>")
    mesh.flush()
    assert mesh.routes["n1"].interested_peers("orders.eu") == {"n2": 2}
    assert mesh.publish("n1", "orders.eu", b"1", reply="_INBOX.r", headers=b"NATS/1.0\r\nA: b\r\n\r\n")
    assert mesh.publish("n1", "orders.eu.new", b"2")
    assert not mesh.publish("n1", "nobody.here", b"3")
    assert star.got == [(b"orders.eu", b"_INBOX.r", b"NATS/1.0\r\nA: b\r\n\r\n", b"1")]
    assert full.payloads() == [b"1", b"2"] and other.payloads() == [b"2"] and local.payloads() == [b"1", b"2"]
    stats = {name: routes.stats for name, routes in mesh.routes.items()}
    assert (stats["n1"].msgs_forwarded, stats["n2"].msgs_received, stats["n3"].msgs_received) == (3, 2, 1)
    assert stats["n2"].msgs_forwarded == stats["n3"].msgs_forwarded == 0  # invariant 1: no loops


async def test_queue_groups_get_one_member_in_the_cluster_local_members_first():
    mesh = Mesh(["n1", "n2", "n3"], seed=3)
    mesh.connect_all()
    members = {"n2a": mesh.subscribe("n2", "jobs.*", "workers"), "n2b": mesh.subscribe("n2", "jobs.>", "workers"),
               "n3": mesh.subscribe("n3", "jobs.run", "workers")}
    plain = mesh.subscribe("n3", "jobs.run")
    mesh.flush()
    assert dict(mesh.routes["n1"].local.advertised.items()) == {}
    assert {sub.weight for sub in mesh.routes["n1"].remote.match("jobs.run").queues[0]} == {1}
    for i in range(300):
        mesh.publish("n1", "jobs.run", b"%d" % i)
    got = collections.Counter(p for sub in members.values() for p in sub.payloads())
    assert sorted(got.values()) == [1] * 300 and len(plain.got) == 300
    share = {name: len(sub.got) for name, sub in members.items()}
    assert all(count > 50 for count in share.values()), share  # n2 holds 2 of 3 members, n3 one
    assert 150 < share["n2a"] + share["n2b"] < 250, share
    here = mesh.subscribe("n1", "jobs.run", "workers")
    mesh.flush()
    for i in range(20):
        mesh.publish("n1", "jobs.run", b"local %d" % i)
    assert len(here.got) == 20 and sum(len(sub.got) for sub in members.values()) == 300
    assert len(plain.got) == 320  # plain interest on n3 still gets every message
    # From n2, its own members are preferred; n1's member and n3's get nothing.
    for i in range(20):
        mesh.publish("n2", "jobs.run", b"n2 %d" % i)
    assert len(here.got) == 20 and len(members["n3"].got) == share["n3"]


async def test_internal_subscriptions_are_not_advertised_and_get_no_routed_message():
    mesh = Mesh(["n1", "n2"])
    mesh.connect_all()
    dispatched = []
    clients = mesh.clients["n2"]
    clients.dispatch_internal = lambda sub, *args: dispatched.append(sub.subject) or True  # type: ignore
    clients.subscribe_internal("$JS.API.>", lambda msg: None)  # type: ignore[arg-type,return-value]
    clients.subscribe_internal("ORDERS.*", lambda msg: None)  # type: ignore[arg-type,return-value]
    watcher = mesh.subscribe("n2", "ORDERS.*")
    mesh.flush()
    assert dict(mesh.routes["n2"].local.advertised.items()) == {("ORDERS.*", ""): 1}
    assert mesh.routes["n1"].interested_peers("$JS.API.INFO") == {}
    assert not mesh.publish("n1", "$JS.API.INFO", b"", reply="_INBOX.1")  # nobody: no-responders
    assert mesh.publish("n1", "ORDERS.new", b"x")
    assert watcher.payloads() == [b"x"] and dispatched == []
    assert clients.route(None, "ORDERS.new", None, None, b"y") and dispatched == ["ORDERS.*"]  # local: yes


async def test_reply_interest_arrives_before_the_request_it_answers():
    mesh = Mesh(["n1", "n2"])
    mesh.connect_all()
    service = mesh.subscribe("n2", "svc")
    mesh.flush()
    inbox = mesh.subscribe("n1", "_INBOX.abc.*")  # no flush: forward must send the SUB first
    assert mesh.publish("n1", "svc", b"?", reply="_INBOX.abc.1")
    assert service.got[0][1] == b"_INBOX.abc.1"
    assert mesh.publish("n2", "_INBOX.abc.1", b"answer") and inbox.payloads() == [b"answer"]


async def test_refused_interest_frames_are_resent_as_a_state_at_the_next_tick(autojump_clock):
    mesh = Mesh(["n1", "n2", "n3"])
    mesh.connect_all()
    mesh.refuse = lambda origin, to, payload: kind_of(payload) is Kind.DELTA and to == "n1"
    sub = mesh.subscribe("n2", "late.>")
    mesh.flush()
    assert mesh.routes["n1"].interested_peers("late.x") == {} and mesh.routes["n3"].interested_peers("late.x")
    mesh.refuse = lambda *_: False
    mesh.subscribe("n2", "later")  # the dirty peer gets no delta, only the state
    mesh.flush()
    assert mesh.routes["n1"].interested_peers("later") == {}
    await mesh.tick()
    assert in_sync(mesh) and mesh.routes["n2"].stats.states_sent == 3  # two links, one resend
    assert mesh.publish("n1", "late.x", b"m") and sub.payloads() == [b"m"]


async def test_silently_lost_interest_frames_are_found_by_gap_or_digest_and_resynced(autojump_clock):
    mesh = Mesh(["n1", "n2", "n3"])
    mesh.connect_all()
    lost: list[bytes] = []

    def lose_one_delta(origin, to, payload):
        if kind_of(payload) is Kind.DELTA and to == "n1" and not lost:
            lost.append(payload)
            return True
        return False

    mesh.lose = lose_one_delta
    first = mesh.subscribe("n2", "gap.one")
    mesh.flush()
    second = mesh.subscribe("n2", "gap.two")
    mesh.flush()  # n1 sees a gap, asks for a resync and gets a state in the same pump
    assert lost and in_sync(mesh) and mesh.routes["n1"].stats.resyncs_requested == 1
    assert mesh.publish("n1", "gap.one", b"1") and mesh.publish("n1", "gap.two", b"2")
    assert first.payloads() == [b"1"] and second.payloads() == [b"2"]
    # The last delta before a quiet spell is lost: only the digest can tell.
    lost.clear()
    mesh.unsubscribe("n2", first)
    mesh.flush()
    assert mesh.routes["n1"].interested_peers("gap.one") == {"n2": 1} and not in_sync(mesh)
    await mesh.tick()
    assert in_sync(mesh) and mesh.routes["n1"].interested_peers("gap.one") == {}
    assert mesh.routes["n1"].stats.resyncs_requested == 2


async def test_random_loss_always_converges_after_quiet_ticks(autojump_clock):
    import random

    rng = random.Random(11)
    mesh = Mesh(["n1", "n2", "n3"], seed=11)
    mesh.connect_all()
    mesh.refuse = lambda *_: rng.random() < 0.15
    mesh.lose = lambda *_: rng.random() < 0.15
    subs: dict[str, list] = {name: [] for name in mesh.names}
    for step in range(400):
        name = rng.choice(mesh.names)
        if subs[name] and rng.random() < 0.4:
            mesh.unsubscribe(name, subs[name].pop(rng.randrange(len(subs[name]))))
        else:
            queue = rng.choice([None, None, "q1", "q2"])
            subs[name].append(mesh.subscribe(name, rng.choice(["a", "a.*", "a.>", "b.c", ">"]), queue))
        if step % 7 == 0:
            mesh.flush()
        if step % 29 == 0:
            await mesh.tick()
    mesh.refuse = mesh.lose = lambda *_: False
    for _ in range(3):  # digest -> resync -> state, with the resync rate limit
        await mesh.tick()
    assert in_sync(mesh)
    stats = [routes.stats for routes in mesh.routes.values()]
    assert sum(s.resyncs_requested for s in stats) > 10 and sum(s.states_sent for s in stats) > 20, stats


async def test_link_down_drops_a_peers_interest_and_a_restart_resyncs():
    mesh = Mesh(["n1", "n2"])
    mesh.connect_all()
    mesh.subscribe("n2", "r.>")
    here = mesh.subscribe("n1", "back")
    mesh.flush()
    assert mesh.routes["n1"].interested_peers("r.x") == {"n2": 1}
    mesh.down("n1", "n2")
    assert mesh.routes["n1"].interested_peers("r.x") == {} and len(mesh.routes["n1"].remote) == 0
    assert not mesh.publish("n1", "r.x", b"lost")  # nobody reachable: no-responders territory
    # n2 restarts: a new epoch and no subscriptions; its old interest must not come back.
    mesh.start("n2")
    fresh = mesh.subscribe("n2", "r.new")
    mesh.up("n1", "n2")
    mesh.pump()
    assert in_sync(mesh) and mesh.routes["n1"].interested_peers("r.x") == {}
    assert mesh.publish("n1", "r.new", b"a") and fresh.payloads() == [b"a"]
    assert mesh.publish("n2", "back", b"b") and here.payloads() == [b"b"]


async def test_a_peer_advertising_without_bound_is_refused():
    mesh = Mesh(["n1", "n2"])
    mesh.routes["n1"].entries_max = 5
    mesh.connect_all()
    for i in range(6):
        mesh.subscribe("n2", f"s.{i}")
    with pytest.raises(TransportProtocolError, match="more than 5"):
        mesh.flush()
