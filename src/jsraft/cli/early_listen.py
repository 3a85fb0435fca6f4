"""`jsraft serve`'s client port, bound before the node's modules are imported (layer L6).

Owns: `bind_early(args)`, which reads only the client host and port from `serve`'s raw arguments (`-a`,
`-p` and their long and Go-style spellings) and binds and listens on that address with the stdlib, and
`EarlyListener.take(host, port)`, the check that the node's final configuration asks for that same address.
Importing the server and compiling its modules takes a few hundred milliseconds; with the socket bound at
once, a client that connects in that time (nats-py's harness restarts a server and expects it back within
about a second) finds it listening, and gets the server's INFO as soon as the node serves the socket.

Invariants:
  1. Best effort, never an error: any argument this scan does not understand, a config file (`-c`, which
     may set the port), `--signal` (no node starts), a host that is not a literal IP address, or a bind that
     fails gives None, and the node binds its port itself as before (and names a port it cannot have).
  2. The socket is used only when the node's configuration asks for exactly that host and port (`-p -1`:
     port 0); otherwise it is closed before the node binds.

Imports: stdlib only (it runs before anything else is imported).
"""

from __future__ import annotations

import argparse
import ipaddress
import socket
from typing import NamedTuple

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 4222  # NodeConfig's defaults


def _scan(args: list[str]) -> tuple[str, int] | None:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("-c", "--config", "-config")
    parser.add_argument("-sl", "--signal", "-signal")  # signals a running node: binds nothing
    parser.add_argument("-a", "--client-host", "--addr", "--net", "-addr", "-net", dest="host")
    parser.add_argument("-p", "--client-port", "--port", "-port", dest="port", type=int)
    try:
        known, _ = parser.parse_known_args(args)
    except (argparse.ArgumentError, SystemExit, ValueError):
        return None
    if known.config is not None or known.signal is not None:
        return None
    host = known.host if known.host is not None else DEFAULT_HOST
    port = known.port if known.port is not None else DEFAULT_PORT
    return host, 0 if port == -1 else port


class EarlyListener(NamedTuple):
    sock: socket.socket
    host: str
    port: int  # as asked for: 0 for `-p -1`

    def take(self, host: str, port: int) -> socket.socket | None:
        """The socket if the configuration asks for the address it was bound for; else None, closed
        (invariant 2)."""
        if (self.host, self.port) == (host, port):
            return self.sock
        self.sock.close()
        return None


def bind_early(args: list[str]) -> EarlyListener | None:
    """A listening socket on the client address `args` name, or None (invariant 1)."""
    address = _scan(args)
    if address is None:
        return None
    host, port = address
    if not 0 <= port <= 65535:  # the node's configuration names the bad value (invariant 1)
        return None
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return None
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as trio's open_tcp_listeners
        sock.bind((host, port))
        sock.listen(socket.SOMAXCONN)
    except OSError:
        sock.close()
        return None
    return EarlyListener(sock, host, port)
