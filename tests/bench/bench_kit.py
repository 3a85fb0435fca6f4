"""What the bench smoke tests share: where `bench/` is, and the nats-server binary its `nats_servers` finds.

`bench/` is not a package; `nats_servers.py` is loaded from its file (under its own module name, once).
"""

from __future__ import annotations

import functools
import importlib.util
import pathlib

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"


@functools.cache
def find_nats_server() -> str | None:
    """`bench/nats_servers.find_nats_server()`: the binary, or None (callers skip)."""
    spec = importlib.util.spec_from_file_location("bench_nats_servers_kit", BENCH / "nats_servers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.find_nats_server()
