"""Consumers over a store that is ahead of the entry being applied, or damaged (issue #6, bugs 1, 2, 5).

Method: deterministic unit tests, no network or trio. (1) The leader resolves a CREATE's start over its
store (`ConsumerSet.create_op`); the same op applied by a replica whose store already holds later
messages (a restart's replay, a catch-up from a further source) must start the consumer at the same
place — for every deliver policy that reads the store. Before the fix the CREATE carried no start and the
replica computed it from its own store. (2) A PURGE applied by a replica whose store a later entry had
already purged further must move the consumers to the entry's floor, not the store's first seq
(`StreamAdapter` + `ConsumerReplica`, the production composition). (3) A damaged record met while
resolving a start position is counted as a message, never raised (sim seed 24 of `--app consumer`).
(4) `num_pending` gives the answers of a plain walk (randomized stores, filters, cursors, deletes) while a
filtered consumer below the stream's head reads no message at all. (5) A consumer deletion replayed over
a store that already holds later messages (interest retention) removes none of them: a restarted replica
ends with the same store and consumers as one that applied the log in order (sim seeds 66, 168).
"""

from __future__ import annotations

import json
import random

import pytest

from jsraft.consumer import ConsumerSet, CreateOp, DeleteOp, DeliveredOp, decode_ops, encode_ops
from jsraft.consumer.position import is_last_at_start, num_pending, start_position
from jsraft.errors import DamagedSequence, NoMessageFound
from jsraft.jsapi.consumer_config import parse_consumer_config
from jsraft.jsapi.stream_config import parse_stream_config
from jsraft.raft.types import Entry
from jsraft.replica.stream_adapter import StreamAdapter
from jsraft.disk import OsDisk
from jsraft.store import StoreConfig
from jsraft.store.base import FaultKind
from jsraft.store.filestore import FileStore
from jsraft.store.memstore import MemStore
from jsraft.stream import StreamStateMachine, store_config_for
from jsraft.stream import entries as stream_entries

SECOND = 1_000_000_000
T0 = 1_700_000_000 * SECOND
SUBJECTS = ["s.a", "s.b", "s.a", "s.c", "s.b", "s.a", "s.c", "s.d"]


def _store(count: int) -> MemStore:
    store = MemStore()
    for seq in range(1, count + 1):
        store.append(seq, SUBJECTS[(seq - 1) % len(SUBJECTS)], b"", b"m", T0 + seq * SECOND)
    return store


def _config(**fields):
    fields = {"durable_name": "c", "ack_policy": "explicit", **fields}
    return parse_consumer_config(json.dumps(fields).encode())


POLICIES = [
    {"deliver_policy": "new"},
    {"deliver_policy": "last"},
    {"deliver_policy": "last", "filter_subject": "s.b"},
    {"deliver_policy": "last_per_subject", "filter_subject": "s.>"},
    {"deliver_policy": "last_per_subject", "filter_subject": "s.a"},
    {"deliver_policy": "by_start_time", "opt_start_time": "2023-11-14T22:13:24Z"},  # T0 + 4 s: seq 4
]


@pytest.mark.parametrize("fields", POLICIES, ids=lambda f: "-".join(str(v) for v in f.values()))
def test_a_create_starts_where_the_leader_resolved_it_on_a_replica_whose_store_is_ahead(fields) -> None:
    config, raw = _config(**fields)
    leader = ConsumerSet(_store(5))
    op = leader.create_op("c", config, raw, T0)
    assert op.start_seq is not None and decode_ops(encode_ops([op])) == [op]
    leader.apply(7, encode_ops([op]))
    ahead = ConsumerSet(_store(8))  # the replica's store already holds messages 6..8 of later entries
    ahead.apply(7, encode_ops([op]))
    assert ahead.key() == leader.key()
    expected = start_position(config, _store(5))
    entry = ahead.consumers["c"]
    assert (entry.state.delivered_stream_seq, entry.start_last_seq) == expected


