"""Atomic batch publish (ADR-50 at nats-server 2.12): the stager's checks, and the leader committing a batch
whole or not at all.

Method: `BatchStager.take` on sequences of batch messages at explicit times (its limits, its order of
refusals, idle abandonment); two stagers sharing one small `NodeBudget` (a node's several stream
leaders) refuse past the node's limits, and free their share when a batch commits, is abandoned, or the
leadership closes. The commit is driven through a real `StreamLeader` over two replicas on both
stores (`stream_kit.Group`): a batch staged across several decisions, interleaved with plain publishes,
is committed as one MSGS entry (checked by decoding the entries) whose messages every replica stores with
consecutive sequences; a batch whose last message fails a check (`discard: new` limits, an expected
sequence, a duplicate id) stores nothing and uses no sequence; a new leader knows no open batch. The answers
of a real nats-server to the same publishes are the differential oracle's (`ATOMIC_STEPS`).
"""

from __future__ import annotations

from stream_kit import NOW, Group, config_json, make_machine, pub

from jsraft.stream import batches
from jsraft.stream.entries import decode_entry
from jsraft.stream.leader import StreamLeader

SECOND = 1_000_000_000


def _found(batch_id: str, seq: str | None, commit: str | None = None) -> dict[str, str]:
    found = {batches.BATCH_ID: batch_id}
    if seq is not None:
        found[batches.BATCH_SEQUENCE] = seq
    if commit is not None:
        found[batches.BATCH_COMMIT] = commit
    return found


def test_the_stager_checks_in_nats_servers_order():
    stager, msg = batches.BatchStager(), ("s.a", b"", b"x")
    assert stager.take(_found("b", "1"), msg, False, NOW).err_code == 10174
    assert stager.take(_found("x" * 65, "1"), msg, True, NOW).err_code == 10179
    assert stager.take(_found("b", None), msg, True, NOW).err_code == 10175
    assert stager.take(_found("b", "2"), msg, True, NOW).err_code == 10176  # unknown batch
    assert stager.take(_found("b", "1001"), msg, True, NOW).err_code == 10199
    assert stager.take(_found("b", "1"), msg, True, NOW) is None and len(stager) == 1
    assert stager.take(_found("b", "3"), msg, True, NOW).err_code == 10176 and len(stager) == 0  # a gap abandons
    assert stager.take(_found("c", "1"), msg, True, NOW) is None
    assert stager.take(_found("c", "2", commit="eob"), msg, True, NOW).err_code == 10200 and len(stager) == 0
    assert stager.take(_found("d", "1"), msg, True, NOW) is None
    assert stager.take(_found("d", "2", commit="1"), msg, True, NOW) == ("d", [msg, msg]) and len(stager) == 0


