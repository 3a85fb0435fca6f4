"""`jsraft serve` as a user runs it: a real OS process, configured by flags and config files, stopped by
signals.

Method: `python -m jsraft serve ...` in a subprocess on free loopback ports. Configuration errors must exit
2 with one line naming the problem and touch nothing on disk. A running node is observed only through its
monitoring HTTP (`/healthz`, `/varz`, `/jsz`), polled with a deadline. A clean stop is proven by what it
leaves on disk: the stream store's fast-recovery index (deleted before the run) is written only by a clean
`FileStore.close`, and reopening the directory afterwards reads back every message.
"""

from __future__ import annotations

import json
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
from jsraft.server import NodeConfig


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
    (None, "", ["--name", "a"], "--store-dir required"),
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
    result = subprocess.run([sys.executable, "-m", "jsraft", "serve", *config_args, *args],
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
            if status != 200 or jsz["meta_cluster"]["leader"] != "s1" or not jsz["streams"]:
                return None
            return jsz["streams"][0] if jsz["streams"][0]["leader"] == "s1" else None
        stream = poll(stream_led, 30, "meta and stream leader s1")
        assert stream["name"] == "ORDERS" and stream["local"]["last_seq"] == stream["local"]["messages"] == 100
        assert get(monitor, "/nope")[0] == 404 and get(monitor, "/healthz")[0] == 200
        assert not os.path.exists(index)
    finally:
        returncode, stderr = stop(process, signum)
    assert returncode == 0, stderr
    assert f"received {signal.Signals(signum).name}: stopping" in stderr
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
