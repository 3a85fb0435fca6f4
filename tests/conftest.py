"""Session-wide setup for the whole suite.

jsraft's modules are compiled to bytecode once, before any test runs: many tests start `jsraft serve`
processes, and where PYTHONDONTWRITEBYTECODE is set (these machines set it) each of them would otherwise
compile all ~250 modules from source again (0.3–0.5 s per process, `bench/startup_time.py`). Importing
reads bytecode whatever that variable says; only writing it is suppressed, and `compileall` writes it
explicitly (into `src/jsraft/**/__pycache__`, ignored by git).

Hypothesis's per-example deadline (200 ms by default) is off for the whole suite: it measures wall time,
which on a shared 2-core machine swings with other jobs, so it failed correct properties at load ~25
(`tests/meta/test_entries.py`, session 11). No property here is about speed; speed is measured in `bench/`.

No test may leave an anonymous temporary file or directory behind (`no_temp_leftovers`): an audit hook
records every `tempfile.mkstemp`/`mkdtemp` (so `NamedTemporaryFile`, `TemporaryDirectory` and the rest)
that this pytest process makes directly under `tempfile.gettempdir()` with the default `tmp` prefix, and
which test made it; whatever of those still exists at the session's end fails the session, named with its
test. It watches this process's own calls, not a listing of /tmp, because other test runs and benchmarks
share /tmp at the same time and a before/after listing would blame their files on this run. What it does
not see: files made by child processes (`jsraft serve`, the bench scripts the smoke tests run, Spark's
Python workers, nats-server, node), files made without `tempfile`, and named-prefix directories.
"""

from __future__ import annotations

import compileall
import gc
import os
import pathlib
import sys
import tempfile

import pytest
from hypothesis import settings

settings.register_profile("jsraft", deadline=None)
settings.load_profile("jsraft")

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "jsraft"
TEMP_ROOT = tempfile.gettempdir()
temp_made: dict[str, str] = {}  # path -> the test (PYTEST_CURRENT_TEST) that made it


def _record_temp(event: str, args: tuple) -> None:
    """Audit hook: each anonymous `tmp*` name `tempfile` makes directly under TEMP_ROOT, and by which test."""
    if event not in ("tempfile.mkstemp", "tempfile.mkdtemp"):
        return  # the hook sees every audit event of the process: leave the others at one comparison
    path = args[0]
    if os.path.dirname(path) == TEMP_ROOT and os.path.basename(path).startswith("tmp"):
        temp_made[path] = os.environ.get("PYTEST_CURRENT_TEST", "collection (outside any test)")


def pytest_configure(config) -> None:  # noqa: ARG001 — pytest's hook signature
    compileall.compile_dir(str(SRC), quiet=1)
    # Installed before collection so that a module which makes a temporary file at import is seen too.
    # An audit hook cannot be removed; it lives as long as this process, which is the test session.
    sys.addaudithook(_record_temp)


@pytest.fixture(scope="session", autouse=True)
def no_temp_leftovers():
    """Fail the session if a test left an anonymous temporary file or directory in TEMP_ROOT (module
    docstring). Session-scoped and autouse here, so set up before the other session fixtures and torn down
    after them: what one of them removes in its own teardown (the Spark session's) is gone when this looks."""
    yield
    gc.collect()  # a temporary object that removes its file when collected does so now, not at exit
    left = {path: test for path, test in temp_made.items() if os.path.lexists(path)}
    if left:
        lines = [f"  {path} ({_size(path)}) made by {test}" for path, test in sorted(left.items())]
        pytest.fail("temporary files left in " + TEMP_ROOT + " (use tmp_path, or a with-managed "
                    "NamedTemporaryFile/TemporaryDirectory):\n" + "\n".join(lines), pytrace=False)


def _size(path: str) -> str:
    if os.path.isdir(path) and not os.path.islink(path):
        return "a directory"
    return f"{os.path.getsize(path):,} bytes"
