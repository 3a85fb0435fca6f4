"""Helpers for tests that drive the `jsraft` command as an operator does: subprocesses, a local cluster
started with `jsraft cluster up` on free loopback ports, and a pseudo-terminal for prompts and progress
bars. Every wait is a poll with a deadline; every process started is stopped by its starter."""

from __future__ import annotations

import json
import os
import pty
import random
import select
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from jsraft.cli.processes import port_free

COMMAND_TIMEOUT_S = 300


def run(*args: str, env: dict[str, str] | None = None, timeout: float = COMMAND_TIMEOUT_S,
        stdin: str | None = None) -> subprocess.CompletedProcess:
    """`python -m jsraft ARGS` with stdin not a terminal (a pipe, or empty)."""
    return subprocess.run([sys.executable, "-m", "jsraft", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, input=stdin if stdin is not None else "")


def free_base(nodes: int) -> int:
    """A port P with P+o+i free for o in (0, 2000, 4000) and every node i (`cluster up`'s plan)."""
    rng = random.Random()
    for _ in range(400):
        base = rng.randrange(20000, 40000)
        if all(port_free(base + offset + i) for offset in (0, 2000, 4000) for i in range(nodes)):
            return base
    raise AssertionError("no free port range found")


class LocalCluster:
    """`jsraft cluster up --dir DIR --port P` … `jsraft cluster down --dir DIR`."""

    def __init__(self, directory: str, nodes: int = 3) -> None:
        self.directory = directory
        self.nodes = nodes
        self.base = 0
        self.up_result: subprocess.CompletedProcess | None = None

    def up(self) -> "LocalCluster":
        for _ in range(3):  # a port taken by another program between the check and the start: pick again
            self.base = free_base(self.nodes)
            self.up_result = run("cluster", "up", "--nodes", str(self.nodes), "--dir", self.directory,
                                 "--port", str(self.base), "--timeout", "60")
            if self.up_result.returncode == 0:
                return self
            if "already in use" not in self.up_result.stderr:
                break
        raise AssertionError(f"cluster up failed: {self.up_result.stderr}")

    def down(self) -> None:
        run("cluster", "down", "--dir", self.directory)

    @property
    def url(self) -> str:
        return ",".join(f"nats://127.0.0.1:{self.base + i}" for i in range(self.nodes))

    @property
    def env(self) -> dict[str, str]:
        return {"NATS_URL": self.url}

    def js(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess:
        return run(*args, env=self.env, **kwargs)

    def ok(self, *args: str, **kwargs: Any) -> str:
        """Run a command that must succeed; its stdout."""
        result = self.js(*args, **kwargs)
        assert result.returncode == 0, (args, result.returncode, result.stdout, result.stderr)
        return result.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args, "--json"))


def poll(predicate: Callable[[], Any], what: str, timeout_s: float = 60.0, interval_s: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"{what}: not reached within {timeout_s}s")


class Pty:
    """`python -m jsraft ARGS` with stdin, stdout and stderr on a pseudo-terminal."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        master, slave = pty.openpty()
        self.master = master
        self.output = b""
        self.process = subprocess.Popen([sys.executable, "-m", "jsraft", *args], stdin=slave, stdout=slave,
                                        stderr=slave, env={**os.environ, "TERM": "xterm", "COLUMNS": "120",
                                                           **(env or {})}, close_fds=True)
        os.close(slave)

    def _read(self, timeout_s: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout_s)
        if not ready:
            return True
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: the child closed the terminal
            return False
        if not data:
            return False
        self.output += data
        return True

    def expect(self, text: str, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while text.encode() not in self.output:
            if time.monotonic() > deadline or not self._read(0.2):
                raise AssertionError(f"{text!r} not shown; the terminal shows: {self.output.decode(errors='replace')}")

    def send(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\r")

    def wait(self, timeout_s: float = COMMAND_TIMEOUT_S) -> int:
        deadline = time.monotonic() + timeout_s
        while self._read(0.2) and time.monotonic() < deadline:
            if self.process.poll() is not None and not select.select([self.master], [], [], 0)[0]:
                break
        code = self.process.wait(timeout=max(1.0, deadline - time.monotonic()))
        os.close(self.master)
        return code

    @property
    def text(self) -> str:
        return self.output.decode(errors="replace")
