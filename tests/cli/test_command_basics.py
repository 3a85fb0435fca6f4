"""What a new user meets first: `jsraft --version`, help for every argument and option, port conflicts that
name the port (`jsraft serve`, `jsraft cluster up`), `jsraft demo --dir D` then `jsraft check D`, and
`jsraft demo | head` ending quietly.

Method: the real command in subprocesses (`python -m jsraft …`), ports held by a listening socket of the
test's own, and the click command tree walked for every parameter's help.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import click

from jsraft import __version__
from jsraft.cli import cli
from jsraft_kit import free_base, run


def test_version():
    result = run("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"jsraft {__version__}"


def _commands(group: click.Group, path: str = "jsraft"):
    context = click.Context(group)
    for name in group.list_commands(context):  # the group's lazy commands are loaded by get_command
        command = group.get_command(context, name)
        assert command is not None, f"{path} {name}"
        yield f"{path} {name}", command
        if isinstance(command, click.Group):
            yield from _commands(command, f"{path} {name}")


def test_every_argument_and_option_has_help():
    missing = []
    for path, command in _commands(cli):
        if path == "jsraft serve":  # its arguments go to serve's own parser, whose --help lists them
            assert "serve --help" in command.help
            continue
        assert command.help, f"{path} has no help"
        for param in command.params:
            if isinstance(param, click.Option) and not param.help:
                missing.append(f"{path} {param.opts[0]}")
            if isinstance(param, click.Argument) and param.human_readable_name.upper() not in command.help.upper():
                missing.append(f"{path} {param.human_readable_name} (not explained in the command's help)")
    assert not missing, missing


def _held_port() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock, sock.getsockname()[1]


def test_serve_names_the_port_it_cannot_have(tmp_path):
    sock, port = _held_port()
    with sock:
        for flag, role in (("--client-port", "client"), ("--cluster-port", "cluster"), ("--monitor-port", "monitoring")):
            ports = {"--client-port": "0", "--cluster-port": "0", flag: str(port)}
            result = run("serve", "--name", "n1", "--store-dir", str(tmp_path / role),
                         *(item for pair in ports.items() for item in pair), timeout=60)
            assert result.returncode == 1, result.stderr
            assert f"Address already in use ({role} port {port} on 127.0.0.1)" in result.stderr


def test_cluster_up_on_held_ports_fails_naming_them(tmp_path):
    base = free_base(3)
    holders = []
    try:
        for port in (base + 1, base + 4002):  # n2's client port, n3's monitoring port
            sock = socket.socket()
            sock.bind(("127.0.0.1", port))
            sock.listen()
            holders.append(sock)
        result = run("cluster", "up", "--dir", str(tmp_path / "c"), "--port", str(base), timeout=60)
    finally:
        for sock in holders:
            sock.close()
    assert result.returncode == 1
    assert f"{base + 1} (n2 client)" in result.stderr and f"{base + 4002} (n3 monitoring)" in result.stderr
    assert not os.path.exists(tmp_path / "c" / "cluster.json"), "nothing may have been started"


def test_demo_dir_then_check(tmp_path):
    directory = str(tmp_path / "demo")
    demo = run("demo", "--dir", directory, "--messages", "200", timeout=300)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    check = run("check", directory)
    assert check.returncode == 0, check.stdout + check.stderr
    names = [line.split(":")[0] for line in check.stdout.splitlines() if "first_seq=" in line]
    assert names == ["n1/ORDERS", "n2/ORDERS", "n3/ORDERS"] and check.stdout.rstrip().endswith("clean")


def test_demo_into_a_closed_pipe_ends_quietly(tmp_path):
    demo = subprocess.Popen([sys.executable, "-m", "jsraft", "demo", "--messages", "100", "--dir", str(tmp_path / "d")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = demo.stdout.readline()  # what `head -1` reads, then it goes away
    demo.stdout.close()
    _, stderr = demo.communicate(timeout=300)
    assert first.startswith(b"jsraft demo:")
    assert demo.returncode == 0 and b"Traceback" not in stderr and b"BrokenPipe" not in stderr, stderr


def test_a_node_is_believed_only_when_it_is_the_process_on_its_ports():
    """What `cluster up` checks before it reports success: the very process it started holds each port."""
    from jsraft.cli.cluster_cmd import _impostors
    from jsraft.cli.processes import listens_on

    sock, port = _held_port()
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert listens_on(os.getpid(), port) is True
        assert listens_on(stranger.pid, port) is False
        node = {"name": "n1", "pid": stranger.pid, "client_port": port, "cluster_port": port, "monitor_port": port}
        problems = _impostors([node])
        assert f"n1 (pid {stranger.pid}) is not the process listening on its client port {port}" in problems
    finally:
        stranger.kill()
        stranger.wait()
        sock.close()
