"""The CONSUMER entry body codec: round trip, strictness, and fuzzing.

Method: Hypothesis builds arbitrary valid op lists and checks `decode(encode(x)) == x` (invariant 1);
truncating or extending a valid body by any amount, and arbitrary byte strings, must give a value or a
`MalformedConsumerOps` — never another exception (invariant 2). Bounds are checked at their edges.
"""

from __future__ import annotations

import attrs
import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from jsraft.consumer import ops as opslib
from jsraft.consumer.errors import MalformedConsumerOps
from jsraft.consumer.ops import (
    AckOp, CreateOp, DeleteOp, DeliveredOp, PauseOp, SkipOp, StateOp, TermOp, decode_ops, encode_ops,
)

U64 = (1 << 64) - 1
names = st.text(min_size=1, max_size=40).filter(lambda n: len(n.encode()) <= 255)
seqs = st.integers(min_value=1, max_value=U64)
records = st.tuples(seqs, seqs, st.integers(min_value=1, max_value=2**32 - 1),
                    st.integers(min_value=-(2**63), max_value=2**63 - 1))


@st.composite
def state_ops(draw):
    """A consistent STATE op (ops invariant 5): pending within (ack floor, delivered], in stream-seq order."""
    floor_s, floor_c = draw(st.integers(0, 1000)), draw(st.integers(0, 1000))
    pending_s = sorted(draw(st.sets(st.integers(floor_s + 1, floor_s + 500), max_size=6)))
    pending_c = draw(st.lists(st.integers(floor_c + 1, floor_c + 500), min_size=len(pending_s),
                              max_size=len(pending_s)))
    delivered = (max([floor_c, *pending_c]) + draw(st.integers(0, 9)),
                 max([floor_s, *pending_s]) + draw(st.integers(0, 9)))
    pending = tuple((s, c, draw(st.integers(-(2**63), 2**63 - 1))) for s, c in zip(pending_s, pending_c))
    redelivered = tuple((s, draw(st.integers(1, 2**32 - 1))) for s in pending_s if draw(st.booleans()))
    return StateOp(name=draw(names), delivered=delivered, ack_floor=(floor_c, floor_s), pending=pending,
                   redelivered=redelivered)


ops = st.one_of(
    st.builds(CreateOp, name=names, config=st.binary(min_size=1, max_size=64),
              created_ns=st.integers(min_value=0, max_value=U64)),
    st.builds(CreateOp, name=names, config=st.binary(min_size=1, max_size=64),  # CREATE_AT: start carried
              created_ns=st.integers(min_value=0, max_value=U64), start_seq=st.integers(min_value=0, max_value=U64),
              start_last_seq=st.integers(min_value=0, max_value=U64)),
    st.builds(DeleteOp, name=names),
    st.builds(DeliveredOp, name=names, records=st.lists(records, max_size=8).map(tuple)),
    st.builds(AckOp, name=names, seqs=st.lists(seqs, max_size=8).map(tuple)),
    st.builds(TermOp, name=names, seqs=st.lists(seqs, max_size=8).map(tuple)),
    st.builds(SkipOp, name=names, stream_seq=st.integers(min_value=0, max_value=U64)),
    st.builds(PauseOp, name=names, until_ns=st.integers(min_value=0, max_value=U64)),
    state_ops(),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(ops, min_size=1, max_size=6))
def test_round_trip(values):
    assert decode_ops(encode_ops(values)) == values


@settings(max_examples=200, deadline=None)
@given(st.lists(ops, min_size=1, max_size=4), st.data())
def test_truncated_or_extended_bodies_are_refused(values, data):
    body = encode_ops(values)
    cut = data.draw(st.integers(min_value=0, max_value=len(body) - 1))
    with pytest.raises(MalformedConsumerOps):
        decode_ops(body[:cut])
    with pytest.raises(MalformedConsumerOps):
        decode_ops(body + data.draw(st.binary(min_size=1, max_size=9)))


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_give_a_value_or_a_clean_error(blob):
    try:
        decoded = decode_ops(blob)
    except MalformedConsumerOps:
        return
    assert encode_ops(decoded) == blob


def test_strict_checks():
    good = encode_ops([AckOp(name="c", seqs=(1,))])
    with pytest.raises(MalformedConsumerOps, match="version"):
        decode_ops(b"\x02" + good[1:])
    with pytest.raises(MalformedConsumerOps):
        decode_ops(encode_ops([AckOp(name="c", seqs=(1,))])[:-8] + b"\x00" * 8)  # seq 0
    with pytest.raises(MalformedConsumerOps, match="unknown consumer op kind"):
        decode_ops(good[:3] + b"\x63" + good[4:])
    with pytest.raises(MalformedConsumerOps):
        decode_ops(b"\x01\x00\x00")  # zero ops
    with pytest.raises(MalformedConsumerOps, match="UTF-8"):
        decode_ops(b"\x01\x01\x00\x02\x01\xff")


def test_encoder_bounds():
    with pytest.raises(ValueError):
        encode_ops([])
    with pytest.raises(ValueError):
        encode_ops([DeleteOp(name="")])
    with pytest.raises(ValueError):
        encode_ops([DeleteOp(name="x" * 256)])
    with pytest.raises(ValueError):
        encode_ops([CreateOp(name="c", config=b"", created_ns=0)])
    with pytest.raises(ValueError):
        encode_ops([AckOp(name="c", seqs=(1,) * (opslib.RECORDS_PER_OP_MAX + 1))])
    with pytest.raises(ValueError):
        encode_ops([SkipOp(name="c", stream_seq=-1)])
    assert len(decode_ops(encode_ops([DeleteOp(name="c")] * opslib.OPS_PER_ENTRY_MAX))) == opslib.OPS_PER_ENTRY_MAX


def test_state_ops_must_be_consistent():
    """Ops invariant 5: neither the encoder nor the decoder lets an inconsistent state through."""
    good = StateOp(name="c", delivered=(7, 6), ack_floor=(2, 2), pending=((3, 3, 10), (5, 5, 11), (6, 6, 12)),
                   redelivered=((3, 1),))
    assert decode_ops(encode_ops([good])) == [good]
    bad = [
        attrs.evolve(good, ack_floor=(3, 3)),  # a pending message at the floor
        attrs.evolve(good, delivered=(7, 5)),  # a pending message above delivered
        attrs.evolve(good, pending=((5, 5, 11), (3, 3, 10))),  # out of stream-seq order
        attrs.evolve(good, pending=((3, 3, 10), (3, 4, 10))),  # a stream seq twice
        attrs.evolve(good, redelivered=((3, 0),)),  # a redelivery count of 0
        attrs.evolve(good, redelivered=((3, 1), (3, 2))),
    ]
    for op in bad:
        with pytest.raises(ValueError):
            encode_ops([op])
        body = encode_ops([good])
        forged = body[:-len(opslib._encode_state(good))] + _raw_state(op)
        with pytest.raises(MalformedConsumerOps):
            decode_ops(forged)


def _raw_state(op: StateOp) -> bytes:
    """`op`'s STATE body as the encoder would write it, without its checks (a forged entry)."""
    return b"".join([opslib._POSITION.pack(*op.delivered, *op.ack_floor), opslib._U32.pack(len(op.pending)),
                     *(opslib._PENDING.pack(*p) for p in op.pending), opslib._U32.pack(len(op.redelivered)),
                     *(opslib._REDELIVERED.pack(*r) for r in op.redelivered)])
