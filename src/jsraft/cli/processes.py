"""The processes of a local cluster started by `jsraft cluster up`: who they are, whether they answer on
their ports, and stopping exactly them (layer L6).

Owns: recognising a recorded pid as ours (`is_ours`: it still runs `jsraft serve` for the recorded store
directory), liveness, SIGTERM-then-SIGKILL stopping, which process listens on a TCP port (`/proc/net/tcp`
and the process's socket inodes), and the monitoring reads (`get_json`, `meta_leaders`).

Invariants:
  1. A pid is signalled only while it runs `jsraft serve` with the recorded store directory: a pid reused
     by another program is left alone.
  2. `listens_on(pid, port)` is true only when that very process holds a listening socket on the port
     (Linux `/proc`); where `/proc` is missing it answers None (unknown), never a guess.

Imports: stdlib only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

POLL_S = 0.1


# --- Processes --------------------------------------------------------------------------------------------

def _cmdline(pid: int) -> list[str]:
    """The argv of `pid`, or [] if it is gone or a zombie (whose cmdline is empty)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return [arg.decode(errors="replace") for arg in handle.read().split(b"\0") if arg]
    except OSError:
        pass
    if os.path.isdir("/proc"):
        return []
    result = subprocess.run(["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True)
    return result.stdout.split()


def is_ours(pid: int, store_dir: str) -> bool:
    """Does `pid` run `jsraft serve` for `store_dir`? Only then may `down` signal it."""
    argv = _cmdline(pid)
    if "serve" not in argv or not any(arg == "jsraft" or arg.endswith("/jsraft") for arg in argv):
        return False
    return any(argv[i] in ("--store-dir", "-sd") and argv[i + 1] == store_dir for i in range(len(argv) - 1))


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except (OSError, IndexError):
        return True


def _signal(pid: int, store_dir: str, signum: int) -> bool:
    if not is_ours(pid, store_dir):
        return False
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return False
    return True


def stop_nodes(nodes: list[dict[str, Any]], timeout_s: float) -> list[dict[str, Any]]:
    """SIGTERM every recorded node still ours, SIGKILL after `timeout_s`; return the ones still alive."""
    signalled = [node for node in nodes if _signal(node["pid"], node["store_dir"], signal.SIGTERM)]
    for node in nodes:
        if node not in signalled:
            print(f"{node['name']}: pid {node['pid']} is not running jsraft serve for {node['store_dir']}: "
                  "left alone", file=sys.stderr)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(is_alive(node["pid"]) for node in signalled):
        time.sleep(POLL_S)
    stubborn = [node for node in signalled if is_alive(node["pid"])]
    for node in stubborn:
        print(f"{node['name']}: pid {node['pid']} still running after {timeout_s:g}s: SIGKILL", file=sys.stderr)
        _signal(node["pid"], node["store_dir"], signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(is_alive(node["pid"]) for node in stubborn):
        time.sleep(POLL_S)
    for node in signalled:
        if not is_alive(node["pid"]):
            print(f"{node['name']}: pid {node['pid']} stopped", file=sys.stderr)
    return [node for node in signalled if is_alive(node["pid"])]


# --- Monitoring ------------------------------------------------------------------------------------------

def get_json(url: str, timeout_s: float = 1.0) -> tuple[int, Any]:
    """`(status, body)` of a GET; `(0, None)` if nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        try:
            return error.code, json.loads(error.read())
        except ValueError:
            return error.code, None
    except (OSError, ValueError):
        return 0, None


def meta_leaders(nodes: list[dict[str, Any]]) -> dict[str, str | None]:
    leaders = {}
    for node in nodes:
        status, body = get_json(f"http://127.0.0.1:{node['monitor_port']}/jsz")
        leaders[node["name"]] = body["meta_cluster"]["leader"] if status == 200 and body else None
    return leaders


# --- Who listens on a port -------------------------------------------------------------------------------

def _listening_inodes(port: int) -> set[int] | None:
    """Socket inodes listening on TCP `port` (any address), or None without /proc."""
    found: set[int] = set()
    seen_table = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                lines = handle.readlines()[1:]
        except OSError:
            continue
        seen_table = True
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(int(fields[9]))
    return found if seen_table else None


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def listens_on(pid: int, port: int) -> bool | None:
    """Invariant 2."""
    listening = _listening_inodes(port)
    if listening is None:
        return None
    return bool(listening & _socket_inodes(pid))


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the node's own listener does (trio sets SO_REUSEADDR): a port whose last connections linger
        # in TIME_WAIT is free to it, and a port another process listens on is not.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True
