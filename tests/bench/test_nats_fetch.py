"""The checks of `bench/nats_fetch.py` (workload c of compare_nats.py): what makes a pull-fetch run fail.

Method: `Tally` is fed ack reply subjects by hand, in the two forms a server may send (v1, 9 tokens, as
nats-server 2.15 and jsraft send them; v2 with domain and account hash), as the fetch loop feeds it; a
lost message must raise; one received again must be counted (a redelivery, or a duplicate
when the server says it is a first delivery), not fail the run. No server is involved.
"""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"
_spec = importlib.util.spec_from_file_location("bench_nats_fetch", BENCH / "nats_fetch.py")
nats_fetch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nats_fetch)


def v1(delivered: int, sseq: int, cseq: int) -> str:
    return f"$JS.ACK.CMP.CMPC.{delivered}.{sseq}.{cseq}.1700000000000000000.0"


def v2(delivered: int, sseq: int, cseq: int) -> str:
    return f"$JS.ACK._.ACCHASH.CMP.CMPC.{delivered}.{sseq}.{cseq}.1700000000000000000.0.tok"


@pytest.mark.parametrize("form", [v1, v2])
def test_ack_reply_subjects_in_both_forms(form):
    assert nats_fetch.ack_reply_seqs(form(2, 17, 40)) == (2, 17, 40)


def test_not_an_ack_reply_subject_fails():
    with pytest.raises(RuntimeError, match="not a JetStream ack reply"):
        nats_fetch.ack_reply_seqs("_INBOX.abc.1")


def test_every_message_once_in_order_is_counted():
    tally = nats_fetch.Tally(3)
    for seq in (1, 2, 3):
        tally.take(v1(1, seq, seq), 128)
    assert (tally.received, tally.redelivered, tally.nbytes) == (3, 0, 384)


def test_a_lost_message_fails():
    tally = nats_fetch.Tally(3)
    tally.take(v1(1, 1, 1), 128)
    with pytest.raises(RuntimeError, match="a gap"):
        tally.take(v1(1, 3, 2), 128)


def test_a_message_received_again_is_counted_as_a_redelivery_or_a_duplicate():
    tally = nats_fetch.Tally(3)
    tally.take(v1(1, 1, 1), 128)
    tally.take(v1(1, 2, 2), 128)
    tally.take(v1(2, 1, 3), 128)  # redelivered (ack_wait passed, or a nak)
    tally.take(v1(1, 2, 3), 128)  # delivered again as new (a consumer leader change)
    assert (tally.received, tally.redelivered, tally.duplicates) == (2, 1, 1)
    tally.take(v1(1, 3, 4), 128)
    assert tally.received == 3


def test_a_gap_after_a_rewind_still_fails():
    tally = nats_fetch.Tally(5)
    for seq in (1, 2, 3):
        tally.take(v1(1, seq, seq), 128)
    tally.take(v1(1, 2, 4), 128)
    with pytest.raises(RuntimeError, match="a gap"):
        tally.take(v1(1, 5, 5), 128)
