"""The per-message shortcuts of the leader's fetch/ack path give the same answers as the general way.

Method: `ack_target` (the three fields the leader's ack path reads) against `parse_ack_subject` on
Hypothesis-built subjects — valid v1 and v2 forms and every kind of broken one: None exactly together,
the same fields otherwise; `parse_ack_body` of a plain ack is the shared `PLAIN_ACK` whatever the buffer
type. Delivery of an unfiltered consumer, which reads a run (`store.load_run`) and tries
`store.load(next_seq)` before `load_next`, is compared with a leader whose store answers `load` with
NoMessageFound and `load_run` with nothing always (so it goes the general way): same deliveries over interior deletes, and past a damaged sequence whose `load` raises
`DamagedSequence` while `load_next` passes it over (as FileStore does once the record is detached). A
filtered consumer on a FileStore reads runs where its filters match at least half of the block (counted
reads) and delivers, over blocks of one subject and of several with deletes, what the general way does.
"""

from __future__ import annotations

import hypothesis.strategies as st
from consumer_kit import SECOND, Cluster, store_with
from hypothesis import given, settings

from jsraft.consumer import ConsumerLeader, ack_reply_subject, parse_ack_body, parse_ack_subject
from jsraft.consumer.acks import PLAIN_ACK, AckKind, ack_target
from jsraft.disk import OsDisk
from jsraft.errors import DamagedSequence, NoMessageFound
from jsraft.store import StoreConfig
from jsraft.store.filestore import FileStore

T0 = 5_000 * SECOND
_num = st.one_of(st.integers(min_value=0, max_value=2**64).map(str), st.sampled_from(["", "-1", "x", "１", "²", "1.5"]))
_name = st.one_of(st.text(alphabet="abcXYZ_-09", min_size=1, max_size=6), st.just(""))


@st.composite
def ack_subjects(draw) -> str:
    numbers = [draw(_num) for _ in range(5)]
    stream, consumer = draw(_name), draw(_name)
    form = draw(st.sampled_from(["v1", "v2", "short", "prefix"]))
    if form == "v1":
        return ".".join(["$JS", "ACK", stream, consumer, *numbers])
    if form == "v2":
        return ".".join(["$JS", "ACK", draw(st.sampled_from(["_", "hub"])), "ACC", stream, consumer, *numbers,
                         "tok"])
    if form == "short":
        return ".".join(["$JS", "ACK", stream, consumer, *numbers[:draw(st.integers(0, 4))]])
    return ".".join([draw(st.sampled_from(["$JS.ACKS", "$JS.NAK", "JS.ACK"])), stream, consumer, *numbers])


@settings(max_examples=400, deadline=None)
@given(ack_subjects())
def test_ack_target_agrees_with_parse_ack_subject(subject):
    full, target = parse_ack_subject(subject), ack_target(subject)
    assert (full is None) == (target is None)
    if full is not None:
        assert target == (full.stream, full.consumer, full.stream_seq)


def test_ack_target_of_a_reply_subject_the_leader_made():
    subject = ack_reply_subject("S", "C", 2, 17, 40, 1_700_000_000_000_000_000, 3)
    assert ack_target(subject) == ("S", "C", 17)


def test_a_plain_ack_is_one_shared_value():
    for body in (b"", b"+ACK", b"+OK", bytearray(b"+ACK"), memoryview(b"+OK")):
        assert parse_ack_body(body) is PLAIN_ACK
    assert PLAIN_ACK.kind is AckKind.ACK
    assert parse_ack_body(b"+ACK ") is None  # anything else still takes the general way
    assert parse_ack_body(b"+TERM").kind is AckKind.TERM


class GeneralWay:
    """A store whose `load` never finds anything: the leader then always goes through `load_next`."""

    def __init__(self, store) -> None:
        self.store = store

    def __getattr__(self, name):
        return getattr(self.store, name)

    def load(self, seq):
        raise NoMessageFound(f"no message at {seq}")

    def load_run(self, seq, count, filters=None):
        return []  # a run that stops at once: the caller takes `load_next`


class DamagedAt:
    """A store where `seq` is damaged: `load` raises DamagedSequence and `load_next` passes it over."""

    def __init__(self, store, seq: int) -> None:
        self.store, self.damaged = store, seq

    def __getattr__(self, name):
        return getattr(self.store, name)

    def load(self, seq):
        if seq == self.damaged:
            raise DamagedSequence(seq, "corrupt")
        return self.store.load(seq)

    def load_next(self, filters, seq):
        msg = self.store.load_next(filters, seq)
        return self.store.load_next(filters, seq + 1) if msg.seq == self.damaged else msg

    def load_run(self, seq, count, filters=None):
        # As FileStore's run (fs_run invariant 2): it stops before the damaged record.
        run = self.store.load_run(seq, count, filters)
        return [msg for msg in run if msg.seq < self.damaged] if seq <= self.damaged else run


