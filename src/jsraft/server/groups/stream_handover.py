"""Whether a stream replica could lead in place of an unfit leader, asked and answered over `$rpc` (L5).

Owns: the transport of `replica.stream_repair` invariant 6 in production — the answer a replica gives
(`can_lead`, the `can_lead` field of its `replica.state` answer) and the unfit leader's question to its
reachable voters (`ask_can_lead`), turned into a choice by `replica.stream_repair.successor`
(`choose_successor`, for `RepairWorker._step_down_if_unfit`) and the transfer itself (`transfer_leadership`). The simulator reads the same `can_take_over` on the peer directly
(`testing.sim.stream_repair`).

Invariants:
  1. A peer that fails, refuses or does not answer within the timeout is left out: unable to lead. Nothing
     is concluded in its favour from silence.
  2. A replica whose memory store lost its messages never says it can lead (`memory_stream` rule 5 picks
     the leader then), nor one whose stream is not open, nor one stopped by a consumer this node cannot
     run (`stream_replica` invariant 6: as leader it would serve nothing).
  3. The peers are asked together and the whole question is bounded by `timeout_s` (an election timeout:
     an older answer is stale anyway). No peer asked (none reachable) is no successor.

Imports: stdlib, L0, L3½ (`replica.stream_repair`), trio, server siblings (types only).
Reference: DESIGN.md §8; server/groups/stream_repair.py invariant 4.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import trio

from jsraft.errors import JsraftError
from jsraft.replica import stream_repair as decide

if TYPE_CHECKING:
    from jsraft.server.groups.stream_replica import StreamReplica

log = logging.getLogger("jsraft.server.repair")


def can_lead(replica: "StreamReplica") -> bool:
    """This replica's answer (invariant 2): `replica.stream_repair.can_take_over` on its own state."""
    adapter = replica.adapter
    if adapter is None or replica.machine is None or replica.memory_loss.lost or replica.stopped_reason is not None:
        return False
    try:
        raft_repairing = replica.runtime.status(replica.group).raft.repairing
    except JsraftError:
        return False
    return decide.can_take_over(adapter, raft_repairing=raft_repairing)


async def ask_can_lead(call_peer: Callable[..., Awaitable[tuple[Any, list[bytes]]]], stream: str,
                       peers: Sequence[str], *, timeout_s: float) -> dict[str, bool]:
    """Each peer's `can_lead`, asked together (invariants 1 and 3)."""
    answers: dict[str, bool] = {}

    async def ask(peer: str) -> None:
        try:
            answer, _ = await call_peer(peer, "replica.state", {"stream": stream}, timeout_s=timeout_s)
        except JsraftError as error:
            log.info("stream %s: %s did not say whether it can lead: %s", stream, peer, error)
            return
        answers[peer] = isinstance(answer, dict) and answer.get("can_lead") is True

    with trio.move_on_after(timeout_s):
        async with trio.open_nursery() as nursery:
            for peer in peers:
                nursery.start_soon(ask, peer)
    return answers


async def choose_successor(call_peer: Callable[..., Awaitable[tuple[Any, list[bytes]]]], stream: str,
                           reachable: Sequence[str], *, timeout_s: float) -> str | None:
    """The voter an unfit leader hands over to, or None: it stays (`replica.stream_repair` invariant 6)."""
    if not reachable:
        return None
    target = decide.successor(reachable, await ask_can_lead(call_peer, stream, reachable, timeout_s=timeout_s))
    if target is None:
        log.info("stream %s: no reachable voter of %s can lead: the unfit leader stays", stream, ", ".join(reachable))
    return target


def transfer_leadership(replica: "StreamReplica", target: str, why: str) -> None:
    """Ask `replica`'s Raft group to hand its leadership to `target`; a transfer Raft will not start is
    logged, not raised (the caller asks again after an election timeout)."""
    log.warning("stream %s: %s cannot serve (%s): handing the leadership to %s", replica.name,
                replica.node_id, why, target)
    try:
        replica.runtime.transfer_leadership(replica.group, target)
    except JsraftError as error:
        log.info("stream %s: leadership transfer to %s not started: %s", replica.name, target, error)
