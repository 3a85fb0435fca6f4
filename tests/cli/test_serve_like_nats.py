"""`jsraft serve` started with nats-server's own command lines, as client test harnesses start nats-server.

Method: real `python -m jsraft serve` processes. A harness's command line (`-p -1 -m -1 -a 127.0.0.1 -js
-sd=DIR --ports_file_dir D`, no name) must start a node; the ports file is polled with a deadline, its
URLs must answer (a NATS INFO on the client URL, `/varz` on the monitoring one). The listening sockets the
process owns are read from /proc (its fds' socket inodes against /proc/net/tcp in state LISTEN): a
standalone node must own exactly the client and monitor listeners, so two of them share a machine. The
name must survive a restart on the same store directory (INFO's server_name and server_id the same). stderr
must carry nats-server's readiness lines and nothing more while clients work, and the ports file must be
gone after SIGTERM. With `-js` and no `-sd`, the store goes to the default directory under `$TMPDIR`,
logged with nats-server's warning (without `-js` a private one: test_serve_accounts).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from proc_sockets import LISTEN, owned_ports

from jsraft.cli import build_parser
from jsraft.cli.serve import DEFAULT_STORE_DIR, config_from_args

DEADLINE_S = 60.0


def serve(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "jsraft", "serve", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env)


def poll(predicate, what: str, timeout_s: float = DEADLINE_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached in {timeout_s}s")


def ports_file(directory, pid: int) -> dict | None:
    path = os.path.join(directory, f"nats-server_{pid}.ports")
    try:
        with open(path) as file:
            return json.load(file)
    except FileNotFoundError:
        return None


def nats_info(url: str) -> dict:
    host, port = url.removeprefix("nats://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        line = sock.makefile("rb").readline()
    assert line.startswith(b"INFO ")
    return json.loads(line[5:])


def stop(process: subprocess.Popen) -> str:
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    return stderr


def read_until_ready(process: subprocess.Popen) -> list[str]:
    """stderr lines up to `Server is ready` (the process keeps running)."""
    lines = []
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        assert line, f"serve exited before it was ready: {lines}"
        lines.append(line.rstrip("\n"))
        if line.rstrip().endswith("Server is ready"):
            return lines
    raise AssertionError(f"no 'Server is ready' in {DEADLINE_S}s: {lines}")


def test_a_harness_command_line_without_name_starts_and_keeps_its_name(tmp_path):
    store, ports_dir = tmp_path / "js", tmp_path / "ports"
    ports_dir.mkdir()
    argv = ("-p", "-1", "-m", "-1", "-a", "127.0.0.1", "-js", f"-sd={store}", "--ports_file_dir", str(ports_dir))
    first, second = serve(*argv), serve("-p", "-1", "-a", "127.0.0.1", "-js", f"-sd={tmp_path / 'other'}")
    try:
        lines = read_until_ready(first)
        read_until_ready(second)  # a second standalone node on the same machine: no cluster port to fight over
        ports = poll(lambda: ports_file(ports_dir, first.pid), "the ports file")
        assert set(ports) == {"nats", "monitoring"}, ports
        (client_url,), (monitor_url,) = ports["nats"], ports["monitoring"]
        info = nats_info(client_url)
        with urllib.request.urlopen(f"{monitor_url}/varz", timeout=10) as response:
            varz = json.loads(response.read())
        assert varz["server_name"] == info["server_name"] and info["server_name"].startswith("N")
        client_port, monitor_port = int(client_url.rsplit(":", 1)[1]), int(monitor_url.rsplit(":", 1)[1])
        assert owned_ports(first.pid, LISTEN) == {client_port, monitor_port}
        assert len(owned_ports(second.pid, LISTEN)) == 1
        assert f"Listening for client connections on 127.0.0.1:{client_port}" in lines[-2]
    finally:
        stop(second)
        stop(first)
    assert ports_file(ports_dir, first.pid) is None  # removed on the way out

    again = serve("-p", "-1", "-a", "127.0.0.1", "-js", f"-sd={store}", "--ports_file_dir", str(ports_dir))
    try:
        read_until_ready(again)
        (client_url,) = poll(lambda: ports_file(ports_dir, again.pid), "the ports file")["nats"]
        restarted = nats_info(client_url)
        assert (restarted["server_name"], restarted["server_id"]) == (info["server_name"], info["server_id"])
    finally:
        stop(again)


def test_stderr_is_quiet_after_ready_while_clients_work(tmp_path):
    process = serve("-p", "-1", "-a", "127.0.0.1", "-js", f"-sd={tmp_path / 'js'}", "--ports_file_dir",
                    str(tmp_path))
    try:
        lines = read_until_ready(process)
        assert "Starting jsraft" in lines[0] and "Store Directory" in "".join(lines)
        (client_url,) = poll(lambda: ports_file(tmp_path, process.pid), "the ports file")["nats"]
        host, port = client_url.removeprefix("nats://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            reader = sock.makefile("rb")
            reader.readline()
            request = json.dumps({"name": "Q", "subjects": ["q.>"], "storage": "file"})
            sock.sendall(b'CONNECT {"verbose":false,"headers":true}\r\nSUB _R 1\r\n'
                         + b"PUB $JS.API.STREAM.CREATE.Q _R %d\r\n%s\r\n" % (len(request), request.encode()))
            created = [reader.readline() for _ in range(2)]
            assert created[0].startswith(b"MSG _R 1") and b'"config"' in created[1], created
            sock.sendall(b"PUB q.one _R 2\r\nhi\r\n")
            acked = [reader.readline() for _ in range(2)]
            assert acked[0].startswith(b"MSG _R 1") and b'"seq":1' in acked[1], acked
    finally:
        stderr = stop(process)
    after_ready = stderr.splitlines()
    # Only the stop lines follow: nothing was logged while the client worked.
    assert all("Trapped SIGTERM" in line or "stopped cleanly" in line for line in after_ready), after_ready


def test_no_store_dir_with_jetstream_uses_the_default_under_tmpdir_and_says_so(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    process = serve("-p", "-1", "-a", "127.0.0.1", "-js", env=env)
    try:
        lines = read_until_ready(process)
    finally:
        stop(process)
    default = tmp_path / "jsraft" / "jetstream"
    assert (default / "node.json").exists()
    assert any(repr(str(default)) in line for line in lines), lines
    assert any("[WRN] Temporary storage directory used" in line for line in lines), lines


@pytest.mark.parametrize("argv, field, value", [
    (["-p", "-1"], "client_port", 0),
    (["-m", "-1"], "monitor_port", 0),
    (["-DV"], None, None),
    (["--cluster", "nats://127.0.0.1:6333"], "cluster_listen", True),
    ([], "cluster_listen", None),
])
def test_nats_server_flag_values(tmp_path, argv, field, value):
    args = build_parser().parse_args(["serve", "-sd", str(tmp_path / "js"), *argv])
    config = config_from_args(args)
    assert config.store_dir == str(tmp_path / "js") and config.name.startswith("N") and len(config.name) == 56
    if field is not None:
        assert getattr(config, field) == value
    else:
        assert args.log_level == "debug"
    assert not (tmp_path / "js").exists()  # parsing touches nothing
    assert DEFAULT_STORE_DIR.endswith(os.path.join("jsraft", "jetstream"))
