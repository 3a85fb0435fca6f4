"""`jsraft serve` binds its client port before importing the node (`cli.early_listen`): what the scan
accepts and refuses, that a mismatching configuration closes the early socket, and that a client which
connects to a starting server is served (gets INFO) on that socket.

Method: `bind_early` on real loopback sockets (port 0, or a port held by the test); then the real command
in a subprocess, a raw TCP client that connects as soon as the port accepts (polled with a deadline) and
reads the first line.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

from jsraft.cli.early_listen import bind_early


def test_binds_the_address_the_flags_name():
    early = bind_early(["-p", "-1", "-a", "127.0.0.1", "-js", "-m", "8222"])
    assert early is not None
    with early.sock:
        assert early.sock.getsockname()[0] == "127.0.0.1" and early.sock.getsockname()[1] > 0
        probe = socket.create_connection(early.sock.getsockname(), timeout=5)  # it listens
        probe.close()


def test_refuses_what_it_cannot_be_sure_of():
    assert bind_early(["-c", "server.conf", "-p", "-1"]) is None  # a config file may set the port
    assert bind_early(["-a", "localhost", "-p", "-1"]) is None  # not a literal address
    assert bind_early(["-p", "not-a-port"]) is None
    assert bind_early(["-p", "70000"]) is None  # out of range: the configuration error comes later
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    with held:
        assert bind_early(["-p", str(held.getsockname()[1])]) is None  # taken: the node names it later


def test_take_closes_the_socket_when_the_configuration_differs():
    early = bind_early(["-p", "-1"])
    assert early is not None
    assert early.take("127.0.0.1", 4222) is None
    assert early.sock.fileno() == -1  # closed
    again = bind_early(["-p", "-1"])
    assert again is not None
    with again.sock:
        assert again.take("127.0.0.1", 0) is again.sock


def _connect_until(port: int, deadline: float) -> socket.socket:
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except ConnectionRefusedError:
            assert time.monotonic() < deadline, "the port never accepted"
            time.sleep(0.005)


def test_a_client_that_connects_while_the_node_starts_is_served(tmp_path):
    with socket.socket() as probe:  # a free port, released just before the server takes it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "jsraft", "serve", "-p", str(port), "-a", "127.0.0.1",
                                "-sd", str(tmp_path / "store")], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        client = _connect_until(port, deadline)
        with client:
            client.settimeout(max(1.0, deadline - time.monotonic()))
            first = client.makefile("rb").readline()
        assert first.startswith(b"INFO ")
        assert json.loads(first[5:])["port"] == port
    finally:
        process.terminate()
        process.wait(timeout=60)
