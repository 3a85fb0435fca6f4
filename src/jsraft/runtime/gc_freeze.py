"""`GcFreezer`: full garbage collections that do not grow with the number of streams (layer L4).

Owns: what a `jsraft serve` process does at each of CPython's full (generation 2) collections — freeze what
survived (`gc.freeze`: later collections leave it alone) and, now and then, let it back in (`gc.unfreeze`).

Why: a full collection walks every tracked object. A node holds a few hundred per stream (its replica,
store, Raft group, tasks), and CPython runs a full collection whenever the objects that survived younger
collections grew by a quarter since the last one: while streams are created the node stopped, all of it,
for a time proportional to the streams it had — 590 ms at 2,300 streams and 825 ms at 3,000 (`gen2`
callbacks timing each one), every create and every Raft heartbeat of the node waiting behind it
(`bench/README.md`, "Create cost as streams accumulate"). Each one found nothing to collect: those
objects live as long as their stream.

Rules:
  1. At the end of every full collection, every tracked object is frozen: the next full collection
     walks only what was allocated and survived since.
  2. Frozen objects are still freed by reference counting; only a cycle among them that becomes garbage
     stays (it is not walked). So at the start of a full collection they are let back in (unfrozen, that
     collection walks and frees everything, as without this module, and rule 1 freezes again) when
     something that held cycles was released (`released()`: a stream replica closed) and
     `min_interval_s` passed since the last time, or when `max_interval_s` passed whatever happened (a
     bound on what closed connections and deleted consumers leave frozen).
  3. Installed once per process, by `jsraft serve` only: a program that embeds a node keeps its own
     collector settings. `released()` without an installed freezer does nothing.
  4. The decisions read a clock handed in (tests drive it), never sleep, and run inside the collector's
     callbacks: cheap, and they allocate nothing the collection would have to see.

Imports: stdlib (`gc`, `time`, `threading`).
Reference: CPython `gc.freeze` (3.7+), `gc.callbacks`.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from typing import Any

MIN_INTERVAL_S = 60.0  # rule 2: a release lets frozen objects back in at most this often
MAX_INTERVAL_S = 1800.0  # rule 2: and they are let back in at least this often


class GcFreezer:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic, collector: Any = gc,
                 min_interval_s: float = MIN_INTERVAL_S, max_interval_s: float = MAX_INTERVAL_S) -> None:
        self._clock, self._gc = clock, collector
        self.min_interval_s, self.max_interval_s = min_interval_s, max_interval_s
        self._last_unfreeze = clock()
        self._released = False
        self.freezes = 0  # full collections followed by a freeze (rule 1)
        self.unfreezes = 0  # full collections that walked everything again (rule 2)

    def on_collection(self, phase: str, info: dict[str, Any]) -> None:
        """`gc.callbacks` entry: rules 1 and 2 at the start and the end of each full collection."""
        if info.get("generation") != 2:
            return
        if phase == "start":
            now = self._clock()
            waited = now - self._last_unfreeze
            if (self._released and waited >= self.min_interval_s) or waited >= self.max_interval_s:
                self._gc.unfreeze()
                self._released, self._last_unfreeze = False, now
                self.unfreezes += 1
        elif phase == "stop":
            self._gc.freeze()
            self.freezes += 1

    def released(self) -> None:
        """Something that held reference cycles was let go (rule 2)."""
        self._released = True


_installed: GcFreezer | None = None
_lock = threading.Lock()


def install(freezer: GcFreezer | None = None) -> GcFreezer:
    """Rule 3: install `freezer` (a default one when None) for this process; the one already installed
    is kept and returned."""
    global _installed
    with _lock:
        if _installed is None:
            _installed = freezer or GcFreezer()
            gc.callbacks.append(_installed.on_collection)
        return _installed


def uninstall() -> None:
    """Remove the installed freezer and let every frozen object back in (tests; a process that stops)."""
    global _installed
    with _lock:
        if _installed is not None:
            gc.callbacks.remove(_installed.on_collection)
            _installed = None
            gc.unfreeze()


def released() -> None:
    """Rule 2's `released()` on the installed freezer, if any (rule 3)."""
    freezer = _installed
    if freezer is not None:
        freezer.released()
