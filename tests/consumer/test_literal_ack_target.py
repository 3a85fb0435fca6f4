"""`literal_ack_target`: one match that stands for the client port's subject check and the ack's parse
(consumer/acks.py invariant 3).

Method: Hypothesis over ack-like subjects — the 9-token form built from tokens drawn with whitespace,
wildcards, dots, non-ASCII and empty strings in them, numbers that are not ASCII digits, over-long
subjects — and over arbitrary text. Whenever `literal_ack_target` gives a target, it must be what
`ack_target` gives and the subject must be a valid literal subject (`subjects.validate`); it must give one
for every ack subject this leader hands out for stream and consumer names a client can create.
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings

from jsraft import limits, subjects
from jsraft.consumer import ack_reply_subject
from jsraft.consumer.acks import ack_target, literal_ack_target
from jsraft.errors import InvalidSubject

TOKEN = st.text(alphabet=st.sampled_from(["a", "Z", "9", "_", "-", "*", ">", " ", "\t", "\x0b", ".", "é", "٣", "$"]),
                min_size=0, max_size=6)
NUMBER = st.one_of(st.integers(min_value=0, max_value=2**64).map(str), TOKEN)


def _valid(subject: str) -> bool:
    try:
        subjects.validate(subject)
    except InvalidSubject:
        return False
    return True


def _check(subject: str) -> None:
    target = literal_ack_target(subject)
    if target is not None:
        assert target == ack_target(subject)
        assert _valid(subject), subject


@settings(max_examples=2000, deadline=None)
@given(TOKEN, TOKEN, NUMBER, NUMBER, NUMBER, NUMBER, NUMBER)
def test_a_target_is_ack_targets_and_the_subject_is_valid(stream, consumer, dc, sseq, cseq, ts, pending):
    _check(f"$JS.ACK.{stream}.{consumer}.{dc}.{sseq}.{cseq}.{ts}.{pending}")


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=80))
def test_any_text_gives_none_or_a_valid_target(text):
    _check(text)
    _check("$JS.ACK." + text)


NAME = st.text(alphabet=st.characters(codec="ascii", exclude_characters=" \t\r\n\x0b\x0c.*>/\\\x00"),
               min_size=1, max_size=32)


@settings(max_examples=500, deadline=None)
@given(NAME, NAME, st.integers(1, 10**6), st.integers(1, 2**63), st.integers(1, 2**63),
       st.integers(0, 2**63), st.integers(0, 2**63))
def test_every_subject_a_leader_hands_out_takes_the_one_match(stream, consumer, dc, sseq, cseq, ts, pending):
    subject = ack_reply_subject(stream, consumer, dc, sseq, cseq, ts, pending)
    assert literal_ack_target(subject) == (stream, consumer, sseq) == ack_target(subject)


def test_an_over_long_subject_takes_the_general_way():
    subject = ack_reply_subject("S", "C", 1, 2, 3, 4, 5)
    long = subject[:-1] + "0" * (limits.subject_bytes_max - len(subject) + 1) + "5"
    assert len(long) > limits.subject_bytes_max and ack_target(long) == ("S", "C", 2)
    assert literal_ack_target(long) is None and not _valid(long)
