"""Helpers for the Spark tests: a real 3-node jsraft cluster of `jsraft serve` processes
(`bench/nats_servers.JsraftServers`, free ports, its own directory) and nats-py calls run to completion
with `asyncio.run` (the tests themselves are synchronous: Spark is)."""

from __future__ import annotations

import asyncio
import importlib.util
import pathlib
import sys
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[2]
TIMEOUT_S = 60


def _load_servers():
    if "bench_nats_servers" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bench_nats_servers", REPO / "bench" / "nats_servers.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_nats_servers"] = module
        spec.loader.exec_module(module)
    return sys.modules["bench_nats_servers"]


servers = _load_servers()


def run_nats(urls: list[str], scenario: Any, *args: Any, timeout_s: float = TIMEOUT_S) -> Any:
    """`scenario(js, nc, *args)` with nats-py connected to the cluster, run to completion."""
    import nats as nats_py

    async def main() -> Any:
        nc = await nats_py.connect(servers=urls, connect_timeout=5, allow_reconnect=True, max_reconnect_attempts=5)
        try:
            return await asyncio.wait_for(scenario(nc.jetstream(timeout=10), nc, *args), timeout_s)
        finally:
            await nc.close()

    return asyncio.run(main())


def create_stream(urls: list[str], name: str, subjects: list[str], **config: Any) -> None:
    async def scenario(js, nc):
        await js.add_stream(name=name, subjects=subjects, num_replicas=3, **config)
    run_nats(urls, scenario)


def publish(urls: list[str], rows: list[tuple[str, bytes, dict[str, str] | None]]) -> list[int]:
    """Publish rows in order, each acknowledged; their sequences."""
    async def scenario(js, nc):
        futures = [await js.publish_async(subject, data, headers=headers) for subject, data, headers in rows]
        return [(await future).seq for future in futures]
    return run_nats(urls, scenario)


def get_all(urls: list[str], stream: str, first: int, last: int) -> list[Any]:
    """`get_msg` seq by seq over `first..last`: the messages that exist, as (seq, subject, data, headers)."""
    import nats.js.errors

    async def scenario(js, nc):
        found = []
        for seq in range(first, last + 1):
            try:
                msg = await js.get_msg(stream, seq)
            except nats.js.errors.NotFoundError:
                continue
            found.append((msg.seq, msg.subject, msg.data, dict(msg.headers or {}) or None))
        return found
    return run_nats(urls, scenario)


def rows_of(df: Any) -> list[tuple[int, str, bytes, dict[str, list[str]] | None]]:
    return [(r.seq, r.subject, bytes(r.data), dict(r.headers) if r.headers is not None else None)
            for r in df.orderBy("seq").collect()]
