"""Which TCP ports a process holds sockets on, by state — read from /proc (Linux), for the serve tests.

A socket is the process's when its inode is the target of one of `/proc/<pid>/fd/*`; its local port and
state come from /proc/net/tcp and tcp6 (state 0A: LISTEN, 01: ESTABLISHED).
"""

from __future__ import annotations

import glob
import os

LISTEN, ESTABLISHED = "0A", "01"


def owned_ports(pid: int, state: str) -> set[int]:
    """Local ports of `pid`'s TCP sockets in `state`."""
    inodes = set()
    for fd in glob.glob(f"/proc/{pid}/fd/*"):
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as file:
            for row in file.read().splitlines()[1:]:
                fields = row.split()
                if fields[3] == state and fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports
