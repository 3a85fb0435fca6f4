"""`jsraft serve` raises its soft open-file limit to the hard one (`serve_process` invariant 4, `serve`
invariant 12), as nats-server's Go runtime does: every stream replica holds open descriptors, and the
common default soft limit of 1,024 would stop a node at about 330 streams.

Method: real processes started with a soft limit below the hard one (`preexec_fn` sets both). A `jsraft
serve` (no store directory, a free port chosen by `-p -1`) is read from /proc/<pid>/limits once it says it is
ready; the function itself runs in a child Python with real limits (up, never down), and in this process
against a stand-in `resource` module for what a test cannot set up for real (a hard limit of "unlimited" or
above the cap, a setrlimit that refuses: the limit is left, a warning logged, nothing raised).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys

import pytest

from jsraft.cli import serve_process
from jsraft.cli.serve_process import OPEN_FILES_SOFT_MAX

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/limits"), reason="reads /proc/<pid>/limits")

HARD = resource.getrlimit(resource.RLIMIT_NOFILE)[1]


def _limited(soft: int, hard: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return apply


def _open_files_line(pid: int) -> list[str]:
    with open(f"/proc/{pid}/limits") as file:
        for line in file:
            if line.startswith("Max open files"):
                return line.split()[3:5]  # soft, hard
    raise AssertionError("no 'Max open files' line")


def _raise_in_child(soft: int, hard: int) -> tuple[int, int]:
    code = "from jsraft.cli.serve_process import raise_open_file_limit; print(*raise_open_file_limit())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          preexec_fn=_limited(soft, hard), check=True)
    reported = tuple(int(word) for word in done.stdout.split())
    assert len(reported) == 2, done.stdout
    return reported[0], reported[1]


@pytest.mark.skipif(HARD < 512, reason="needs a hard open-file limit of at least 512")
def test_serve_raises_its_soft_limit_to_the_hard_one(tmp_path):
    hard = min(HARD, OPEN_FILES_SOFT_MAX)
    process = subprocess.Popen([sys.executable, "-m", "jsraft", "serve", "-p", "-1", "-a", "127.0.0.1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               preexec_fn=_limited(256, hard), cwd=tmp_path)
    try:
        lines = []
        while not any("Server is ready" in line for line in lines):
            line = process.stderr.readline()  # ends at the child's exit, so this loop cannot hang past it
            assert line, f"serve exited before it was ready: {lines}"
            lines.append(line)
        assert _open_files_line(process.pid) == [str(hard), str(hard)]
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)
    assert process.returncode == 0


@pytest.mark.skipif(HARD < 512, reason="needs a hard open-file limit of at least 512")
def test_the_soft_limit_goes_up_never_down():
    assert _raise_in_child(256, 512) == (512, 512)
    assert _raise_in_child(512, 512) == (512, 512)


class _FakeResource:
    """Stands in for the `resource` module inside `serve_process`: a limit in force, and a setrlimit that
    records its calls or refuses them."""

    RLIMIT_NOFILE = resource.RLIMIT_NOFILE
    RLIM_INFINITY = resource.RLIM_INFINITY

    def __init__(self, soft: int, hard: int, refuse: bool = False) -> None:
        self.limit = (soft, hard)
        self.refuse = refuse
        self.calls: list[tuple[int, int]] = []

    def getrlimit(self, which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return self.limit

    def setrlimit(self, which: int, limit: tuple[int, int]) -> None:
        assert which == resource.RLIMIT_NOFILE
        self.calls.append(limit)
        if self.refuse:
            raise ValueError("not allowed")
        self.limit = limit


def test_a_limit_it_cannot_raise_is_left_logged_and_the_start_goes_on(monkeypatch, caplog):
    fake = _FakeResource(256, 4096, refuse=True)
    monkeypatch.setattr(serve_process, "resource", fake)
    assert serve_process.raise_open_file_limit() == (256, 4096)
    assert fake.calls == [(4096, 4096)]
    assert "open-file limit left at 256 (hard 4096)" in caplog.text


@pytest.mark.parametrize("hard", [resource.RLIM_INFINITY, OPEN_FILES_SOFT_MAX * 4])
def test_an_unlimited_or_huge_hard_limit_is_capped(monkeypatch, hard):
    fake = _FakeResource(1024, hard)
    monkeypatch.setattr(serve_process, "resource", fake)
    assert serve_process.raise_open_file_limit() == (OPEN_FILES_SOFT_MAX, hard)
    assert fake.calls == [(OPEN_FILES_SOFT_MAX, hard)]


def test_an_unlimited_soft_limit_is_left(monkeypatch):
    fake = _FakeResource(resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    monkeypatch.setattr(serve_process, "resource", fake)
    assert serve_process.raise_open_file_limit() == (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    assert fake.calls == []
