"""Pull consumers: the waiting-request queue and the statuses it answers with (layer L3, pure).

Owns: parsing a pull request (`$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>` body: empty, a number, or
JSON `{"batch", "expires", "no_wait", "max_bytes", "idle_heartbeat"}`), the checks nats-server makes
before queueing it, and `WaitingQueue`: FIFO, bounded by `max_waiting`, with the statuses to send —
`404 No Messages`, `408 Request Timeout` (with `Nats-Pending-Messages` / `Nats-Pending-Bytes`),
`409 Exceeded MaxWaiting` / `Exceeded MaxRequestBatch` / `Exceeded MaxRequestExpires` /
`Exceeded MaxRequestMaxBytes` / `Message Size Exceeds MaxBytes` / `Consumer Deleted` /
`Leadership Change` / `Consumer is push based`, `400 Bad Request - <why>`, and `100 Idle Heartbeat`.
Time is an argument (`now_ns`); the runtime sends what this module returns.

Invariants:
  1. At most `max_waiting` requests are queued; a request is answered at most once with a terminal
     status, and is removed when answered, fulfilled or expired.
  2. `expires_ns` is absolute (receipt time + the request's `expires`); 0 means it never expires.
  3. Requests are kept per arrival, not per reply subject: nats-py sends every fetch of a pull
     subscription with one reply subject, and nats-server's `waitQueue` keeps each of them (the older one
     is served first, and answered 408 when it expires), so jsraft does too.

Imports: stdlib, attrs, L1 (`jsapi`), this package. Reference: nats-server `server/consumer.go`
(processNextMsgRequest, nextReqFromMsg, waitQueue, processWaiting, sendIdleHeartbeat).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import attrs

from jsraft.consumer.errors import BadPullRequest
from jsraft.jsapi.consumer_config import ConsumerConfig

PENDING_MSGS_HEADER = "Nats-Pending-Messages"
PENDING_BYTES_HEADER = "Nats-Pending-Bytes"
_REQUEST_FIELDS = {"batch", "expires", "no_wait", "max_bytes", "idle_heartbeat", "group", "min_pending",
                   "min_ack_pending", "id", "priority"}


@attrs.frozen
class Status:
    """A status message: `NATS/1.0 <code> <description>` plus headers, no payload."""

    code: int
    description: str
    headers: tuple[tuple[str, str], ...] = ()

    def encode(self) -> bytes:
        lines = [f"NATS/1.0 {self.code} {self.description}", *(f"{k}: {v}" for k, v in self.headers)]
        return ("\r\n".join(lines) + "\r\n\r\n").encode()


NO_MESSAGES = Status(404, "No Messages")
CONSUMER_DELETED = Status(409, "Consumer Deleted")
LEADERSHIP_CHANGE = Status(409, "Leadership Change")
PUSH_BASED = Status(409, "Consumer is push based")
MAX_WAITING = Status(409, "Exceeded MaxWaiting")


def pending_status(code: int, description: str, msgs: int, size: int) -> Status:
    return Status(code, description, ((PENDING_MSGS_HEADER, str(msgs)), (PENDING_BYTES_HEADER, str(size))))


def idle_heartbeat(last_consumer_seq: int, last_stream_seq: int) -> Status:
    return Status(100, "Idle Heartbeat", (("Nats-Last-Consumer", str(last_consumer_seq)),
                                          ("Nats-Last-Stream", str(last_stream_seq))))


@attrs.define(kw_only=True)
class PullRequest:
    """A queued request. Mutable: `batch` and `max_bytes` count down as messages go out."""

    reply: str
    batch: int = 1
    expires_ns: int = 0
    no_wait: bool = False
    max_bytes: int = 0
    idle_heartbeat_ns: int = 0
    received_ns: int = 0
    delivered: int = 0
    next_heartbeat_ns: int = 0
    initial_max_bytes: int = 0
    arrival: int = 0  # its key in `WaitingQueue.requests` once queued (invariant 3)

    @property
    def byte_limited(self) -> bool:
        return self.initial_max_bytes > 0


def _int_field(data: dict, key: str) -> int:
    value = data.get(key, 0)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadPullRequest(f"Bad Request - json: cannot unmarshal {type(value).__name__} into {key}")
    return value


def parse_pull_request(reply: str, payload: bytes, now_ns: int) -> PullRequest:
    """nats-server `nextReqFromMsg`; `BadPullRequest` carries the `400 Bad Request - ...` text."""
    text = bytes(payload).strip()
    if not text:
        return PullRequest(reply=reply, received_ns=now_ns)
    if text[:1] != b"{":
        # A bare number is a batch size; anything else nats-server takes as a request for one message —
        # a number past int64 too (its `strconv.Atoi` fails), and it is never converted here (Python refuses
        # to convert more than 4,300 digits, and a ValueError would have escaped into the delivery task).
        batch = int(text) if text.lstrip(b"-").isdigit() and len(text) <= 19 else 1
        return PullRequest(reply=reply, batch=batch, received_ns=now_ns)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise BadPullRequest(f"Bad Request - {error}") from None
    if not isinstance(data, dict):
        raise BadPullRequest("Bad Request - json: cannot unmarshal into a request")
    batch, expires = _int_field(data, "batch"), _int_field(data, "expires")
    heartbeat, max_bytes = _int_field(data, "idle_heartbeat"), _int_field(data, "max_bytes")
    no_wait = data.get("no_wait", False)
    if not isinstance(no_wait, bool):
        raise BadPullRequest("Bad Request - json: cannot unmarshal into no_wait")
    if heartbeat > 0 and heartbeat * 2 > expires:
        raise BadPullRequest("Bad Request - heartbeat value too large")
    return PullRequest(reply=reply, batch=batch, expires_ns=now_ns + expires if expires > 0 else 0,
                       no_wait=no_wait, max_bytes=max_bytes, initial_max_bytes=max_bytes,
                       idle_heartbeat_ns=heartbeat, received_ns=now_ns,
                       next_heartbeat_ns=now_ns + heartbeat if heartbeat > 0 else 0)


class WaitingQueue:
    """The pull requests waiting for messages on one consumer (leader-only, rebuilt empty on election)."""

    def __init__(self, config: ConsumerConfig) -> None:
        self.config = config
        self.requests: dict[int, PullRequest] = {}  # by arrival number, in arrival order (FIFO, invariant 3)
        self._arrivals = 0

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self) -> Iterator[PullRequest]:
        return iter(list(self.requests.values()))

    def submit(self, reply: str, payload: bytes, now_ns: int, num_pending: int) -> Status | None:
        """Queue a request; a `Status` to send at once instead when nats-server would answer right away.

        `num_pending`: messages the consumer could deliver now (new plus due redeliveries).
        """
        config = self.config
        if not config.is_pull:
            return PUSH_BASED
        try:
            request = parse_pull_request(reply, payload, now_ns)
        except BadPullRequest as error:
            return Status(400, error.description)
        if config.max_batch > 0 and request.batch > config.max_batch:
            return Status(409, f"Exceeded MaxRequestBatch of {config.max_batch}")
        if request.expires_ns and config.max_expires > 0 and request.expires_ns - now_ns > config.max_expires:
            return Status(409, f"Exceeded MaxRequestExpires of {_go_duration(config.max_expires)}")
        if request.max_bytes > 0 and config.max_bytes > 0 and request.max_bytes > config.max_bytes:
            return Status(409, f"Exceeded MaxRequestMaxBytes of {config.max_bytes}")
        if request.no_wait and num_pending == 0 and request.expires_ns == 0:
            return NO_MESSAGES
        if len(self.requests) >= config.max_waiting:
            self.expire(now_ns)
        if len(self.requests) >= config.max_waiting:
            return None if request.idle_heartbeat_ns else MAX_WAITING
        self._arrivals += 1
        request.arrival = self._arrivals
        self.requests[request.arrival] = request
        return None

    def head(self) -> PullRequest | None:
        return next(iter(self.requests.values()), None)

    def delivered(self, request: PullRequest, size: int, count: int = 1) -> Status | None:
        """`count` messages of `size` bytes in all went to `request` (a plan never goes past its batch or
        bytes, so only the last of them can use them up); remove it when its batch or bytes are used up."""
        request.batch -= count
        request.delivered += count
        if request.max_bytes:
            request.max_bytes = max(request.max_bytes - size, 0)
        if request.batch <= 0:
            self.requests.pop(request.arrival, None)
        elif request.byte_limited and request.max_bytes == 0:
            # The request's byte budget is spent with messages still asked for (nats-server
            # `JsPullRequestRemainingBytesT`).
            self.requests.pop(request.arrival, None)
            return pending_status(409, "Batch Completed", request.batch, 0)
        return None

    def drop(self, request: PullRequest) -> None:
        """Remove `request` unanswered: nobody listens on its reply subject any more (nats-server's
        `getNextWaiting` removes such a request without a status)."""
        self.requests.pop(request.arrival, None)

    def too_large(self, request: PullRequest) -> Status:
        """The next message alone exceeds the request's `max_bytes` (nats-server removes the request)."""
        self.requests.pop(request.arrival, None)
        return pending_status(409, "Message Size Exceeds MaxBytes", request.batch, request.max_bytes)

    def expire(self, now_ns: int, end_of_stream: bool = False) -> list[tuple[str, Status]]:
        """Requests whose time is up (408), and at the end of the stream the `no_wait` ones (404)."""
        answers: list[tuple[str, Status]] = []
        for request in list(self.requests.values()):
            if request.expires_ns and now_ns >= request.expires_ns:
                answers.append((request.reply, pending_status(408, "Request Timeout", request.batch,
                                                              request.max_bytes)))
            elif end_of_stream and request.no_wait and (request.expires_ns == 0 or request.delivered > 0):
                answers.append((request.reply, NO_MESSAGES))
            else:
                continue
            del self.requests[request.arrival]
        return answers

    def heartbeats(self, now_ns: int, last_consumer_seq: int, last_stream_seq: int) -> list[tuple[str, Status]]:
        """`100 Idle Heartbeat` for requests that asked for them and are due."""
        due: list[tuple[str, Status]] = []
        for request in self.requests.values():
            if request.idle_heartbeat_ns and now_ns >= request.next_heartbeat_ns:
                request.next_heartbeat_ns = now_ns + request.idle_heartbeat_ns
                due.append((request.reply, idle_heartbeat(last_consumer_seq, last_stream_seq)))
        return due

    def drain(self, status: Status) -> list[tuple[str, Status]]:
        """Answer every queued request with `status` (Consumer Deleted, Leadership Change) and empty it."""
        answers = [(request.reply, status) for request in self.requests.values()]
        self.requests.clear()
        return answers


def _go_duration(ns: int) -> str:
    """Go's `time.Duration.String()` for the common cases nats-server prints (e.g. "5s", "1m30s", "250ms")."""
    if ns == 0:
        return "0s"
    if ns < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= size:
                return f"{_trim(ns / size)}{unit}"
    hours, rest = divmod(ns, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    seconds = _trim(rest / 1_000_000_000)
    if hours:
        return f"{hours}h{minutes}m{seconds}s"
    return f"{minutes}m{seconds}s" if minutes else f"{seconds}s"


def _trim(value: float) -> str:
    return f"{value:.9f}".rstrip("0").rstrip(".")
