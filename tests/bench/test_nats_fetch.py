"""The checks of `bench/nats_fetch.py` (workload c of compare_nats.py): what makes a pull-fetch run fail.

Method: `Tally` is fed ack reply subjects by hand, in the two forms a server may send (v1, 9 tokens, as
nats-server 2.15 and jsraft send them; v2 with domain and account hash), as the fetch loop feeds it; a
lost message must raise; one received again must be counted (a redelivery, or a duplicate
when the server says it is a first delivery), not fail the run. The fetch loop and `retry_unavailable`
run (asyncio, as the bench) against a fake subscription / call that answers 503 (nats-py's
`ServiceUnavailableError`) a few times, then serves: the 503s are retried and counted; one that lasts past
the limit still fails, and with jsraft's limit (0) the first one fails. No server is involved.
"""

from __future__ import annotations

import asyncio
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


class FakeMsg:
    def __init__(self, seq: int) -> None:
        self.reply, self.data, self.acked = v1(1, seq, seq), b"x" * 128, False

    async def ack(self) -> None:
        self.acked = True


class FakeConn:
    async def flush(self, timeout: float) -> None:
        return None


class UnavailableFirst:
    """A pull subscription whose first `failures` fetches are answered 503, as a clustered nats-server
    answers before the consumer leader's interest reached the client's server."""

    def __init__(self, total: int, failures: int) -> None:
        self.next, self.total, self.failures, self.calls = 1, total, failures, 0

    async def fetch(self, batch: int, timeout: float) -> list[FakeMsg]:
        import nats.js.errors

        self.calls += 1
        if self.failures:
            self.failures -= 1
            raise nats.js.errors.ServiceUnavailableError()
        msgs = [FakeMsg(seq) for seq in range(self.next, min(self.next + batch, self.total + 1))]
        self.next += len(msgs)
        return msgs


def test_a_fetch_answered_503_is_tried_again_and_counted(monkeypatch):
    monkeypatch.setattr(nats_fetch, "UNAVAILABLE_PAUSE_S", 0.0)
    psub = UnavailableFirst(total=10, failures=3)
    done = asyncio.run(nats_fetch.fetch_all(FakeConn(), psub, 10, 4, cap_s=30))
    assert done["tally"].received == 10 and done["unavailable_fetches"] == 3
    assert len(done["latencies"]) == 3  # the fetches that answered: 4 + 4 + 2


@pytest.mark.parametrize("unavailable_for_s, failures", [(0.0, 1), (0.05, 10**6)], ids=["jsraft", "lasting"])
def test_a_503_fails_a_jsraft_run_at_once_and_any_run_when_it_lasts(monkeypatch, unavailable_for_s, failures):
    import nats.js.errors

    monkeypatch.setattr(nats_fetch, "UNAVAILABLE_PAUSE_S", 0.0)
    psub = UnavailableFirst(total=10, failures=failures)
    with pytest.raises(nats.js.errors.ServiceUnavailableError):
        asyncio.run(nats_fetch.fetch_all(FakeConn(), psub, 10, 4, cap_s=30, unavailable_for_s=unavailable_for_s))
    assert psub.calls == 1 if unavailable_for_s == 0.0 else psub.calls > 1


def test_retry_unavailable_counts_and_returns_or_gives_up():
    import nats.js.errors

    answers = [nats.js.errors.ServiceUnavailableError(), nats.js.errors.ServiceUnavailableError(), "info"]

    async def call() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    counts: dict[str, int] = {}
    assert asyncio.run(nats_fetch.retry_unavailable(call, limit_s=30, counts=counts)) == "info"
    assert counts == {"unavailable": 2}
    answers[:] = [nats.js.errors.ServiceUnavailableError()] * 3
    with pytest.raises(nats.js.errors.ServiceUnavailableError):
        asyncio.run(nats_fetch.retry_unavailable(call, limit_s=-1.0))
