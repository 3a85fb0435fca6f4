"""Helpers for the `jsraft.client` tests: a single node's config on free ports, and deadline polls.

Method: every test runs a real node (`jsraft.open_node`, real files under `tmp_path`, client port 0 read
back as `node.url`) in the test's trio loop and talks to it with `jsraft.client` over real TCP. A
subscriber is known to be registered at the server once its own `flush()` returned (the server handles
one connection's operations in order and answers the PING last); messages published by another client
are all in a subscriber's buffer once the publisher flushed and then the subscriber flushed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from jsraft.cli.local_cluster import free_ports
from jsraft.server import NodeConfig

DEADLINE_S = 10.0


def single(tmp_path, name: str = "n1", **overrides: Any) -> NodeConfig:
    return NodeConfig(name=name, store_dir=str(tmp_path / name), cluster_port=0, client_port=0, tick_ms=20,
                      election_ticks=5, test_mode=True, **overrides)


def free_port() -> int:
    """A loopback port nothing listens on, below the OS's ephemeral range (`cli.local_cluster.free_ports`),
    so it stays free while a node that keeps it restarts."""
    return free_ports(1)[0]


async def until(predicate: Callable[[], bool], what: str, timeout_s: float = DEADLINE_S) -> None:
    with trio.fail_after(timeout_s):
        while not predicate():
            await trio.sleep(0.005)
    assert predicate(), what


async def settled(*clients: Any) -> None:
    """A barrier: everything each client sent was processed by the server, in order."""
    for client in clients:
        await client.flush()
