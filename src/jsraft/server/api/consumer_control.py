"""The stream leader's side of `$JS.API.CONSUMER.PAUSE.<stream>.<consumer>`: `consumer.pause`, served over
`$rpc` at the leader of the consumer's stream (layer L5).

Owns: proposing the PAUSE op (consumer/ops.py: `until_ns`, 0 resumes) through the stream log, the
answer nats-server gives (`{"paused", "pause_until", "pause_remaining"}`), the pause advisory when
`pause_until` changed (consumer_events invariant 5), and waking the consumer service so its timer
follows the new pause end (delivery resumes by itself when it passes: consumer_events `pause_due_ns`).

Invariants:
  1. Needs this node to lead the stream and its consumers: `NotLeader` otherwise, before anything is
     proposed, so the router carries the request on (as consumer_admin invariant 1).
  2. The answer is given once the PAUSE entry applied here: an info read after it sees the pause.
  3. `paused` is judged against this node's clock when answering, as nats-server's leader does; the
     replicated state holds only the time (`until_ns`), never a clock reading of a replica.

Imports: stdlib, L1 (`jsapi`, `raft` errors), L3 (`consumer`), server siblings. Reference: nats-server
`server/jetstream_api.go` (jsConsumerPauseRequest), `server/consumer.go` (updatePauseState).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jsraft.consumer import PauseOp
from jsraft.meta import ConsumerOffline, StreamOffline
from jsraft.server.api.consumer_admin import leading_service
from jsraft.server.groups.consumer_errors import ConsumerNotFound
from jsraft.server.groups.consumer_service import ConsumerService
from jsraft.server.api.jsapi_codec import rfc3339
from jsraft.server.groups.versioning import check_consumer_level, consumer_offline_reason

if TYPE_CHECKING:
    from jsraft.server.api.api_parts import ApiParts

Result = tuple[Any, Sequence[bytes]]


def pause_answer(until_ns: int, now_ns: int) -> dict[str, Any]:
    """nats-server `JSApiConsumerPauseResponse`: `pause_remaining` only while paused."""
    answer: dict[str, Any] = {"paused": until_ns > now_ns, "pause_until": rfc3339(until_ns)}
    if until_ns > now_ns:
        answer["pause_remaining"] = until_ns - now_ns
    return answer


class ConsumerControl:
    """The `consumer.pause` method; `register` adds it to a node's request table."""

    def __init__(self, parts: "ApiParts") -> None:
        self.parts = parts

    def register(self, table: dict[str, Any]) -> None:
        table["consumer.pause"] = self.pause

    async def _service(self, args: dict[str, Any]) -> ConsumerService:
        return await leading_service(self.parts.local, args)

    async def pause(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        service = await self._service(args)
        name, until_ns = str(args["name"]), max(int(args["until_ns"]), 0)
        entry = service.replica.adapter.consumers.entries.get(name)  # type: ignore[union-attr]
        if entry is None:
            raise ConsumerNotFound()
        offline = consumer_offline_reason(entry, self.parts.config.api_level)
        if offline is not None:
            raise ConsumerOffline(offline)
        if service.replica.stopped_reason is not None:  # stream_replica invariant 6: only deletes
            raise StreamOffline(service.replica.stopped_reason)
        check_consumer_level(entry.config, until_ns, self.parts.config.api_level)
        before_ns = entry.paused_until_ns
        proposal = await service.propose([PauseOp(name=name, until_ns=until_ns)])
        await service.replica.runtime.outcome(service.replica.group, proposal)  # invariant 2
        now_ns = service.now_ns()
        service.events.on_pause(name, before_ns, until_ns, now_ns)
        service.events.flush()
        service.wake()  # the task's timer follows the new pause end
        return pause_answer(until_ns, now_ns), ()