def test_a_create_of_an_older_build_still_decodes_and_resolves_its_start_at_apply() -> None:
    config, raw = _config(deliver_policy="new")
    old = CreateOp(name="c", config=raw, created_ns=T0)  # kind 1: no start carried
    body = encode_ops([old])
    assert body[3] == 1 and decode_ops(body) == [old]
    consumers = ConsumerSet(_store(5))
    consumers.apply(1, body)
    assert consumers.consumers["c"].state.delivered_stream_seq == 5


# --- PURGE: the floor comes from the entry -------------------------------------------------------


def _adapter() -> StreamAdapter:
    config, raw = parse_stream_config(json.dumps({"name": "S", "subjects": ["s.>"]}).encode())
    replica = StreamAdapter(StreamStateMachine(MemStore(store_config_for(config)), config, raw))
    replica.recovery_target = 0
    return replica


def _log() -> list[Entry]:
    _, raw = _config(deliver_policy="all")
    datas = [
        stream_entries.encode_consumer(encode_ops([CreateOp(name="c", config=raw, created_ns=T0, start_seq=0)])),
        stream_entries.encode_msgs(1, [(b"s.a", b"", b"m%d" % i, T0 + i, b"", 0) for i in range(1, 5)]),
        stream_entries.encode_consumer(encode_ops([DeliveredOp(name="c", records=((1, 1, 1, T0), (2, 2, 1, T0)))])),
        stream_entries.encode_purge(None, 3, None, 4),  # every subject below seq 3
    ]
    return [Entry(index=i + 1, term=1, data=data) for i, data in enumerate(datas)]


def test_a_purge_moves_consumers_to_the_entrys_floor_even_when_the_store_was_purged_further() -> None:
    log = _log()
    current, ahead = _adapter(), _adapter()
    current.apply(log)
    ahead.apply(log[:3])
    ahead.machine.store.compact(5)  # what a later entry had done to this store before a restart's replay
    ahead.apply(log[3:])
    assert ahead.consumers.consumers.key() == current.consumers.consumers.key()
    state = current.consumers.entries["c"].state
    assert (state.delivered_stream_seq, state.ack_floor_stream_seq, state.num_ack_pending) == (2, 2, 0)


# --- A damaged record met while resolving a start ------------------------------------------------


class _Damaged:
    """A MemStore whose record `bad` fails verification on every read (a read-time bit flip)."""

    def __init__(self, store: MemStore, bad: int) -> None:
        self.store, self.bad = store, bad

    def __getattr__(self, name: str):
        return getattr(self.store, name)

    def _check(self, msg):
        if msg.seq == self.bad:
            raise DamagedSequence(msg.seq, "corrupt")
        return msg

    def load(self, seq: int):
        return self._check(self.store.load(seq))

    def load_last(self, subject_filter: str = ">"):
        return self._check(self.store.load_last(subject_filter))

    def load_next(self, filters, start_seq: int):
        return self._check(self.store.load_next(filters, start_seq))


@pytest.mark.parametrize("fields", POLICIES, ids=lambda f: "-".join(str(v) for v in f.values()))
def test_a_damaged_record_never_escapes_start_position(fields) -> None:
    config, _ = _config(**fields)
    for bad in range(1, 9):
        delivered, _ = start_position(config, _Damaged(_store(8), bad))  # type: ignore[arg-type]
        assert 0 <= delivered <= 8
    config, _ = _config(deliver_policy="last")
    assert start_position(config, _Damaged(_store(8), 8)) == (7, 0)  # type: ignore[arg-type]


# --- num_pending -----------------------------------------------------------------------------------


def _walk(store: MemStore, filters: list[str], after: int) -> int:
    count, seq = 0, after + 1
    while True:
        try:
            seq = store.load_next(filters or None, seq).seq + 1
        except NoMessageFound:
            return count
        count += 1


def test_num_pending_answers_what_a_walk_answers() -> None:
    rng = random.Random(6)
    choices = [[], ["s.a"], ["s.*"], ["s.a", "s.b"], ["s.>", "s.a"], ["s.z"], ["s.c", "s.d"]]
    for _ in range(300):
        count = rng.randint(0, 40)
        store = _store(count)
        for seq in rng.sample(range(1, count + 1), k=rng.randint(0, count)) if count else []:
            store.delete(seq)
        if count and rng.random() < 0.3:
            store.compact(rng.randint(1, count))
        filters = rng.choice(choices)
        for after in range(0, count + 2):
            assert num_pending(store, filters, after) == _walk(store, filters, after), (count, filters, after)


