"""`bench/nats_servers.py` (real nats-server and `jsraft serve` processes) loaded for the interop tests:
`from bench_servers import servers`."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"


def _load_servers():
    spec = importlib.util.spec_from_file_location("bench_nats_servers", BENCH / "nats_servers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_nats_servers", module)
    spec.loader.exec_module(module)
    return module


servers = _load_servers()
