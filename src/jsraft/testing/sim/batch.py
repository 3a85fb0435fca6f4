"""Running many seeds: `run_batch`, in one process or spread over worker processes, and its `BatchResult`.

Owns: turning a seed range plus options into `SimConfig`s (`config_for`: `nodes="mixed"` gives odd seeds 5
nodes and even seeds 3), running them (optionally with `jobs` worker processes, each seed still
deterministic on its own), stopping at the first failure when asked (for mutant hunts), and the summary the
CLI prints and the tests assert on.

Invariants:
  1. Results are reported in seed order whatever order workers finish in; with `stop_at_first_failure`,
     the reported failure is the lowest failing seed among those run, and seeds above it are not reported.
  2. A seed's outcome does not depend on `jobs` (each seed is a pure function of its config).

Imports: stdlib, attrs, siblings.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import time
from collections.abc import Callable, Iterable

import attrs

from jsraft.testing.sim.config import SimConfig
from jsraft.testing.sim.simulator import SeedResult, run_seed

_CHUNK_SEEDS = 8


@attrs.frozen(kw_only=True)
class BatchResult:
    seeds: int
    passed: int
    failed: int
    failures: tuple[SeedResult, ...]
    steps: int
    seconds: float

    def summary(self) -> str:
        return f"{self.passed} passed, {self.failed} failed"

    def raise_with_traces(self) -> None:
        """For tests: an AssertionError naming every failed seed, with the first one's trace; else nothing."""
        if self.failed:
            first = self.failures[0]
            lines = [f"seed {f.seed}: [{f.invariant}] {f.detail}" for f in self.failures]
            raise AssertionError(f"{self.summary()}\n" + "\n".join(lines) +
                                 f"\n--- trace of seed {first.seed} ---\n{first.trace}")

    def as_json(self) -> dict[str, object]:
        return {
            "seeds": self.seeds, "passed": self.passed, "failed": self.failed,
            "failures": [{"seed": f.seed, "invariant": f.invariant, "detail": f.detail} for f in self.failures],
            "steps": self.steps, "seconds": round(self.seconds, 3),
        }


def config_for(seed: int, *, nodes: int | str = "mixed", **options: object) -> SimConfig:
    count = (5 if seed % 2 else 3) if nodes == "mixed" else int(nodes)
    return SimConfig(seed=seed, nodes=count, **options)  # type: ignore[arg-type]


def _run_chunk(configs: list[SimConfig], stop_at_first_failure: bool) -> list[SeedResult]:
    out = []
    for config in configs:
        result = run_seed(config)
        out.append(result)
        if stop_at_first_failure and not result.ok:
            break
    return out


def run_batch(configs: Iterable[SimConfig], *, jobs: int = 1, stop_at_first_failure: bool = False,
              on_result: Callable[[SeedResult], None] | None = None) -> BatchResult:
    started = time.perf_counter()
    configs = list(configs)
    results: list[SeedResult] = []
    if jobs <= 1 or len(configs) <= 1:
        for config in configs:
            results.append(run_seed(config))
            if on_result is not None:
                on_result(results[-1])
            if stop_at_first_failure and not results[-1].ok:
                break
    else:
        results = _run_parallel(configs, jobs, stop_at_first_failure, on_result)
    results.sort(key=lambda r: r.seed)
    if stop_at_first_failure:
        first = next((r for r in results if not r.ok), None)
        if first is not None:
            results = [r for r in results if r.seed <= first.seed]
    failures = tuple(r for r in results if not r.ok)
    return BatchResult(seeds=len(results), passed=len(results) - len(failures), failed=len(failures),
                       failures=failures, steps=sum(r.steps for r in results),
                       seconds=time.perf_counter() - started)


def _run_parallel(configs: list[SimConfig], jobs: int, stop_at_first_failure: bool,
                  on_result: Callable[[SeedResult], None] | None) -> list[SeedResult]:
    chunks = [configs[i:i + _CHUNK_SEEDS] for i in range(0, len(configs), _CHUNK_SEEDS)]
    results: list[SeedResult] = []
    context = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        pending = {pool.submit(_run_chunk, chunk, stop_at_first_failure): chunk for chunk in chunks}
        for future in concurrent.futures.as_completed(pending):
            if future.cancelled():
                continue
            chunk_results = future.result()
            results.extend(chunk_results)
            for result in chunk_results:
                if on_result is not None:
                    on_result(result)
            if stop_at_first_failure and any(not r.ok for r in chunk_results):
                lowest = min(r.seed for r in chunk_results if not r.ok)
                for other, chunk in pending.items():
                    if chunk[0].seed > lowest:
                        other.cancel()
    return results
