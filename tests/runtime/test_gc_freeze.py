"""`runtime.gc_freeze`: full collections freeze what survived, and let it back in after a release.

Method: the rules on a recording collector and a hand-driven clock (each decision checked), then the real
collector in this process (the freezer installed with short intervals, always uninstalled): cyclic objects
that survived a full collection are frozen; made garbage, a full collection leaves them (they are not
walked) until a release and the minimum interval let them back in, and that collection frees them; with
no release, the maximum interval alone does.
"""

from __future__ import annotations

import gc
import weakref

from jsraft.runtime import gc_freeze
from jsraft.runtime.gc_freeze import GcFreezer


class _Collector:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def freeze(self) -> None:
        self.calls.append("freeze")

    def unfreeze(self) -> None:
        self.calls.append("unfreeze")


def _full(freezer: GcFreezer) -> None:
    freezer.on_collection("start", {"generation": 2})
    freezer.on_collection("stop", {"generation": 2, "collected": 0, "uncollectable": 0})


def test_the_rules_on_a_recording_collector():
    now = [1000.0]
    collector = _Collector()
    freezer = GcFreezer(clock=lambda: now[0], collector=collector, min_interval_s=60, max_interval_s=1800)
    for generation in (0, 1):  # young collections: nothing
        freezer.on_collection("start", {"generation": generation})
        freezer.on_collection("stop", {"generation": generation})
    assert collector.calls == []
    _full(freezer)
    assert collector.calls == ["freeze"], "rule 1: frozen at the end of a full collection"
    freezer.released()
    now[0] += 59
    _full(freezer)
    assert collector.calls == ["freeze", "freeze"], "a release waits for the minimum interval"
    now[0] += 1
    _full(freezer)
    assert collector.calls[2:] == ["unfreeze", "freeze"], "released and 60 s passed: walked whole once"
    now[0] += 600
    _full(freezer)
    assert collector.calls[4:] == ["freeze"], "no release since: frozen objects stay out"
    now[0] += 1200
    _full(freezer)
    assert collector.calls[5:] == ["unfreeze", "freeze"], "the maximum interval alone lets them back in"
    assert (freezer.freezes, freezer.unfreezes) == (5, 2)


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def _alive(refs: list[weakref.ref]) -> int:
    return sum(ref() is not None for ref in refs)


def test_the_real_collector_frees_frozen_cycles_only_after_a_release_or_the_maximum_interval():
    now = [0.0]
    freezer = GcFreezer(clock=lambda: now[0], min_interval_s=10, max_interval_s=100)
    installed = gc_freeze.install(freezer)
    try:
        assert installed is freezer
        held = [_Cycle() for _ in range(1000)]
        refs = [weakref.ref(o) for o in held]
        gc.collect()
        assert gc.get_freeze_count() >= 1000, "what survived a full collection is frozen"
        del held  # 1,000 cycles of garbage, all frozen
        gc.collect()
        assert _alive(refs) == 1000, "frozen: not walked, not freed"
        gc_freeze.released()
        now[0] += 10
        gc.collect()
        assert _alive(refs) == 0, "released and the interval passed: that collection frees them"
        held = [_Cycle() for _ in range(500)]
        refs = [weakref.ref(o) for o in held]
        gc.collect()
        del held
        now[0] += 50
        gc.collect()
        assert _alive(refs) == 500, "no release, within the maximum interval: still frozen"
        now[0] += 100
        gc.collect()
        assert _alive(refs) == 0, "the maximum interval lets them back in"
    finally:
        gc_freeze.uninstall()
    assert gc.get_freeze_count() == 0 and freezer.on_collection not in gc.callbacks


def test_released_without_a_freezer_does_nothing():
    gc_freeze.uninstall()
    gc_freeze.released()
    assert gc.get_freeze_count() == 0
