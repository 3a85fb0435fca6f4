"""Node processes for the chaos harness: start `python -m jsraft serve ...` in its own process group with
a log file, kill -9, SIGSTOP/SIGCONT, wait for exit — and a registry that kills every process it started
when the harness exits, normally, through `atexit`, or on SIGINT/SIGTERM.

Method: `subprocess.Popen(start_new_session=True)` puts each node in a process group of its own, so a
signal to the group reaches the node and anything it spawned and never the harness; `kill_groups` sends
SIGKILL to several groups in one tight loop (a coordinated power cut: no node gets to write after another
died). The registry holds every live `NodeProcess`; `cleanup_all` is idempotent.

Invariants:
  1. Every process started here is in `REGISTRY` until it has been reaped; `cleanup_all` SIGKILLs and reaps
     all of them (a paused process is killed too: SIGKILL needs no SIGCONT).
  2. Waits are bounded (`wait(timeout_s)`); nothing here sleeps and hopes.

Imports: stdlib only (test kit). Reference: ../shared/CHAOS.md "How faults are made".
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

KILL_WAIT_S = 10.0


class NodeProcess:
    """One `jsraft serve` process (or any command) in its own process group, logging to `log_path`."""

    def __init__(self, name: str, argv: Sequence[str], log_path: str, env: dict[str, str] | None = None,
                 cwd: str | None = None) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
        self._log = open(log_path, "ab", buffering=0)
        self._log.write(f"\n=== {time.strftime('%H:%M:%S')} start {' '.join(self.argv)}\n".encode())
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True)
        self.pgid = self.proc.pid  # start_new_session: the child leads a new session and process group
        self.paused = False
        REGISTRY.add(self)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, signum: int) -> None:
        """`signum` to the whole process group; a group already gone is ignored."""
        try:
            os.killpg(self.pgid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def kill(self, timeout_s: float = KILL_WAIT_S) -> int | None:
        """SIGKILL the group and reap the process; its exit status."""
        self.signal(signal.SIGKILL)
        return self.wait(timeout_s)

    def terminate(self, timeout_s: float = KILL_WAIT_S) -> int | None:
        """SIGTERM (a clean stop), then SIGKILL if it has not exited within `timeout_s`."""
        if self.paused:
            self.resume()
        self.signal(signal.SIGTERM)
        try:
            return self.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return self.kill()

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def wait(self, timeout_s: float = KILL_WAIT_S) -> int | None:
        """Wait (bounded, invariant 2) for the process to exit; `subprocess.TimeoutExpired` if it does not."""
        code = self.proc.wait(timeout=timeout_s)
        self._reaped()
        return code

    def _reaped(self) -> None:
        self.paused = False
        REGISTRY.discard(self)
        if not self._log.closed:
            self._log.write(f"=== {time.strftime('%H:%M:%S')} exit {self.proc.returncode}\n".encode())
            self._log.close()

    def __repr__(self) -> str:
        return f"NodeProcess({self.name!r}, pid={self.pid}, alive={self.alive()})"


def kill_groups(processes: Iterable[NodeProcess]) -> None:
    """SIGKILL every process group in one tight loop (no waiting in between), then reap them all."""
    processes = list(processes)
    for process in processes:
        process.signal(signal.SIGKILL)
    for process in processes:
        process.wait(KILL_WAIT_S)


def jsraft_argv(*args: str, module: str = "jsraft") -> list[str]:
    """`python -m jsraft ARGS...` with this interpreter (the venv's)."""
    return [sys.executable, "-m", module, *args]


class _Registry:
    """Every live process (invariant 1), and the exit hooks that kill them."""

    def __init__(self) -> None:
        self._live: set[NodeProcess] = set()
        self._lock = threading.Lock()
        self._installed = False

    def add(self, process: NodeProcess) -> None:
        with self._lock:
            self._live.add(process)
            if not self._installed:
                self._install()

    def discard(self, process: NodeProcess) -> None:
        with self._lock:
            self._live.discard(process)

    def live(self) -> list[NodeProcess]:
        with self._lock:
            return list(self._live)

    def cleanup_all(self) -> None:
        """SIGKILL and reap every process still registered (idempotent)."""
        processes = self.live()
        for process in processes:
            process.signal(signal.SIGKILL)
        for process in processes:
            try:
                process.wait(KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                pass

    def _install(self) -> None:
        """atexit, and SIGINT/SIGTERM handlers that clean up then defer to the previous handler. Signal
        handlers only from the main thread (Python's rule); elsewhere atexit alone."""
        self._installed = True
        atexit.register(self.cleanup_all)
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous = signal.getsignal(signum)
            if previous is None:
                continue  # installed from C (not Python's): leave it alone
            signal.signal(signum, self._handler(signum, previous))

    def _handler(self, signum: int, previous: Any) -> Any:
        def handle(received: int, frame: Any) -> None:
            self.cleanup_all()
            if callable(previous):
                previous(received, frame)
            elif previous == signal.SIG_DFL:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

        return handle


REGISTRY = _Registry()
cleanup_all = REGISTRY.cleanup_all
