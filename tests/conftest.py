"""Session-wide setup for the whole suite.

jsraft's modules are compiled to bytecode once, before any test runs: many tests start `jsraft serve`
processes, and where PYTHONDONTWRITEBYTECODE is set (these machines set it) each of them would otherwise
compile all ~250 modules from source again (0.3–0.5 s per process, `bench/startup_time.py`). Importing
reads bytecode whatever that variable says; only writing it is suppressed, and `compileall` writes it
explicitly (into `src/jsraft/**/__pycache__`, ignored by git).

Hypothesis's per-example deadline (200 ms by default) is off for the whole suite: it measures wall time,
which on a shared 2-core machine swings with other jobs, so it failed correct properties at load ~25
(`tests/meta/test_entries.py`, session 11). No property here is about speed; speed is measured in `bench/`.
"""

from __future__ import annotations

import compileall
import pathlib

from hypothesis import settings

settings.register_profile("jsraft", deadline=None)
settings.load_profile("jsraft")

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "jsraft"


def pytest_configure(config) -> None:  # noqa: ARG001 — pytest's hook signature
    compileall.compile_dir(str(SRC), quiet=1)