class _CountingFiles:
    """A FileStore whose `load_next` calls are counted."""

    def __init__(self, store) -> None:
        self.store, self.loads = store, 0

    def __getattr__(self, name):  # type: ignore[no-untyped-def]
        return getattr(self.store, name)

    def load_next(self, filters, start_seq):  # type: ignore[no-untyped-def]
        self.loads += 1
        return self.store.load_next(filters, start_seq)


def test_num_pending_over_a_file_store_with_deletes_answers_the_walk_without_reading(tmp_path) -> None:
    # A consumer halfway through a stream with one interior delete walked half of it with `load_next` on
    # every pull pass (~250 µs of server CPU per delivered message in a fetch loop over 30,000).
    store = FileStore.open(OsDisk(str(tmp_path)), StoreConfig(name="S", block_size=64 * 1024))
    rng = random.Random(7)
    for seq in range(1, 1501):
        store.append(seq, SUBJECTS[seq % len(SUBJECTS)], b"", b"m" * 100, T0 + seq)
    for seq in rng.sample(range(1, 1501), k=200):
        store.delete(seq)
    store.compact(40)
    counting = _CountingFiles(store)
    for filters in ([], [">"], ["s.*"]):  # "s.*" matches every message: counted as unfiltered
        for after in (0, 39, 40, 41, 700, 1499, 1500, 1600):
            counting.loads = 0
            assert num_pending(counting, filters, after) == _walk(store, filters, after), (filters, after)  # type: ignore[arg-type]
            assert counting.loads == 0
    # A fault in the range: the walk answers, counting the damaged record as a message (invariant 3).
    live = next(seq for seq in range(900, 1000) if _walk(store, [], seq - 1) != _walk(store, [], seq))
    before = _walk(store, [], 500)
    store.fault_map.add(live, live, FaultKind.missing)
    assert num_pending(store, [], 500) == before
    store.close()


class _Counting(MemStore):
    loads = 0

    def load_next(self, filters, start_seq):  # type: ignore[no-untyped-def]
        type(self).loads += 1
        return super().load_next(filters, start_seq)


def test_num_pending_of_a_filtered_consumer_below_the_head_reads_no_message() -> None:
    store = _Counting()
    for seq in range(1, 2001):
        store.append(seq, SUBJECTS[seq % len(SUBJECTS)], b"", b"m", T0 + seq)
    _Counting.loads = 0
    assert num_pending(store, ["s.a"], 0) == 750
    assert _Counting.loads == 0
    assert num_pending(store, ["s.a"], 1990) == _walk(store, ["s.a"], 1990)
    _Counting.loads = 0
    num_pending(store, ["s.a"], 10)  # near the head: a walk of ~10 seqs below the cursor, not ~2000 above
    assert _Counting.loads <= 10


def test_num_pending_of_a_filter_matching_every_message_reads_no_message() -> None:
    """nats-py's `pull_subscribe(subject)` filters on the stream's one subject: counted as unfiltered."""
    store = _Counting()
    for seq in range(1, 2001):
        store.append(seq, "s.a", b"", b"m", T0 + seq)
    _Counting.loads = 0
    for filters in (["s.a"], ["s.*"], ["s.a", "s.>"]):
        assert num_pending(store, filters, 1000) == 1000 == _walk(store, filters, 1000)
    assert _Counting.loads == 3 * 1001  # the three walks of the check, none of num_pending's
    store.delete(1500)  # an interior delete: still exact
    assert num_pending(store, ["s.a"], 1000) == 999 == _walk(store, ["s.a"], 1000)


# --- Retention after a consumer deletion, on a store that is ahead --------------------------------


