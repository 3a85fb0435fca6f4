"""Stream publishes in batches: the `msg.publish_batch` request and its handler at the stream leader (L5).

Owns: the request's shape — args `{"stream", "subjects": [...]}`, blobs `headers_0, payload_0, headers_1,
...` — and its reply `{"outcomes": [...], "leader": <the node that served it>}`, one outcome per publish in order: an int `seq` (stored at
`seq`), `[seq, "<val>"]` (stored at `seq`, a counter's total after it, ADR-49), `[seq, {"batch", "count"}]`
(an atomic batch committed up to `seq`, ADR-50), `[]` (staged in an atomic batch), `[seq]` (a duplicate of
the message stored at `seq`), or an error object (`rpc.error_body`); and
`publish_batch`, the handler the stream leader serves it with (registered in the node's request table by
`stream_publish`, so it is reached locally or over `$rpc` through `Node.call_stream`). One request carries
what a node's clients published on a stream while its previous request was out: the per-message cost
of a hop (a task, a frame, a JSON body, a reply) is paid once per batch (DESIGN §12).

From a peer the request is served through the `$rpc` starter `start_publish_batch`, which queues the
batch as its frame is read, so batches one node sends while earlier ones are out stay in order here.

Invariants:
  1. A batch is queued with the replica whole and in order — as its frame is read when a leader is
     ready, else once one is — or refused whole with `NotLeader`, nothing queued (the caller retries it).
  2. Every publish of a batch gets exactly one outcome. A `NotLeader` outcome means the publish was not
     stored (never proposed, or its entry was replaced by a new leader's): the caller may send it again.
  3. A batch holds at most `PUBLISHES_MAX` publishes (within the `$rpc` blob bound) and, beyond its
     first publish, at most `BYTES_MAX` bytes.

Imports: stdlib, L0, L3 (`stream` outcomes), server siblings.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any

import trio

from jsraft.errors import BadRequest, JsraftError
from jsraft.jsapi import validate_stream_name
from jsraft.server.groups.rpc import error_body, error_from_body
from jsraft.server.groups.stream_replica import api_error
from jsraft.stream import PubOutcome

if TYPE_CHECKING:
    from jsraft.server.groups.stream_lookup import LocalStreams

METHOD = "msg.publish_batch"
PUBLISHES_MAX = 256
BYTES_MAX = 1 << 20


class _Answers:
    """The outcomes of one batch, filled in by the replica's `done` callbacks, in any order."""

    __slots__ = ("answers", "missing", "event")

    def __init__(self, count: int) -> None:
        self.answers: list[Any] = [None] * count
        self.missing = count
        self.event = trio.Event()

    def done(self, position: int, answer: Any) -> None:
        if self.answers[position] is None:
            self.answers[position] = answer
            self.missing -= 1
            if self.missing == 0:
                self.event.set()


def encode_outcome(answer: Any) -> Any:
    """One publish's answer from the replica (a `PubOutcome` or a `JsraftError`) as it travels."""
    if isinstance(answer, JsraftError):
        return error_body(answer)
    if answer.error is not None:
        return error_body(api_error(answer.error))
    if answer.staged:
        return []
    if answer.duplicate:
        return [answer.seq]
    if answer.batch is not None:
        return [answer.seq, {"batch": answer.batch[0], "count": answer.batch[1]}]
    return answer.seq if answer.value is None else [answer.seq, answer.value]


def decode_outcome(outcome: Any) -> PubOutcome | JsraftError:
    """The answer to one publish — stored (with a counter's value or an atomic batch's id and count),
    a duplicate, staged in an atomic batch — else its error; a malformed outcome is a `BadRequest`."""
    if type(outcome) is int:
        return PubOutcome(outcome)
    if isinstance(outcome, list):
        if not outcome:
            return PubOutcome(0, staged=True)
        if len(outcome) == 1 and type(outcome[0]) is int:
            return PubOutcome(outcome[0], duplicate=True)
        if len(outcome) == 2 and type(outcome[0]) is int and type(outcome[1]) is str:
            return PubOutcome(outcome[0], value=outcome[1])
        if (len(outcome) == 2 and type(outcome[0]) is int and isinstance(outcome[1], dict)
                and isinstance(outcome[1].get("batch"), str) and type(outcome[1].get("count")) is int):
            return PubOutcome(outcome[0], batch=(outcome[1]["batch"], outcome[1]["count"]))
    if isinstance(outcome, dict):
        return error_from_body(outcome)
    return BadRequest(f"malformed publish outcome {outcome!r}")


def _checked(local: "LocalStreams", args: dict[str, Any], blobs: list[bytes]) -> tuple[Any, list[Any]]:
    """The replica (None: not open here) and the subjects of a well-formed request."""
    try:
        name = validate_stream_name(str(args["stream"]))
        subjects = args["subjects"]
    except (KeyError, TypeError) as error:
        raise BadRequest(f"{METHOD}: malformed arguments: {error!r}") from None
    if not isinstance(subjects, list) or len(blobs) != 2 * len(subjects) or len(subjects) > PUBLISHES_MAX:
        raise BadRequest(f"{METHOD}: {len(blobs)} blobs for a batch of subjects")
    replica = local.replica(name, args)  # NotLeader when it exists but is not (yet) open here
    return replica, subjects


def _queue(replica: Any, subjects: list[Any], blobs: list[bytes]) -> _Answers:
    """Invariant 1: every publish of the batch into the replica's queue, now, in order."""
    answers = _Answers(len(subjects))
    for position, subject in enumerate(subjects):
        try:
            replica.enqueue(str(subject), blobs[2 * position], blobs[2 * position + 1],
                            lambda answer, position=position: answers.done(position, answer))
        except JsraftError as error:  # the replica's queue is full: this publish is refused
            answers.done(position, error)
    return answers


async def _reply(local: "LocalStreams", answers: _Answers) -> tuple[Any, Sequence[bytes]]:
    if answers.missing:
        await answers.event.wait()
    return {"outcomes": [encode_outcome(answer) for answer in answers.answers], "leader": local.name}, ()


async def publish_batch(local: "LocalStreams", args: dict[str, Any], blobs: list[bytes]) -> tuple[Any, Sequence[bytes]]:
    """The stream leader's side of `msg.publish_batch` (invariants 1 and 2), for the request table."""
    replica, subjects = _checked(local, args, blobs)
    if not replica.can_enqueue():
        await replica.wait_leader(1.0)  # NotLeader (with a hint) when this node does not lead it
    return await _reply(local, _queue(replica, subjects, blobs))


def start_publish_batch(local: "LocalStreams", from_node: str, args: dict[str, Any],
                        blobs: list[bytes]) -> Awaitable[tuple[Any, Sequence[bytes]]]:
    """The `$rpc` starter of `msg.publish_batch` (rpc invariant 5): a batch from a peer is queued as its
    frame is read, so the batches one node sends while earlier ones are out keep their order here.
    Only while no leader is ready does it wait, in the serving task, like `publish_batch`."""
    replica, subjects = _checked(local, args, blobs)
    if replica.can_enqueue():
        return _reply(local, _queue(replica, subjects, blobs))
    return publish_batch(local, args, blobs)