def deliveries(store, batch: int = 3, **fields) -> list[tuple[int, int]]:
    """(stream seq, consumer seq) of every delivery of a new explicit-ack consumer with `fields`, `batch` a pass."""
    cluster = Cluster(store)
    cluster.create("C", ack_policy="explicit", **fields)
    leader = ConsumerLeader("S", cluster.set.consumers["C"], T0)
    out = []
    while True:
        plan = leader.next_deliveries(store, T0, batch)
        if not plan.deliveries:
            return out
        out += [(d.stream_seq, d.consumer_seq) for d in plan.deliveries]
        cluster.apply(*plan.ops)


def test_unfiltered_delivery_over_interior_deletes_is_the_general_way():
    store = store_with(["a"] * 12)
    for seq in (1, 4, 5, 9, 12):
        store.delete(seq)
    fast = deliveries(store)
    assert fast == deliveries(GeneralWay(store))
    assert [s for s, _ in fast] == [2, 3, 6, 7, 8, 10, 11]


def test_a_damaged_sequence_is_passed_over_as_the_general_way_does():
    store = store_with(["a"] * 6)
    assert deliveries(DamagedAt(store, 3)) == deliveries(GeneralWay(DamagedAt(store, 3)))
    assert [s for s, _ in deliveries(DamagedAt(store, 3))] == [1, 2, 4, 5, 6]


class CountingReads:
    """A store that counts the calls the delivery makes: runs and message-by-message reads."""

    def __init__(self, store) -> None:
        self.store, self.runs, self.singles = store, 0, 0

    def __getattr__(self, name):
        return getattr(self.store, name)

    def load(self, seq):
        self.singles += 1
        return self.store.load(seq)

    def load_next(self, filters, seq):
        self.singles += 1
        return self.store.load_next(filters, seq)

    def load_run(self, seq, count, filters=None):
        self.runs += 1
        return self.store.load_run(seq, count, filters)


def filtered_deliveries(store, filters: list[str], batch: int = 50) -> list[tuple[int, int]]:
    return deliveries(store, batch, filter_subjects=filters, max_ack_pending=10_000)


def file_store(tmp_path, subjects: list[str]):
    store = FileStore.open(OsDisk(str(tmp_path)), StoreConfig.from_dict({"name": "S", "block_size": 64 * 1024}))
    for i, subject in enumerate(subjects):
        store.append(i + 1, subject, b"", b"p" * 200, T0 + i)
    return store


def test_a_filtered_consumer_reads_runs_where_its_filter_matches_most_of_the_block(tmp_path):
    # nats-py's `pull_subscribe("orders.new", durable=...)` on a stream of that one subject: the pass
    # reads by runs, as for an unfiltered consumer, not one `load_next` per message.
    # (No interior deletes: `num_pending` would walk the store with `load_next`, which is counted too.)
    store = file_store(tmp_path, ["orders.new"] * 700)
    counting = CountingReads(store)
    fast = filtered_deliveries(counting, ["orders.new"])
    assert fast == filtered_deliveries(GeneralWay(store), ["orders.new"])
    assert [s for s, _ in fast] == list(range(1, 701)) and len(store.blocks) == 3
    # One run per plan of 50, a plan that ends with a block taking a second one; `load_next` only where a
    # run stops at once (the end of the store).
    assert counting.runs <= 700 // 50 + len(store.blocks) + 1 and counting.singles <= 2
    store.close()


def test_a_filtered_consumer_over_mixed_blocks_delivers_what_the_general_way_does(tmp_path):
    # Blocks of one subject (a run), blocks of several (message by message), deletes in both.
    subjects = ["a.x"] * 320 + ["a.x", "b.y", "a.z"] * 200 + ["b.y"] * 300 + ["a.x"] * 100
    store = file_store(tmp_path, subjects)
    for seq in (2, 319, 400, 401, 1000, 1200):
        store.delete(seq)
    assert len(store.blocks) > 3
    for filters in (["a.x"], ["a.*"], ["b.y"], ["a.z", "b.y"], [">"]):
        counting = CountingReads(store)
        got = filtered_deliveries(counting, filters)
        assert got == filtered_deliveries(GeneralWay(store), filters)
        wanted = [seq for seq in range(1, len(subjects) + 1)
                  if seq not in (2, 319, 400, 401, 1000, 1200)
                  and any(f == ">" or f == subjects[seq - 1] or (f.endswith(".*") and
                          subjects[seq - 1].startswith(f[:-1])) for f in filters)]
        assert [s for s, _ in got] == wanted
    store.close()
