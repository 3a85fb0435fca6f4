"""`start_in_thread`: an embedded node on a background thread with its own trio loop (layer L5).

Owns: running `open_node(config)` inside `trio.run` on a thread of its own, for programs that are not
trio programs (asyncio, plain synchronous code), which then talk to the node with any NATS client at
`handle.url`. The handle (`ThreadNode`) reports `url`, `name` and `client_port`, and stops the node
with `stop()` or at the end of a `with` block.

Invariants:
  1. `start_in_thread` returns only once the node is ready (`open_node`'s readiness: a meta leader is
     known and this node caught up), or raises the startup error in the caller's thread — the error
     itself (a foreign store directory's `IdentityMismatch`, a busy port's `OSError`), not trio's
     exception group around it.
  2. `stop()` is a clean shutdown: the node's trio run is cancelled from outside (through its trio
     token), `open_node` closes the runtime and the stream stores, and `stop()` returns after the thread
     ended. It is idempotent, and re-raises an error the node failed with while running.
  3. A node still running when the interpreter exits is stopped by an `atexit` hook (the thread is a
     daemon, so it cannot hold the process open; the hook still closes the stores cleanly).

Imports: stdlib, trio, server siblings. Reference: DESIGN.md §10 ("Embedded").
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

import trio

from jsraft.server.settings.config import NodeConfig
from jsraft.server.node import open_node

START_TIMEOUT_S_DEFAULT = 60.0  # startup (recovery included) plus readiness, at most


def _leaf(error: BaseException) -> BaseException:
    """The one real error inside nested single-member exception groups (a nursery wraps what it raises)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


class ThreadNode:
    """A node running on its own thread. Made by `start_in_thread`; never touch its node directly (it
    belongs to another thread's trio loop): talk to it over `url`."""

    def __init__(self, config: NodeConfig, *, ready_timeout_s: float | None) -> None:
        self.config = config
        self.name = config.name
        self.url: str | None = None
        self.client_port: int | None = None
        self.error: BaseException | None = None  # what the node's run ended with, if not a clean stop
        self._ready_timeout_s = ready_timeout_s
        self._started = threading.Event()  # set when ready, or when the run ended before that
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._thread = threading.Thread(target=self._main, name=f"jsraft-node-{config.name}", daemon=True)

    def __repr__(self) -> str:
        return f"ThreadNode(name={self.name!r}, url={self.url!r}, running={self.running})"

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    # --- The node's thread ----------------------------------------------------------------------------

    def _main(self) -> None:
        try:
            trio.run(self._run)
        except BaseException as error:  # noqa: BLE001 — handed to the caller's thread (invariants 1, 2)
            self.error = _leaf(error)
        finally:
            self._started.set()

    async def _run(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:
            self._scope = scope
            async with open_node(self.config, ready_timeout_s=self._ready_timeout_s) as node:
                self.url, self.client_port = node.url, node.client_port
                self._started.set()
                await trio.sleep_forever()

    # --- The caller's thread --------------------------------------------------------------------------

    def _start(self, timeout_s: float) -> None:
        self._thread.start()
        if not self._started.wait(timeout_s):
            self.stop()
            raise TimeoutError(f"node {self.name} did not start within {timeout_s}s")
        if self.error is not None:  # invariant 1
            self._thread.join()
            error, self.error = self.error, None
            raise error
        atexit.register(self.stop)

    def stop(self, timeout_s: float = 60.0) -> None:
        """Invariant 2."""
        atexit.unregister(self.stop)
        if self._token is not None and self._thread.is_alive():
            try:
                trio.from_thread.run_sync(self._cancel, trio_token=self._token)
            except trio.RunFinishedError:
                pass  # it ended on its own meanwhile
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                raise TimeoutError(f"node {self.name} did not stop within {timeout_s}s")
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def _cancel(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    def __enter__(self) -> "ThreadNode":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def start_in_thread(config: NodeConfig | dict[str, Any], *, ready_timeout_s: float | None = 10.0,
                    start_timeout_s: float = START_TIMEOUT_S_DEFAULT) -> ThreadNode:
    """Run a node on a background thread; return its handle once it is ready (invariant 1)."""
    if isinstance(config, dict):
        config = NodeConfig.from_dict(config)
    node = ThreadNode(config.validate(), ready_timeout_s=ready_timeout_s)
    node._start(start_timeout_s)
    return node
