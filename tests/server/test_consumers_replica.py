"""The replica side of consumers: `StreamAdapter` + `ConsumerReplica` applying a stream log with CONSUMER
entries (unit tests: no network, no trio).

Method: one log of real stream entries (MSGS from `entries.encode_msgs`, CONSUMER from
`entries.encode_consumer(consumer.encode_ops(...))`) is fed, as a Raft group would feed it, to several
`StreamAdapter`s over MemStores — the replicas. Checked: replicas fed the same entries hold equal
consumer sets and remove the same messages at the same index (work-queue and interest retention);
the consumers travel in the stream snapshot's `extra` through InstallSnapshot, a drift resync and a
recovery; a CONSUMER entry's outcome is the consumer set's result; a malformed CONSUMER entry stops the
apply; a replica whose store is not current removes nothing but keeps its consumer state.
"""

from __future__ import annotations

import json

import pytest

from jsraft.consumer import (
    AckOp, ApplyResult as ConsumerApplied, CreateOp, DeliveredOp, MalformedConsumerOps, TermOp, encode_ops,
)
from jsraft.jsapi.stream_config import parse_stream_config
from jsraft.raft.types import Entry
from jsraft.replica.stream_adapter import StreamAdapter
from jsraft.store.memstore import MemStore
from jsraft.stream import CatchupSession, Finding, FindingKind, StreamStateMachine, serve_catchup, store_config_for
from jsraft.stream import entries as stream_entries

NOW = 1_700_000_000_000_000_000


def adapter(retention: str = "workqueue") -> StreamAdapter:
    raw = json.dumps({"name": "S", "subjects": ["s.>"], "retention": retention}).encode()
    config, raw = parse_stream_config(raw)
    replica = StreamAdapter(StreamStateMachine(MemStore(store_config_for(config)), config, raw))
    replica.recovery_target = 0  # open: a snapshot restored from now on is the leader's
    return replica


