"""Session-wide setup for the whole suite.

jsraft's modules are compiled to bytecode once, before any test runs: many tests start `jsraft serve`
processes, and where PYTHONDONTWRITEBYTECODE is set (these machines set it) each of them would otherwise
compile all ~250 modules from source again (0.3–0.5 s per process, `bench/startup_time.py`). Importing
reads bytecode whatever that variable says; only writing it is suppressed, and `compileall` writes it
explicitly (into `src/jsraft/**/__pycache__`, ignored by git).
"""

from __future__ import annotations

import compileall
import pathlib

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "jsraft"


def pytest_configure(config) -> None:  # noqa: ARG001 — pytest's hook signature
    compileall.compile_dir(str(SRC), quiet=1)