def test_the_stager_bounds_what_it_holds():
    stager, msg = batches.BatchStager(), ("s.a", b"", b"x")
    for number in range(batches.PER_STREAM_MAX):
        assert stager.take(_found(f"b{number}", "1"), msg, True, NOW) is None
    assert stager.take(_found("one-more", "1"), msg, True, NOW).err_code == 10176
    # Idle for longer than the timeout: abandoned, the slots free again.
    assert stager.take(_found("late", "1"), msg, True, NOW + batches.TIMEOUT_NS + 1) is None and len(stager) == 1
    assert stager.take(_found("b0", "2"), msg, True, NOW + batches.TIMEOUT_NS + 2).err_code == 10176
    big = ("s.a", b"", b"x" * (batches.BYTES_MAX // 2 + 1))
    assert stager.take(_found("big", "1"), big, True, NOW) is None
    assert stager.take(_found("big", "2"), big, True, NOW).err_code == 10176  # past BYTES_MAX: abandoned


def test_the_node_budget_bounds_every_leader_of_a_node_together():
    budget, msg = batches.NodeBudget(open_max=3, bytes_max=100), ("s.a", b"", b"x" * 20)
    first, second = batches.BatchStager(budget), batches.BatchStager(budget)
    assert first.take(_found("a", "1"), msg, True, NOW) is None
    assert first.take(_found("b", "1"), msg, True, NOW) is None
    assert second.take(_found("c", "1"), msg, True, NOW) is None and budget.usage(NOW) == (3, 69)
    assert second.take(_found("d", "1"), msg, True, NOW).err_code == 10176  # past the node's open batches
    assert first.take(_found("a", "2", commit="1"), msg, True, NOW) == ("a", [msg, msg])  # 92 of 100 bytes
    assert second.take(_found("d", "1"), msg, True, NOW) is None and budget.usage(NOW) == (3, 69)
    assert second.take(_found("d", "2"), msg, True, NOW) is None and budget.usage(NOW) == (3, 92)
    assert first.take(_found("b", "2"), msg, True, NOW).err_code == 10176  # past the node's bytes: abandoned
    assert budget.usage(NOW) == (2, 69) and len(first) == 0
    second.close()  # the leadership ended
    assert budget.usage(NOW) == (0, 0) and first.take(_found("e", "1"), msg, True, NOW) is None
    # An idle batch is abandoned as the node counts, whichever stager holds it.
    assert budget.usage(NOW + batches.TIMEOUT_NS + 1) == (0, 0) and len(first) == 0
    assert batches.node_budget(budget) is batches.node_budget(budget) is not batches.node_budget(first)


def _group(maker, **fields) -> Group:
    raw = config_json("S", allow_atomic=True, **fields)
    return Group({"a": make_machine(maker, raw), "b": make_machine(maker, raw)}, "a")


def _bmsg(subject: str, batch_id: str, seq: int, commit: bool = False, **headers: str):
    extra = {"Nats_Batch_Commit": "1"} if commit else {}
    return pub(subject, f"{batch_id}-{seq}".encode(), Nats_Batch_Id=batch_id, Nats_Batch_Sequence=str(seq),
               **extra, **headers)


def _stored(machine) -> list[tuple[int, str, bytes]]:
    state = machine.store.state()
    return [(seq, machine.store.load(seq).subject, machine.store.load(seq).payload)
            for seq in range(state.first_seq, state.last_seq + 1)] if state.msgs else []


def test_a_batch_commits_whole_in_one_entry_between_other_publishes(maker):
    group = _group(maker)
    first, _ = group.publish([_bmsg("s.a", "b", 1), pub("s.plain", b"p1"), _bmsg("s.b", "b", 2)])
    assert [o.staged for o in first.outcomes] == [True, False, True] and first.outcomes[1].seq == 1
    last, _ = group.publish([pub("s.plain", b"p2"), _bmsg("s.c", "b", 3, commit=True), pub("s.plain", b"p3")], NOW + 1)
    assert [(o.seq, o.batch) for o in last.outcomes] == [(2, None), (5, ("b", 3)), (6, None)]
    committed = [decode_entry(entry) for entry in last.entries]
    assert [len(entry.msgs) for entry in committed] == [1, 3, 1]  # the batch is one entry of its own
    expected = [(1, "s.plain", b"p1"), (2, "s.plain", b"p2"), (3, "s.a", b"b-1"), (4, "s.b", b"b-2"),
                (5, "s.c", b"b-3"), (6, "s.plain", b"p3")]
    assert _stored(group.machines["a"]) == _stored(group.machines["b"]) == expected


def test_a_refused_commit_stores_nothing_and_uses_no_sequence(maker):
    group = _group(maker, discard="new", max_msgs=3)
    group.publish([pub("s.x", b"before")])
    group.publish([_bmsg("s.a", "b", 1), _bmsg("s.b", "b", 2)])
    refused, _ = group.publish([_bmsg("s.c", "b", 3, commit=True)])  # 1 + 3 > max_msgs 3
    assert refused.outcomes[0].error.err_code == 10077 and refused.entries == []
    decision, _ = group.publish([_bmsg("s.a", "c", 1, Nats_Msg_Id="m"), _bmsg("s.a", "c", 2, commit=True,
                                                                            Nats_Msg_Id="m")])
    assert decision.outcomes[1].error.err_code == 10201 and decision.entries == []
    decision, _ = group.publish([_bmsg("s.a", "d", 1), _bmsg("s.a", "d", 2, commit=True,
                                                              Nats_Expected_Last_Subject_Sequence="0")])
    assert decision.outcomes[1].error.err_code == 10164  # s.a was written earlier in the batch
    after, _ = group.publish([pub("s.y", b"after")])
    assert after.outcomes[0].seq == 2  # no sequence was used by the refused batches
    assert _stored(group.machines["a"]) == _stored(group.machines["b"]) == [(1, "s.x", b"before"), (2, "s.y", b"after")]


def test_a_new_leader_knows_no_open_batch(maker):
    group = _group(maker)
    group.publish([_bmsg("s.a", "b", 1)])
    group.leader, group.leader_name = StreamLeader(group.machines["b"]), "b"
    decision, _ = group.publish([_bmsg("s.a", "b", 2, commit=True)])
    assert decision.outcomes[0].error.err_code == 10176 and decision.entries == []
