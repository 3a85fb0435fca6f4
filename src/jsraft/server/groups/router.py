"""`Router`: carry a request to the node that must serve it — the meta leader or a stream's leader (L5).

Owns: finding the leader (this node's own Raft status when it is a member, the hint in a `NotLeader`
answer, else each of the stream's peers in turn), retrying with a deadline, and calling the handler
locally when the leader is this node.

Invariants:
  1. Each attempt is one hop (rpc invariant 4); the number of attempts is bounded by `deadline_s` and a
     pause between attempts that found no leader: a tenth of a tick at first (a group that was just
     created has its leader within milliseconds: `first_election`), doubling up to one tick.
  2. Only answers that prove the request was not carried out are retried: `NotLeader` (the handler
     refused before proposing), `RpcRefused` (never sent, or refused unread), and `NoLeader`.
     `RpcTimeout` and every other error go back to the caller: retrying an admin request or a publish
     whose outcome is unknown could apply it twice.

Imports: stdlib, L0, L1 (`raft` errors), trio, server siblings.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import trio

from jsraft.errors import JsraftError
from jsraft.raft.errors import NotLeader
from jsraft.server.errors import NoLeader, RpcRefused
from jsraft.server.groups.rpc import Rpc

Local = Callable[[str, str, dict[str, Any], list[bytes]], Awaitable[tuple[Any, Sequence[bytes]]]]
Hint = Callable[[], str | None]


class CallStream(Protocol):
    """`Node.call_stream`: a request carried to a stream's leader, wherever it is (the router finds it).
    What a service that only asks a stream's leader is given, instead of the node."""

    async def __call__(self, stream: str, method: str, args: dict[str, Any],
                      blobs: Sequence[bytes] = ...) -> tuple[Any, list[bytes]]: ...

_RETRYABLE = (NotLeader, RpcRefused, NoLeader)


class Router:
    def __init__(self, node_id: str, rpc: Rpc, local: Local, *, tick_s: float, deadline_s: float = 10.0,
                 attempt_timeout_s: float = 5.0) -> None:
        self.node_id = node_id
        self.rpc = rpc
        self.local = local
        self.tick_s = tick_s
        self.deadline_s = deadline_s
        self.attempt_timeout_s = attempt_timeout_s

    async def call(self, method: str, args: dict[str, Any], blobs: Sequence[bytes], *, hint: Hint,
                   candidates: Callable[[], Sequence[str]]) -> tuple[Any, list[bytes]]:
        """Serve `method` at the leader that `hint()` names (or a candidate); see the invariants."""
        told: str | None = None
        rotation = 0
        pause_s = self.tick_s / 10
        # Built only when an attempt fails: an exception is not cheap, and most calls succeed at once.
        last_error: JsraftError | None = None
        with trio.move_on_after(self.deadline_s):
            while True:
                target = told or hint()
                if target is None:
                    peers = candidates()
                    target = peers[rotation % len(peers)] if peers else None
                    rotation += 1
                told = None
                if target is not None:
                    try:
                        return await self._attempt(target, method, args, blobs)
                    except _RETRYABLE as error:
                        last_error = error
                        told = error.leader_id if isinstance(error, NotLeader) else None
                        if told is not None and told != target:
                            continue  # a fresh hint: follow it at once
                await trio.sleep(pause_s)
                pause_s = min(pause_s * 2, self.tick_s)
        if last_error is None:
            raise NoLeader()
        if isinstance(last_error, NotLeader):
            raise NoLeader(f"no leader answered {method} in {self.deadline_s}s (last: {last_error.description})")
        raise last_error

    async def _attempt(self, target: str, method: str, args: dict[str, Any],
                       blobs: Sequence[bytes]) -> tuple[Any, list[bytes]]:
        if target == self.node_id:
            result, out = await self.local(self.node_id, method, args, list(blobs))
            return result, list(out)
        return await self.rpc.call(target, method, args, blobs, timeout_s=self.attempt_timeout_s)
