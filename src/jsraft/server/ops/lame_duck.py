"""Lame duck mode: a node leaves gracefully before it stops — `jsraft serve` on SIGUSR2, as nats-server (L5).

Owns: `lame_duck(parts, online, runtime, leave)`, the steps nats-server's `lameDuckMode` takes, in this order:
  1. No new client: the client listener closes (`ClientServer.stop_accepting`); connected clients stay.
  2. The clients are told: INFO with `"ldm": true` to each of them (nats-py's `lame_duck_mode_cb`, nats.js's
     `ldm` status), without this node's URL in `connect_urls`; the linked peers drop that URL from the
     INFO they send too (`leave`: `ClusterUrls.leave`, its invariant 6), so a client that moves is not
     sent back here.
  3. The node stands aside (`NodeRuntime.stand_aside`, nats-server's observer mode: `raft.core` invariant 6):
     from now on none of its Raft groups, nor one opened later, stands for election while another voter
     could lead it, so a leadership handed over does not come back if its new holder fails. Then every
     group this node leads (the meta group, its streams') hands its leadership to a connected voter, one
     that answered the leader lately when there is one (`Status.reachable_followers`, as nats-server's
     `StepDown`; `online`: `Node.online`; `hand_over`, through `NodeRuntime.transfer_leadership`), and the
     node waits until they moved, at most `HANDOVER_ELECTION_TIMEOUTS` election timeouts, asking again for
     a handover the core dropped after an election timeout (Raft §3.10). A single voter's group stays
     (nothing to hand over, and it still campaigns); one whose other voters are all away, or whose
     handover did not complete in time, is logged.
  4. After the grace period (`lame_duck_grace_period_ms`, counted from step 2) the clients are closed one
     by one over the rest of `lame_duck_duration_ms`: between half and all of (duration - grace) / clients
     apart, at most a second, so they do not all reconnect elsewhere at once. With no client left it
     returns at once.
The caller then stops the node as on SIGTERM (`jsraft serve`: stores closed, exit 0). Until then the node
serves on: its connected clients' requests, and its part in every Raft group as a voter that does not
stand.

Invariants:
  1. Step 2 comes only once step 1 is done: a client told can no longer come back here (a dial is refused),
     and every client past its handshake is told.
  2. A leadership handover never goes to a voter that is not connected, and an unfinished one does not stop
     the mode: the node stops as a follower would (its groups elect again, as after any stop).
  3. Each client is closed once, in the order it connected; the mode returns only when all were.

Imports: stdlib, L0, L1 (`raft` status), L4 (`runtime`, types only), trio, sibling `monitor_parts` (types only).
Reference: nats-server `server/server.go` (`lameDuckMode`, `sendLDMToClients`), `server/raft.go`
(`transferRaftLeaders`); ADR-5 (lame duck notification).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from jsraft.errors import JsraftError
from jsraft.raft.status import Role

if TYPE_CHECKING:
    from jsraft.runtime import NodeRuntime
    from jsraft.server.ops.monitor_parts import MonitorParts

log = logging.getLogger("jsraft.server.lame_duck")

HANDOVER_ELECTION_TIMEOUTS = 4  # how long step 3 waits for the leaderships to move, in election timeouts
CLOSE_INTERVAL_MAX_S = 1.0  # step 4: at most this long between two closes (nats-server: a second)


async def lame_duck(parts: "MonitorParts", online: Callable[[], set[str]], runtime: "NodeRuntime",
                    leave: Callable[[], Awaitable[None]], *, rng: random.Random | None = None) -> None:
    """Steps 1–4 (module docstring); returns when the node may stop."""
    config, clients, rng = parts.config, parts.clients, rng or random.Random()
    log.info("Entering lame duck mode, stop accepting new clients")
    await clients.stop_accepting()  # step 1: the listening sockets are closed when it returns
    clients.lame_duck = True
    await leave()  # step 2: INFO without this node's URL, the peers told
    clients.announce_info()
    told = trio.current_time()
    tick_s = config.tick_ms / 1000
    timeout_s = HANDOVER_ELECTION_TIMEOUTS * config.election_ticks * tick_s
    runtime.stand_aside()  # step 3, before any handover: a leadership handed over is not taken back
    still = await hand_over(parts, online(), runtime.transfer_leadership, timeout_s, tick_s, rng)
    if still:
        log.warning("lame duck mode: still leading %s: the handover did not complete", ", ".join(still))
    await close_clients(parts, told, rng)


async def hand_over(parts: "MonitorParts", connected: set[str], transfer: Callable[[str, str], None],
                    timeout_s: float, poll_s: float, rng: random.Random) -> list[str]:
    """Step 3: each group this node leads asks a voter in `connected` to take over; those of them still led
    here once all moved or `timeout_s` passed (invariant 2)."""
    moving: dict[str, str] = {}  # group -> the voter asked to take it over
    for group in parts.group_names():
        try:
            status = parts.status(group).raft
            if status.role is not Role.LEADER:
                continue
            others = sorted(voter for voter in status.voters if voter != parts.name)
            targets = [voter for voter in others if voter in connected]
            if not targets:
                if others:  # a single voter (R1 here, a standalone node's meta group) has no one to ask
                    log.warning("lame duck mode: %s stays led here: none of its voters %s is connected", group,
                                ", ".join(others))
                continue
            heard = [voter for voter in targets if voter in status.reachable_followers]  # answered lately
            target = rng.choice(heard or targets)
            log.info("lame duck mode: handing %s's leadership to %s", group, target)
            transfer(group, target)
        except JsraftError as error:  # closed meanwhile, or a transfer already under way
            log.info("lame duck mode: %s's leadership not handed over: %s", group, error)
            continue
        moving[group] = target
    with trio.move_on_after(timeout_s):
        while any(_leads(parts, group) for group in moving):
            await trio.sleep(poll_s)
            for group, target in moving.items():  # one the core dropped (not done in an election timeout)
                _ask_again(parts, group, target, transfer)
    return [group for group in moving if _leads(parts, group)]


def _ask_again(parts: "MonitorParts", group: str, target: str, transfer: Callable[[str, str], None]) -> None:
    """A handover the core dropped — its target was still catching up, or the TimeoutNow was lost — is asked
    for again while this node still leads the group."""
    try:
        status = parts.status(group).raft
    except JsraftError:  # closed: it leads nothing
        return
    if status.role is Role.LEADER and status.lead_transferee is None:
        try:
            transfer(group, target)
        except JsraftError as error:
            log.info("lame duck mode: %s's leadership not handed over: %s", group, error)


def _leads(parts: "MonitorParts", group: str) -> bool:
    try:
        return parts.status(group).raft.role is Role.LEADER
    except JsraftError:  # closed: it leads nothing
        return False


async def close_clients(parts: "MonitorParts", told: float, rng: random.Random) -> None:
    """Step 4 (invariant 3): wait out the grace period from `told`, then close the clients one by one."""
    config = parts.config
    conns = [conn for _, conn in sorted(parts.clients.clients.items()) if not conn.closed]
    if not conns:
        return
    grace_s = config.lame_duck_grace_period_ms / 1000
    await trio.sleep_until(told + grace_s)
    log.info("Closing existing clients")
    spread_s = max(config.lame_duck_duration_ms / 1000 - grace_s, 1.0)
    interval_s = min(spread_s / len(conns), CLOSE_INTERVAL_MAX_S)
    for i, conn in enumerate(conns):
        conn.close("lame duck mode")
        if i < len(conns) - 1:
            await trio.sleep(rng.uniform(interval_s / 2, interval_s))
