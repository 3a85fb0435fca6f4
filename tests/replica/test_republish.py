"""`Republisher` (replica/republish.py) inside `StreamAdapter`: who republishes which applied entry.

Method: a real `StreamStateMachine` on a `MemStore`, its `StreamLeader` deciding real MSGS entries, and a
`StreamAdapter` applying them as Raft `Entry` values of a chosen term, with a `Republisher` whose
`leading_term` the test sets: the node leading the entry's term republishes it (invariant 1), a node
that does not lead, or leads a later term (a new leader applying its predecessor's entry), does not; a
stream without `republish` sends nothing; a message the transform cannot turn into a publishable
subject is stored and not sent (invariant 3). What is sent is read from the `send` callback.
"""

from __future__ import annotations

import json

from jsraft.jsapi.stream_config import parse_stream_config
from jsraft.raft.types import Entry
from jsraft.replica.consumer_pull import Send
from jsraft.replica.republish import Republisher, republish_headers
from jsraft.replica.stream_adapter import StreamAdapter
from jsraft.store.base import StoreConfig
from jsraft.store.memstore import MemStore
from jsraft.stream.leader import StreamLeader
from jsraft.stream.machine import StreamStateMachine
from jsraft.stream.store_config import store_config_for

NOW = 1_700_000_000_000_000_000


def _adapter(**fields) -> tuple[StreamAdapter, StreamLeader, list[Send], dict[str, int | None]]:
    config, raw = parse_stream_config(json.dumps({"name": "R", "subjects": ["in.>"], **fields}).encode())
    machine = StreamStateMachine(MemStore(store_config_for(config, StoreConfig(name="R"))), config, raw)
    adapter, sent, led = StreamAdapter(machine), [], {"term": None}
    adapter.republisher = Republisher(machine, lambda: led["term"])
    adapter.republisher.send = sent.append
    return adapter, StreamLeader(machine), sent, led


def _apply(adapter: StreamAdapter, leader: StreamLeader, term: int, *subjects: str) -> None:
    decision = leader.decide([(subject, b"", b"x") for subject in subjects], NOW)
    for data in decision.entries:
        adapter.apply([Entry(adapter.applied_index + 1, term, data=data)])


def test_the_leader_of_the_entrys_term_republishes_it_once_with_last_sequences():
    adapter, leader, sent, led = _adapter(republish={"src": "in.>", "dest": "out.>"}, max_msgs_per_subject=1)
    led["term"] = 3
    _apply(adapter, leader, 3, "in.a", "in.b", "in.a")
    assert [(s.subject, s.payload) for s in sent] == [("out.a", b"x"), ("out.b", b"x"), ("out.a", b"x")]
    assert sent[2].headers == republish_headers(b"", "R", "in.a", 3, NOW, 1, None)
    # A later entry: its predecessor (seq 3) is read from the store before this apply removes it (limit 1).
    _apply(adapter, leader, 3, "in.a")
    assert sent[3].headers == republish_headers(b"", "R", "in.a", 4, NOW, 3, None)


def test_a_follower_or_a_later_leader_does_not_republish():
    adapter, leader, sent, led = _adapter(republish={"src": "in.>", "dest": "out.>"})
    _apply(adapter, leader, 3, "in.a")  # not leading
    led["term"] = 4
    _apply(adapter, leader, 3, "in.b")  # leading a later term: the predecessor's entry
    assert sent == []
    _apply(adapter, leader, 4, "in.c")
    assert [s.subject for s in sent] == ["out.c"]
    assert sent[0].headers.endswith(b"Nats-Sequence: 3\r\nNats-Time-Stamp: 2023-11-14T22:13:20Z\r\n"
                                    b"Nats-Last-Sequence: 0\r\n\r\n")


def test_no_republish_configured_or_no_publishable_subject_sends_nothing():
    adapter, leader, sent, led = _adapter()
    led["term"] = 1
    _apply(adapter, leader, 1, "in.a")
    assert sent == [] and adapter.machine.last_seq == 1
    # A subject the republish source does not match: stored, not republished (nats-server suppresses it).
    adapter, leader, sent, led = _adapter(republish={"src": "in.a", "dest": "only.a"})
    led["term"] = 1
    _apply(adapter, leader, 1, "in.b", "in.a")
    assert [(s.subject, s.headers.split(b"Nats-Sequence: ")[1][:1]) for s in sent] == [("only.a", b"2")]
    assert adapter.machine.last_seq == 2


def test_headers_only_keeps_the_clients_headers_and_sizes_the_payload():
    block = republish_headers(b"NATS/1.0\r\nX-A: 1\r\n\r\n", "R", "in.a", 7, NOW + 5000, 2, 12)
    assert block == (b"NATS/1.0\r\nX-A: 1\r\nNats-Stream: R\r\nNats-Subject: in.a\r\nNats-Sequence: 7\r\n"
                     b"Nats-Time-Stamp: 2023-11-14T22:13:20.000005Z\r\nNats-Last-Sequence: 2\r\n"
                     b"Nats-Msg-Size: 12\r\n\r\n")
