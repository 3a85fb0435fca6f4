"""BENCH.md's workload *c* for `bench/compare_nats.py`: pull fetch, batches of 500, every message acked.

Owns: the consumer side of the comparison — a durable pull consumer (explicit ack, deliver all,
`max_ack_pending` 10,000, `ack_wait` 60 s: the anchor script's settings, ../shared/anchors/nats/bench.py)
created on a stream the caller has filled, then `psub.fetch(batch)` in a loop, each message acked with
nats-py's `msg.ack()` (a fire-and-forget publish, as in the anchor) until every stored message has been
received; then a flush of the connection, and the clock stops. Per-fetch latency is the time of one
`fetch` call.

Invariants (a run that breaks one raises, and compare_nats.py records it as FAILED, out of the figures):
  - every stream sequence 1..N is received, new ones in stream order: a message above the next expected
    sequence (a gap: a lost message) fails the run;
  - a message at or below the highest received is counted, not failed: as a redelivery when its
    `num_delivered` (in the ack reply subject) is above 1 (with `ack_wait` 60 s there should be none), as
    a duplicate when it says 1 — JetStream delivers at least once, and a consumer leader that changes
    before its delivery records are replicated delivers those messages again as new;
  - after the timed part, the server reports `num_ack_pending` 0 and an ack floor at N within 30 s: every
    ack sent reached the consumer. The time that takes is reported apart (`ack_confirm_s`), not in msgs/s;
  - a `503` (nats-py `ServiceUnavailableError`: no responders, or "JetStream system temporarily
    unavailable") is retried for at most the caller's `limit_s` / `unavailable_for_s` (0 for jsraft: its
    first 503 fails the run), counted, never hidden: a fetch answered 503 is tried again after
    `UNAVAILABLE_PAUSE_S` (its time stays in the clock), an API call (`retry_unavailable`) until a deadline.
    A clustered nats-server answers a pull request sent through n1 with "no responders" until the
    consumer leader's interest in `$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>` has reached n1 over
    the routes, which can take a moment after the consumer is created: that failed whole R3 runs before.

Must not import jsraft (the bench drives servers over NATS only) nor compare_nats.py (which imports this).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

DURABLE = "CMPC"
UNAVAILABLE_PAUSE_S = 0.05  # between tries after a 503
UNAVAILABLE_FOR_S = 30.0  # a 503 that lasts longer fails the run
V1_TOKENS = 9  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>


def ack_reply_seqs(reply: str) -> tuple[int, int, int]:
    """(num_delivered, stream seq, consumer seq) from a JetStream ack reply subject (v1 or v2 form)."""
    tokens = reply.split(".")
    if len(tokens) == V1_TOKENS:
        return int(tokens[4]), int(tokens[5]), int(tokens[6])
    if len(tokens) >= 11 and tokens[0] == "$JS" and tokens[1] == "ACK":
        return int(tokens[6]), int(tokens[7]), int(tokens[8])
    raise RuntimeError(f"not a JetStream ack reply subject: {reply!r}")


class Tally:
    """What the consumer received, checked message by message."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.next_seq = 1  # the stream sequence the next first delivery must carry
        self.redelivered = 0
        self.duplicates = 0  # received again with num_delivered 1
        self.nbytes = 0

    def take(self, reply: str, size: int) -> None:
        delivered, sseq, _cseq = ack_reply_seqs(reply)
        self.nbytes += size
        if sseq > self.next_seq:
            raise RuntimeError(f"stream seq {sseq} received, {self.next_seq} expected: a gap (lost messages)")
        if sseq == self.next_seq:
            self.next_seq += 1
        elif delivered > 1:
            self.redelivered += 1
        else:
            self.duplicates += 1

    @property
    def received(self) -> int:
        return self.next_seq - 1


async def create_consumer(js: Any, stream: str, counts: dict[str, int] | None = None,
                          limit_s: float = UNAVAILABLE_FOR_S) -> Any:
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    config = ConsumerConfig(durable_name=DURABLE, ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
                            max_ack_pending=10_000, ack_wait=60)
    # Tried again after a 503: the same config again is a no-op for both servers.
    await retry_unavailable(lambda: js.add_consumer(stream, config), counts=counts, limit_s=limit_s)
    return await js.pull_subscribe_bind(DURABLE, stream=stream)


async def retry_unavailable(call: Any, limit_s: float = UNAVAILABLE_FOR_S, counts: dict[str, int] | None = None) -> Any:
    """`await call()`, tried again while it raises `ServiceUnavailableError` (each retry counted in
    `counts["unavailable"]`), for at most `limit_s`; then the last error is raised."""
    import nats.js.errors

    deadline = time.monotonic() + limit_s
    while True:
        try:
            return await call()
        except nats.js.errors.ServiceUnavailableError:
            if time.monotonic() >= deadline:
                raise
            if counts is not None:
                counts["unavailable"] = counts.get("unavailable", 0) + 1
            await asyncio.sleep(UNAVAILABLE_PAUSE_S)


async def fetch_all(nc: Any, psub: Any, total: int, batch: int, cap_s: float,
                    unavailable_for_s: float = UNAVAILABLE_FOR_S) -> dict[str, Any]:
    """The timed part: fetch and ack until `total` messages are received (or `cap_s` passes, which fails
    the run); returns the tally and the per-fetch latencies (s)."""
    import nats.errors
    import nats.js.errors

    tally, latencies, empty, unavailable = Tally(total), [], 0, 0
    perf = time.perf_counter
    started = perf()
    unavailable_since: float | None = None
    while tally.received < total:
        begun = perf()
        try:
            msgs = await psub.fetch(batch, timeout=5)
        except nats.errors.TimeoutError:
            empty += 1
            msgs = []
        except nats.js.errors.ServiceUnavailableError:  # module docstring: counted, tried again
            unavailable += 1
            unavailable_since = unavailable_since or begun
            if perf() - unavailable_since >= unavailable_for_s:
                raise
            await asyncio.sleep(UNAVAILABLE_PAUSE_S)
            continue
        unavailable_since = None
        latencies.append(perf() - begun)
        for msg in msgs:
            tally.take(msg.reply, len(msg.data))
            await msg.ack()
        if perf() - started > cap_s:
            break
    await nc.flush(timeout=30)
    elapsed = perf() - started
    if tally.received < total:
        raise RuntimeError(f"pull fetch received {tally.received} of {total} messages in {elapsed:.1f}s "
                           f"({empty} empty fetches)")
    return {"tally": tally, "latencies": latencies, "seconds": elapsed, "empty_fetches": empty,
            "unavailable_fetches": unavailable}


async def confirm_acks(js: Any, stream: str, total: int, timeout_s: float = 30.0,
                       counts: dict[str, int] | None = None, limit_s: float = UNAVAILABLE_FOR_S) -> dict[str, Any]:
    """Poll the consumer until every ack is applied: no ack pending, ack floor at `total`."""
    started = time.perf_counter()
    while True:
        info = await retry_unavailable(lambda: js.consumer_info(stream, DURABLE), counts=counts, limit_s=limit_s)
        floor = info.ack_floor.stream_seq
        if info.num_ack_pending == 0 and floor >= total:
            return {"ack_confirm_s": round(time.perf_counter() - started, 3), "ack_floor": floor,
                    "num_redelivered": info.num_redelivered}
        if time.perf_counter() - started > timeout_s:
            raise RuntimeError(f"acks not applied after {timeout_s:g}s: ack floor {floor} of {total}, "
                               f"{info.num_ack_pending} pending")
        await asyncio.sleep(0.02)
