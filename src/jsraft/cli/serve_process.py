"""The process around `jsraft serve`'s node: its signals, its pid file, nats-server's `--signal`, and its
open-file limit (L6).

Owns: `watch_signals` (what each signal does to a running node), `PidFile` (nats-server's `pid_file` /
`-P`: the process id, written at start and removed at a clean stop), `signal_command` (nats-server's
`-sl/--signal CMD[=PID|PIDFILE]`: send a running node one of its signals, as the NATS Helm chart's preStop
hook does with `nats-server -sl=ldm=/var/run/nats/nats.pid`), and `raise_open_file_limit`.

Invariants:
  1. SIGTERM and SIGINT stop the node (`stop` set); SIGHUP reloads the certificates; SIGUSR2 starts lame
     duck mode once (`server.ops.lame_duck`), which sets `stop` when done; SIGUSR1 (nats-server: reopen the
     log file) is logged and changes nothing, since `jsraft serve` logs to stderr — no signal of
     nats-server's command set kills the node unless it means to.
  2. The pid file holds the decimal pid and a newline, written whole (temporary file, then rename) once the
     node holds its store directory (a second `jsraft serve` refused there leaves the first one's file); it is
     removed when `serve` ends, only if it still names this process.
  3. `signal_command` sends exactly one signal to exactly one process, or none: a PID, else the pid read from
     a file, else the one `jsraft serve` process running (none or several is an error naming them); an
     unknown command is a usage error (exit 2), a process it cannot find or signal an error (exit 1).
  4. `raise_open_file_limit` sets the soft RLIMIT_NOFILE to the hard limit (capped at
     `OPEN_FILES_SOFT_MAX`), never lowers it, and never fails the start: a limit it cannot change is logged
     and left as it was. Why: every stream replica holds open descriptors (its WAL segment, hard-state
     slot and store block: three for an R1 stream), so the common default soft limit of 1,024 would stop a
     node at about 330 streams; nats-server gets the same raise from Go's runtime, which sets the soft limit
     to the hard one at the start of every program since Go 1.19.

Imports: stdlib, trio, L5 (`server.ops.lame_duck`). Reference: nats-server `main.go` (`-sl`, `-P`),
`server/signal.go` (`ProcessSignal`, the command -> signal table), `server/service.go`.
"""

from __future__ import annotations

import logging
import os
import resource
import signal
import sys
from typing import Any

import trio

from jsraft.server.ops.lame_duck import lame_duck

log = logging.getLogger("jsraft.serve")

# nats-server's `-sl` commands and the signal each sends (server/signal.go).
SIGNAL_COMMANDS = {"stop": signal.SIGKILL, "quit": signal.SIGINT, "term": signal.SIGTERM,
                   "reopen": signal.SIGUSR1, "reload": signal.SIGHUP, "ldm": signal.SIGUSR2}
_SIGNAL_FLAGS = (b"-sl", b"--signal", b"-signal", b"--sl")
HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
# Invariant 4's cap, for a hard limit of "unlimited" (or one in the billions): Go's runtime caps the same way
# on some systems, and a soft limit that large only makes the kernel's per-process file table bigger.
OPEN_FILES_SOFT_MAX = 1 << 20


async def watch_signals(signals: Any, node: Any, monitor: Any, stop: trio.Event) -> None:
    """Invariant 1, for the node `jsraft serve` runs (`signals`: trio's receiver of `HANDLED`)."""
    async def lame_duck_then_stop() -> None:
        await lame_duck(node.monitor_parts, lambda: node.online() - node.cluster_urls.lame_ducks(), node.runtime,
                        node.cluster_urls.leave)
        log.info("Lame duck mode done: stopping")
        stop.set()
    lame = False
    async with trio.open_nursery() as nursery:
        async for signum in signals:
            if signum == signal.SIGHUP:
                log.info("Trapped SIGHUP signal: reloading TLS certificates")
                node.reload_tls()
                if monitor is not None:
                    monitor.reload_tls()
            elif signum == signal.SIGUSR2:
                log.info("Trapped SIGUSR2 signal%s", ": already in lame duck mode" if lame else "")
                if not lame:
                    lame = True
                    nursery.start_soon(lame_duck_then_stop)
            elif signum == signal.SIGUSR1:
                log.info("Trapped SIGUSR1 signal: no log file to reopen (jsraft serve logs to stderr)")
            else:
                log.info("Trapped %s signal: stopping", signal.Signals(signum).name)
                return stop.set()


class PidFile:
    """Invariant 2."""

    def __init__(self, path: str) -> None:
        self.path = path

    def write(self) -> "PidFile":
        temporary = f"{self.path}.tmp"
        with open(temporary, "w") as file:
            file.write(f"{os.getpid()}\n")
        os.replace(temporary, self.path)
        return self

    def remove(self) -> None:
        try:
            with open(self.path) as file:
                mine = file.read().strip() == str(os.getpid())
            if mine:
                os.unlink(self.path)
        except OSError:
            pass


def signal_command(expression: str) -> int:
    """Invariant 3: `CMD[=PID|PIDFILE]`; the exit status, after a line on stderr when it failed."""
    command, _, target = expression.partition("=")
    signum = SIGNAL_COMMANDS.get(command.strip().lower())
    if signum is None:
        print(f"jsraft serve: unknown signal {command!r} (one of {', '.join(SIGNAL_COMMANDS)})", file=sys.stderr)
        return 2
    try:
        pid = _resolve(target.strip())
        os.kill(pid, signum)
    except (OSError, ValueError) as error:
        print(f"jsraft serve: --signal {command}: {error}", file=sys.stderr)
        return 1
    return 0


def _resolve(target: str) -> int:
    if target.isdigit():
        return int(target)
    if target:
        with open(target) as file:
            text = file.read().strip()
        if not text.isdigit():
            raise ValueError(f"{target} holds no process id ({text[:40]!r})")
        return int(text)
    pids = serve_pids()
    if len(pids) != 1:
        raise ValueError("no jsraft serve process running" if not pids else
                         f"several jsraft serve processes running ({', '.join(map(str, pids))}): name one")
    return pids[0]


def serve_pids() -> list[int]:
    """The pids of the `jsraft serve` processes running (this one left out), read from /proc."""
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                argv = file.read().split(b"\0")
        except OSError:
            continue
        names = [os.path.basename(arg) for arg in argv]
        signalling = any(arg.split(b"=")[0] in _SIGNAL_FLAGS for arg in argv)  # another `--signal` command
        if b"serve" in argv and b"jsraft" in names and not signalling:
            found.append(int(entry))
    return sorted(found)


def raise_open_file_limit() -> tuple[int, int]:
    """Invariant 4: the soft open-file limit raised to the hard one; returns (soft, hard) as they are after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = OPEN_FILES_SOFT_MAX if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES_SOFT_MAX)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (OSError, ValueError) as error:
            log.warning("open-file limit left at %d (hard %d): %s", soft, hard, error)
    return soft, hard
