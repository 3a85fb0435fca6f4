"""`Faults`: what a scenario may do to the cluster, as awaitable steps, each logged to faults.jsonl.

Owns: the scenario-facing fault vocabulary (kill, start, power cut, pause, isolate, partition, bridge,
swizzle, clock, at-rest corruption, node replacement, leader lookups) over the blocking `ChaosCluster`
and network objects, run off the event loop (`asyncio.to_thread`) so the workloads keep running while a
fault is applied; and `heal_all`, which undoes every fault still in force before the final phase.

Invariants:
  1. A fault with a duration (pause, isolate, partition, bridge) is always undone, also when the
     scenario is cancelled: the undo runs in a `finally`.
  2. Corruption only ever touches `corrupted_node`, fixed for the run (CHAOS.md: a fixed minority), and
     only while that node is stopped.
  3. Nothing here waits without a deadline.

Imports: anything (test code); never imported by production code.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import shutil
import time
from collections.abc import Callable
from typing import Any

from jsraft.testing.chaos import disk_faults
from jsraft.testing.chaos.scenarios import sleep_bounded

log = logging.getLogger("jsraft.chaos")

STREAM = "CHAOS"
REPAIR_WAIT_S = 45.0


class Faults:
    def __init__(self, cluster: Any, network: Any | None, rng: random.Random, fault_log: Callable[..., None], *,
                 corrupted_node: str | None = None, stream: str = STREAM) -> None:
        self.cluster = cluster
        self.network = network
        self.rng = rng
        self.log = fault_log
        self.stream = stream
        self.names: list[str] = list(cluster.names)
        self.corrupted_node = corrupted_node or self.names[-1]
        self.corrupted: set[str] = set()
        self.paused: set[str] = set()
        self.dead: set[str] = set()
        self.skewed: set[str] = set()
        self._snapshots: dict[str, str] = {}  # node -> a copy of its stream dir taken earlier (rollback)
        self._corruptions: dict[str, dict[str, Any]] = {}
        self._last_seq_seen: dict[str, int | None] = {}  # node -> what was done to it, until it restarts

    # --- Time --------------------------------------------------------------------------------------------

    async def sleep(self, seconds: float, deadline: float | None = None) -> None:
        await sleep_bounded(seconds, deadline)

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(fn, *args, **kwargs)

    # --- Processes ---------------------------------------------------------------------------------------

    async def kill(self, name: str, tag: str | None = None) -> None:
        if name == self.corrupted_node:  # what its store held, for judging a later repair (S10)
            try:
                state = await self._call(self.cluster.hooks(name).replica_state, self.stream)
                self._last_seq_seen[name] = state.get("last_seq")
            except Exception:
                self._last_seq_seen.pop(name, None)
        await self._call(self.cluster.kill, name)
        self.dead.add(name)
        if tag:
            log.info("chaos: killed %s (%s)", name, tag)

    async def start(self, name: str, *, wait: bool = True, clock_offset_s: float | None = None) -> None:
        await self._call(self.cluster.start_node, name)
        self.dead.discard(name)
        self.paused.discard(name)
        if clock_offset_s is not None:
            await self._wait_hooks(name)
            await self.set_clock(name, clock_offset_s)
        elif wait or name in self._corruptions:
            await self._wait_hooks(name)
        if name in self._corruptions:
            await self._call(self._observe_repair, name, self._corruptions.pop(name))

    def _observe_repair(self, name: str, corruption: dict[str, Any], timeout_s: float = REPAIR_WAIT_S) -> None:
        """After a corrupted node restarts: wait (bounded) until its replica is whole, then log what its
        repair found and fetched (its drift/repaired advisories) as a `repair` event. The runner judges
        from it that a flipped bit was repaired as a range, not by cutting the store there (S10)."""
        hooks = self.cluster.hooks(name)
        started = time.monotonic()
        whole, state = False, {}
        while time.monotonic() - started < timeout_s:
            try:
                state = hooks.replica_state(self.stream)
            except Exception:  # not open yet
                state = {}
            # Whole only once the repair episode has ended too (its worker idle, nothing held): a replica
            # can look current with no faults while the episode still fetches or has not closed.
            repair = state.get("repair") or {}
            # ... and once the background verifier has read what the fast open took from the index.
            if (state and not state.get("repairing") and not state.get("faults") and state.get("health") == "current"
                    and not state.get("unverified_blocks")
                    and repair.get("state") == "idle" and not repair.get("held_entries")):
                whole = True
                break
            time.sleep(0.2)
        try:
            advisories = hooks.advisories(self.stream)
        except Exception as error:
            advisories = [{"error": str(error)}]
        self.log("repair", "instant", [name], {
            "corruption": corruption, "whole": whole, "seconds": round(time.monotonic() - started, 3),
            "last_seq": state.get("last_seq"), "repair": state.get("repair"),
            "advisories": [{k: v for k, v in a.items() if k in ("type", "findings", "fetched_msgs", "reset",
                                                                "deleted_seqs", "error")} for a in advisories]})

    async def _wait_hooks(self, name: str, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                await self._call(self.cluster.hooks(name).streams)
                return
            except Exception:  # not up yet: poll until the deadline
                await asyncio.sleep(0.1)
        log.warning("chaos: %s did not answer its hooks within %.0f s", name, timeout_s)

    async def power_cut(self, names: list[str], mode: str) -> None:
        await self._call(self.cluster.power_cut, names, mode, self.rng.randrange(2**32))
        self.dead.update(names)

    async def pause(self, name: str, hold_s: float, tag: str | None = None) -> None:
        await self._call(self.cluster.pause, name)
        self.paused.add(name)
        try:
            await asyncio.sleep(hold_s)
        finally:
            await self._call(self.cluster.resume, name)
            self.paused.discard(name)

    async def wait_ready(self, timeout_s: float) -> bool:
        try:
            await self._call(self.cluster.wait_ready, timeout_s)
            return True
        except Exception as error:
            log.warning("chaos: cluster not ready after %.0f s: %s", timeout_s, error)
            return False

    # --- Network -----------------------------------------------------------------------------------------

    def _net(self) -> Any:
        if self.network is None:
            raise RuntimeError("this scenario needs the network layer (Scenario.network)")
        return self.network

    async def isolate(self, name: str, hold_s: float, tag: str | None = None) -> None:
        net = self._net()
        await self._call(net.isolate, name)
        try:
            await asyncio.sleep(hold_s)
        finally:
            await self._call(net.heal_all)

    async def partition(self, groups: list[list[str]], hold_s: float) -> None:
        net = self._net()
        await self._call(net.partition, groups)
        try:
            await asyncio.sleep(hold_s)
        finally:
            await self._call(net.heal_all)

    async def bridge(self, a: str, b: str, via: str, hold_s: float) -> None:
        net = self._net()
        await self._call(net.bridge, a, b, via)
        try:
            await asyncio.sleep(hold_s)
        finally:
            await self._call(net.heal_all)

    async def swizzle(self, total_s: float) -> None:
        """Cut each node's links one at a time (the cuts add up), then restore the nodes in another random
        order, over `total_s` (the network's `swizzle` steps)."""
        net = self._net()
        steps = net.swizzle(self.rng)
        try:
            for step in steps:
                await self._call(step.apply, net)
                await asyncio.sleep(total_s / len(steps))
        finally:
            await self._call(net.heal_all)

    # --- Clocks ------------------------------------------------------------------------------------------

    async def set_clock(self, name: str, offset_s: float, rate: float | None = None, *, log: bool = True) -> None:
        try:
            await self._call(self.cluster.set_clock, name, offset_s, rate, log=log)
        except TypeError:  # a harness without the log switch
            await self._call(self.cluster.set_clock, name, offset_s, rate)
        if offset_s:
            self.skewed.add(name)
        else:
            self.skewed.discard(name)

    # --- Leaders -----------------------------------------------------------------------------------------

    async def stream_leader(self) -> str | None:
        return await self._call(self.cluster.stream_leader, self.stream)

    async def meta_leader(self) -> str | None:
        return await self._call(self.cluster.meta_leader)

    async def a_follower(self) -> str | None:
        leader = await self.stream_leader()
        followers = [name for name in self.names if name != leader and name not in self.dead]
        return self.rng.choice(followers) if followers else None

    async def corruption_victim(self, *, follower: bool = True) -> str | None:
        """The fixed corrupted node, once it is a follower of the stream (asks the leader to step down
        when it leads: corrupting a leader is a different scenario). None if it will not become one."""
        victim = self.corrupted_node
        if not follower:
            return victim
        for _ in range(3):
            if await self.stream_leader() != victim:
                return victim
            await self._call(self.cluster.stream_stepdown, self.stream)
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline and await self.stream_leader() in (victim, None):
                await asyncio.sleep(0.2)
        return None if await self.stream_leader() == victim else victim

    # --- At-rest corruption ------------------------------------------------------------------------------

    async def remember(self, name: str) -> None:
        """Keep a copy of `name`'s stream directory, for writing old chunks back later (rollback)."""
        src = self.cluster.stream_dir(name, self.stream)
        dst = os.path.join(self.cluster.base_dir, "old", name)
        await self._call(shutil.rmtree, dst, True)
        await self._call(shutil.copytree, src, dst)
        self._snapshots[name] = dst

    async def corrupt(self, name: str, kind: str) -> None:
        if name != self.corrupted_node:
            raise RuntimeError(f"corruption only on the fixed node {self.corrupted_node}, not {name}")
        if name not in self.dead:
            raise RuntimeError(f"corrupting {name} while it runs")
        before = self._last_seq_seen.get(name)
        detail = {"what": kind, "last_seq_before": before, **(await self._call(self._corrupt, name, kind) or {})}
        self.corrupted.add(name)
        self._corruptions[name] = detail
        self.log("corrupt", "instant", [name], detail)

    async def lose_stream_dir(self, name: str) -> None:
        """S13: an operator's slip — `name`'s whole stream directory (`streams/<stream>/`: Raft log,
        group marker, messages, consumers) is removed while the node is down; its `node.json`, `meta/`
        and `groups.rec` stay."""
        if name not in self.dead:
            raise RuntimeError(f"removing {name}'s stream directory while it runs")
        path = self.cluster.stream_dir(name, self.stream)
        await self._call(shutil.rmtree, path)
        self.log("lose_dir", "instant", [name], {"path": os.path.relpath(path, self.cluster.base_dir)})

    def _corrupt(self, name: str, kind: str) -> dict[str, Any]:
        store_dir = self.cluster.store_dir(name, self.stream)
        wal_dir = self.cluster.wal_dir(name, self.stream)
        if kind == "truncate_tail":
            return {"store": disk_faults.truncate_newest_block(store_dir, self.rng),
                    "wal": disk_faults.truncate_wal_tail(wal_dir, self.rng)}
        if kind == "flip_bits":
            return disk_faults.flip_bits(store_dir, self.rng, n_bits=self.rng.randint(1, 2))
        if kind == "rollback_consumer_state":
            old = self._snapshots.get(name)
            if old is None:
                return {"skipped": "no earlier copy of the stream directory"}
            return disk_faults.rollback_consumer_state(self.cluster.stream_dir(name, self.stream), old, self.rng)
        raise ValueError(f"unknown corruption {kind!r}")

    async def replace_node(self, name: str, timeout_s: float = 90.0) -> None:
        """S11: `$JS.API.SERVER.REMOVE` `name` (its streams are re-placed on the others), stop it, wipe its
        data directory, start it again — a new storage UUID, which the meta leader re-admits (learner,
        then voter, then a peer) — and scale the stream under test back to three replicas on it."""
        others = [other for other in self.names if other != name and other not in self.dead]
        self.log("remove_node", "start", [name], {})
        await self._api(others, "$JS.API.SERVER.REMOVE", {"peer": name}, timeout_s)
        await self.kill(name)
        await self._call(self.cluster.wipe, name)
        await self.start(name)
        self.log("remove_node", "end", [name], {"wiped": True})
        self.log("add_node", "start", [name], {})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                voters = (await self._call(self.cluster.hooks(others[0]).raft_state, "meta")).get("voters", [])
            except Exception:
                voters = []
            if name in voters:
                break
            await asyncio.sleep(0.5)
        info = await self._api(others, f"$JS.API.STREAM.INFO.{self.stream}", None, timeout_s)
        config = dict(info.get("config") or {})
        config["num_replicas"] = 3
        await self._api(others, f"$JS.API.STREAM.UPDATE.{self.stream}", config, timeout_s)
        ready = await self.wait_ready(timeout_s)
        self.log("add_node", "end", [name], {"voters_back": name in voters, "ready": ready})

    async def _api(self, nodes: list[str], subject: str, body: dict[str, Any] | None,
                   timeout_s: float) -> dict[str, Any]:
        """A JetStream API request through any of `nodes`, retried until it succeeds or `timeout_s`."""
        import nats

        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            for node in nodes:
                try:
                    nc = await nats.connect(self.cluster.client_url(node), allow_reconnect=False,
                                            connect_timeout=2)
                except Exception as error:
                    last = error
                    continue
                try:
                    answer = await nc.request(subject, json.dumps(body).encode() if body is not None else b"",
                                              timeout=5)
                    reply = json.loads(answer.data)
                    if "error" not in reply:
                        return reply
                    last = reply["error"]
                except Exception as error:
                    last = error
                finally:
                    await nc.close()
            await asyncio.sleep(0.5)
        raise RuntimeError(f"{subject}: no success within {timeout_s:.0f} s (last: {last!r})")

    # --- Heal ---------------------------------------------------------------------------------------------

    async def heal_all(self) -> None:
        if self.network is not None:
            await self._call(self.network.heal_all)
        for name in sorted(self.paused):
            await self._call(self.cluster.resume, name)
        self.paused.clear()
        for name in sorted(self.dead):
            await self.start(name)
        for name in sorted(self.skewed):
            await self.set_clock(name, 0.0, 1.0)

    def describe(self) -> str:
        return json.dumps({"corrupted_node": self.corrupted_node, "corrupted": sorted(self.corrupted)})
