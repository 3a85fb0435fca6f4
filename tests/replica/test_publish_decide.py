"""`publish_pipeline.decide` / `InFlightBatches.decide_and_open`: the pump's decision, without the pump.

Method: a real `StreamLeader` over a real `StreamStateMachine` on a `MemStore` (the decision does not depend
on the store kind), asked to decide batches at an explicit time; no runtime, no trio. "Committing" an entry
is applying it to the machine at the next index, as the Raft group would, and settling its batch with the
`ApplyResult`, as the runtime's `on_settled` does. Each publish's `done` records its answer, so a test reads
what every publish was answered, and that nothing was decided when the batch was refused.
"""

from __future__ import annotations

import json

from jsraft.jsapi.stream_config import parse_stream_config
from jsraft.meta import StreamOffline
from jsraft.raft import NotLeader
from jsraft.replica.publish_pipeline import InFlightBatches, decide
from jsraft.store.base import StoreConfig
from jsraft.store.memstore import MemStore
from jsraft.stream import PubOutcome
from jsraft.stream.entries import MsgsBatch, decode_entry
from jsraft.stream.leader import StreamLeader
from jsraft.stream.machine import StreamStateMachine
from jsraft.stream.store_config import store_config_for

NOW = 1_700_000_000_000_000_000
UNKNOWN = RuntimeError("outcome unknown")


def _leader(**fields) -> StreamLeader:
    raw = json.dumps({"name": "ORDERS", "subjects": ["orders.>"], **fields}).encode()
    config, raw = parse_stream_config(raw)
    store = MemStore(store_config_for(config, StoreConfig(name=config.name)))
    return StreamLeader(StreamStateMachine(store, config, raw))


def _id(msg_id: str) -> bytes:
    return f"NATS/1.0\r\nNats-Msg-Id: {msg_id}\r\n\r\n".encode()


class Answers:
    def __init__(self) -> None:
        self.got: dict[str, object] = {}

    def queued(self, name: str, subject: str, headers: bytes = b"", payload: bytes = b"x"):
        def done(answer: object) -> None:
            assert name not in self.got, f"{name} answered twice"
            self.got[name] = answer
        return subject, headers, payload, done


def test_decide_refuses_without_a_leader_and_when_stopped_and_assigns_nothing():
    leader = _leader()
    refused = decide(None, [("orders.a", b"", b"x")], NOW, leader_id="n2", stopped_reason=None)
    assert isinstance(refused, NotLeader)
    stopped = decide(leader, [("orders.a", b"", b"x")], NOW, leader_id="n1", stopped_reason="consumer C needs level 3")
    assert isinstance(stopped, StreamOffline) and "level 3" in str(stopped)
    # Nothing was decided by the refusals: the first publish decided afterwards still gets seq 1.
    decision = decide(leader, [("orders.a", b"", b"x")], NOW, leader_id="n1", stopped_reason=None)
    assert decision.outcomes == [PubOutcome(1)]


def test_decide_runs_the_leaders_checks_and_returns_its_entries():
    leader = _leader(max_msg_size=64)
    decision = decide(leader, [("orders.a", b"", b"ok"), ("orders.a", b"", b"x" * 100),
                               ("orders.b", _id("m1"), b"ok"), ("orders.b", _id("m1"), b"ok")],
                      NOW, leader_id="n1", stopped_reason=None)
    codes = [o.error.err_code if o.error else (o.seq, o.duplicate) for o in decision.outcomes]
    assert codes == [(1, False), 10054, (2, False), (2, True)]  # size limit; a duplicate of one in flight
    [entry] = decision.entries
    batch = decode_entry(entry)
    assert isinstance(batch, MsgsBatch) and (batch.first_seq, batch.last_seq) == (1, 2)


def test_a_refused_batch_is_answered_whole_and_opens_nothing():
    answers, batches = Answers(), InFlightBatches(lambda: UNKNOWN)
    queued = [answers.queued("a", "orders.a"), answers.queued("b", "orders.b")]
    assert batches.decide_and_open(None, queued, NOW, leader_id="n3", stopped_reason=None) is None
    assert set(answers.got) == {"a", "b"} and all(isinstance(a, NotLeader) for a in answers.got.values())
    assert len(batches) == 0


def test_an_opened_batch_is_answered_from_its_applied_entry_and_a_duplicate_from_its_original():
    leader, answers, batches = _leader(max_msg_size=64), Answers(), InFlightBatches(lambda: UNKNOWN)
    queued = [answers.queued("a", "orders.a", _id("m1")), answers.queued("b", "orders.b", b"", b"y"),
              answers.queued("dup", "orders.a", _id("m1")), answers.queued("big", "orders.c", b"", b"x" * 100)]
    opened = batches.decide_and_open(leader, queued, NOW, leader_id="n1", stopped_reason=None)
    assert opened is not None
    batch, entries = opened
    assert len(entries) == 1 and len(batches) == 1
    batch.entries_open = 1
    batches.close(batch)
    assert answers.got == {}  # nothing is answered before its entry applied
    result = leader.machine.apply(1, entries[0])
    batches.settled(batch, None, result)
    assert answers.got["a"] == PubOutcome(1) and answers.got["b"] == PubOutcome(2)
    assert answers.got["dup"] == PubOutcome(1, duplicate=True)
    assert answers.got["big"].error.err_code == 10054  # refused by the decision, answered in its batch
    assert len(batches) == 0