def test_a_consumer_deletion_replayed_over_a_store_ahead_removes_no_later_message() -> None:
    # Sim seeds 66 and 168 of `--app consumer`: an interest stream; consumer A is deleted (nothing needs
    # messages 1..2 then: removed), B is created, messages 3..4 are published for B. A replica restarting
    # with 3..4 already in its store replays the DELETE: the candidates must stop at the log's last seq
    # at that index (2), or 3..4 — not yet published as the log goes — are removed there for good.
    config, raw = parse_stream_config(json.dumps({"name": "S", "subjects": ["s.>"], "retention": "interest"}).encode())
    _, consumer_raw = _config(deliver_policy="all")

    def create(name: str, start: int) -> bytes:
        op = CreateOp(name=name, config=consumer_raw, created_ns=T0, start_seq=start)
        return stream_entries.encode_consumer(encode_ops([op]))

    def msgs(first: int, count: int) -> bytes:
        return stream_entries.encode_msgs(first, [(b"s.a", b"", b"m", T0 + first + i, b"", 0) for i in range(count)])

    datas = [create("A", 0), msgs(1, 2), stream_entries.encode_consumer(encode_ops([DeleteOp(name="A")])),
             create("B", 2), msgs(3, 2)]
    log = [Entry(index=i + 1, term=1, data=data) for i, data in enumerate(datas)]
    current = StreamAdapter(StreamStateMachine(MemStore(store_config_for(config)), config, raw))
    current.recovery_target = 0
    current.apply(log)
    assert current.machine.store.state().msgs == 2  # 3 and 4, kept for B
    store = MemStore(store_config_for(config))
    store.skip(1, 2)
    for seq in (3, 4):
        msg = current.machine.store.load(seq)
        store.append(seq, msg.subject, msg.headers, msg.payload, msg.timestamp_ns)
    restarted = StreamAdapter(StreamStateMachine(store, config, raw))  # replays from index 1 over 3..4
    restarted.recovery_target = 0
    restarted.apply(log)
    assert restarted.machine.store.state().agreement_key() == current.machine.store.state().agreement_key()
    assert restarted.consumers.consumers.key() == current.consumers.consumers.key()


def _is_last_by_definition(store, seq: int, subject: str, start_last_seq: int) -> bool:
    later = [s for s in range(seq + 1, start_last_seq + 1) if _live_subject(store, s) == subject]
    return not later


def _live_subject(store, seq: int):
    try:
        return store.load(seq).subject
    except NoMessageFound:
        return None


@pytest.mark.parametrize("kind", ["mem", "file"])
def test_is_last_at_start_is_the_definition(tmp_path, kind) -> None:
    rng = random.Random(11)
    for trial in range(40):
        if kind == "mem":
            store = MemStore()
        else:
            store = FileStore.open(OsDisk(str(tmp_path / str(trial))), StoreConfig(name="S", block_size=64 * 1024))
        count = rng.randint(1, 60)
        for seq in range(1, count + 1):
            store.append(seq, rng.choice(SUBJECTS), b"", b"m", T0 + seq)
        for seq in rng.sample(range(1, count + 1), k=rng.randint(0, count // 2)):
            store.delete(seq)
        for start_last_seq in {count, rng.randint(0, count), count // 2}:
            for seq in range(1, count + 1):
                subject = _live_subject(store, seq)
                if subject is not None and seq <= start_last_seq:
                    assert is_last_at_start(store, seq, subject, start_last_seq) == \
                        _is_last_by_definition(store, seq, subject, start_last_seq), (trial, seq, start_last_seq)
        store.close()


def test_is_last_at_start_reads_no_later_message_when_the_subject_ended_before_the_start() -> None:
    # A KV `keys()` (last_per_subject over every key) asked this of each key's every revision and found
    # the next revision by scanning the stream: a minute of server CPU for 5,000 keys written twice.
    store = _Counting()
    for seq in range(1, 2001):
        store.append(seq, f"k.{seq % 1000}", b"", b"m", T0 + seq)
    _Counting.loads = 0
    assert not is_last_at_start(store, 5, "k.5", 2000) and is_last_at_start(store, 1005, "k.5", 2000)
    assert _Counting.loads == 0
    assert is_last_at_start(store, 5, "k.5", 1000)  # its next one came after the start: looked for