class Log:
    """The stream group's log; `feed` applies what was appended to every replica given."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.last_seq = 0

    def _append(self, data: bytes) -> Entry:
        entry = Entry(index=len(self.entries) + 1, term=1, data=data)
        self.entries.append(entry)
        return entry

    def msgs(self, *subjects: str) -> Entry:
        first = self.last_seq + 1
        batch = [(s.encode(), b"", f"m{first + i}".encode(), NOW + first + i, b"", 0) for i, s in enumerate(subjects)]
        self.last_seq += len(subjects)
        return self._append(stream_entries.encode_msgs(first, batch))

    def ops(self, *ops) -> Entry:
        return self._append(stream_entries.encode_consumer(encode_ops(list(ops))))


def create(name: str, **config) -> CreateOp:
    body = {"durable_name": name, "ack_policy": "explicit", **config}
    return CreateOp(name=name, config=json.dumps(body).encode(), created_ns=NOW)


def delivered(name: str, *seqs: int, count: int = 1) -> DeliveredOp:
    return DeliveredOp(name=name, records=tuple((seq, seq, count, NOW) for seq in seqs))


def seqs_in(replica: StreamAdapter) -> list[int]:
    store, found, seq = replica.machine.store, [], 1
    while seq <= store.state().last_seq:
        try:
            found.append(store.load(seq).seq)
        except Exception:
            pass
        seq += 1
    return found


def test_replicas_fed_one_log_hold_equal_consumers_and_remove_acked_work_queue_messages():
    log, replicas = Log(), [adapter() for _ in range(3)]
    log.ops(create("W"))
    log.msgs("s.a", "s.b", "s.c", "s.d")
    log.ops(delivered("W", 1, 2, 3))
    ack = log.ops(AckOp(name="W", seqs=(1, 3)))
    log.ops(TermOp(name="W", seqs=(2,)))
    for replica in replicas:
        results = replica.apply(log.entries)
        outcome = results[ack.index - 1]
        assert isinstance(outcome, ConsumerApplied)  # what the proposer of the ACK entry is answered
        assert outcome.acked == (("W", (1, 3)),) and outcome.removable == (1, 3)
    assert all(seqs_in(replica) == [4] for replica in replicas)
    keys = {replica.consumers.consumers.key() for replica in replicas}
    assert len(keys) == 1
    state = replicas[0].consumers.entries["W"].state
    assert (state.delivered_stream_seq, state.ack_floor_stream_seq, state.num_ack_pending) == (3, 3, 0)
    assert replicas[0].consumers.removed == 3


def test_interest_stream_keeps_only_what_a_consumer_still_needs():
    log, replica = Log(), adapter("interest")
    log.msgs("s.a")  # no consumer: not kept
    log.ops(create("A"), create("B", filter_subject="s.b"))
    log.msgs("s.a", "s.b")  # 2 is A's, 3 is A's and B's
    replica.apply(log.entries)
    assert seqs_in(replica) == [2, 3]
    replica.apply([log.ops(delivered("A", 2, 3)), log.ops(AckOp(name="A", seqs=(2, 3)))])
    assert seqs_in(replica) == [3]  # B still needs 3
    replica.apply([log.ops(DeliveredOp(name="B", records=((3, 1, 1, NOW),))), log.ops(AckOp(name="B", seqs=(3,)))])
    assert seqs_in(replica) == []


def install(follower: StreamAdapter, leader: StreamAdapter, data: bytes, *, resync_index: int | None = None) -> None:
    """InstallSnapshot (or a resync at `resync_index`), then the range catch-up from the leader."""
    if resync_index is None:
        follower.restore(data)
    else:
        follower.begin_resync(resync_index, data)
    pending = follower.plan
    if pending is not None:
        session = CatchupSession(follower.machine, pending.plan.group, snapshot_index=pending.index)
        request = session.start(pending.plan)
        while request is not None:
            request = session.on_chunk(serve_catchup(leader.machine, request))
        follower.release()


def test_consumers_travel_in_the_snapshot_through_install_and_resync():
    log, leader = Log(), adapter()
    log.ops(create("W"), create("V", filter_subject="s.v"))
    log.msgs("s.a", "s.b", "s.v")
    log.ops(delivered("W", 1, 2))
    log.ops(AckOp(name="W", seqs=(1,)))
    leader.apply(log.entries)
    snapshot = leader.snapshot()

    installed = adapter()
    install(installed, leader, snapshot)
    assert installed.consumers.consumers == leader.consumers.consumers
    assert installed.machine.applied_index == leader.machine.applied_index

    # A replica that applied the log but whose consumer state went wrong takes the leader's at resync.
    drifted = adapter()
    drifted.apply(log.entries)
    drifted.consumers.entries["W"].state.pending.clear()
    assert drifted.consumers.consumers != leader.consumers.consumers
    drifted.machine.mark_drifted(Finding(kind=FindingKind.content_mismatch, first=1, last=1))
    install(drifted, leader, leader.machine.snapshot(extra=leader.consumers.snapshot_extra()),
            resync_index=leader.machine.applied_index)
    assert drifted.consumers.consumers == leader.consumers.consumers

    # Entries after the snapshot keep applying to the restored set.
    after = log.ops(AckOp(name="W", seqs=(2,)))
    for replica in (leader, installed, drifted):
        replica.apply([after])
    assert installed.consumers.consumers == leader.consumers.consumers == drifted.consumers.consumers
    assert seqs_in(installed) == seqs_in(leader) == [3]


def test_recovery_from_an_own_snapshot_restores_the_consumers():
    log, replica = Log(), adapter()
    log.ops(create("W"))
    log.msgs("s.a", "s.b")
    log.ops(delivered("W", 1, 2))
    replica.apply(log.entries)
    snapshot = replica.snapshot()
    reopened = StreamAdapter(StreamStateMachine(replica.machine.store, replica.machine.config,
                                                replica.machine.raw_config))
    reopened.restore(snapshot)  # recovery_target None: this replica's own snapshot, at open
    assert reopened.consumers.consumers == replica.consumers.consumers


def test_a_replica_not_current_keeps_consumer_state_but_removes_nothing():
    log, healthy, drifted = Log(), adapter(), adapter()
    log.ops(create("W"))
    log.msgs("s.a", "s.b")
    log.ops(delivered("W", 1, 2))
    healthy.apply(log.entries)
    drifted.apply(log.entries)
    drifted.machine.mark_drifted(Finding(kind=FindingKind.content_mismatch, first=1, last=1))
    ack = log.ops(AckOp(name="W", seqs=(1, 2)))
    healthy.apply([ack])
    drifted.apply([ack])
    assert seqs_in(healthy) == [] and seqs_in(drifted) == [1, 2]
    assert healthy.consumers.consumers == drifted.consumers.consumers


def test_a_malformed_consumer_entry_stops_the_apply():
    log, replica = Log(), adapter()
    replica.apply([log.ops(create("W"))])
    before = replica.consumers.consumers.key()
    bad = log._append(stream_entries.encode_consumer(b"\x01\x01\x00\xff"))
    with pytest.raises(MalformedConsumerOps):
        replica.apply([bad])
    assert replica.consumers.consumers.key() == before
