"""`scripts/cluster.py up/down`: a 3-node cluster of real `jsraft serve` processes on loopback.

Method: pick a base port in a high range whose client, cluster and monitor ports (P+i, P+2000+i, P+4000+i)
are all free; run `cluster.py up`, check its output (one line per node, exactly), each node's `/healthz`,
that every `/jsz` names the same meta leader and every `/varz` shows a link to each other node; check a
second `up` on the same directory is refused; run `cluster.py down` and check every process is gone. A
process that `down` did not start (a pid in cluster.json running something else) must be left alone.
Whatever happens, the test kills what it started.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "cluster.py"
LINE = re.compile(r"^(n\d+) (\d+) nats://127\.0\.0\.1:(\d+) http://127\.0\.0\.1:(\d+)$")


def cluster(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_base(nodes: int) -> int:
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 40000)
        if all(port_free(base + offset + i) for offset in (0, 2000, 4000) for i in range(nodes)):
            return base
    raise AssertionError("no free port range found")


def get(port: int, path: str) -> tuple[int, dict | None]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
    except OSError:
        return 0, None


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"  # exited, not yet reaped by init
    except FileNotFoundError:
        return True


def poll(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached in {timeout_s}s")


def test_up_then_down(tmp_path):
    directory = tmp_path / "cluster"
    base = free_base(3)
    pids: list[int] = []
    try:
        result = cluster("up", "--nodes", "3", "--dir", str(directory), "--port", str(base))
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert len(lines) == 3, result.stdout
        parsed = [LINE.fullmatch(line).groups() for line in lines]
        pids = [int(pid) for _, pid, _, _ in parsed]
        assert [name for name, *_ in parsed] == ["n1", "n2", "n3"]
        assert [int(port) for *_, port, _ in parsed] == [base, base + 1, base + 2]
        monitors = [int(mport) for *_, mport in parsed]
        assert monitors == [base + 4000, base + 4001, base + 4002]
        state = json.loads((directory / "cluster.json").read_text())
        assert [node["pid"] for node in state["nodes"]] == pids

        for port in monitors:
            assert get(port, "/healthz") == (200, {"status": "ok"})
        leaders = {get(port, "/jsz")[1]["meta_cluster"]["leader"] for port in monitors}
        assert len(leaders) == 1 and leaders <= {"n1", "n2", "n3"}, leaders
        varz = get(monitors[1], "/varz")[1]
        assert (varz["server_name"], varz["port"], varz["cluster"]["port"]) == ("n2", base + 1, base + 2001)
        assert {peer["name"] for peer in varz["cluster"]["peers"]} == {"n1", "n3"}
        for port in monitors:  # `up` waited for a full mesh: an R3 create can be placed at once
            peers = get(port, "/varz")[1]["cluster"]["peers"]
            assert len(peers) == 2 and all(peer["connected"] for peer in peers), (port, peers)

        again = cluster("up", "--nodes", "3", "--dir", str(directory), "--port", str(base))
        assert again.returncode == 2 and "still running" in again.stderr
        assert json.loads((directory / "cluster.json").read_text())["nodes"] == state["nodes"]

        down = cluster("down", "--dir", str(directory))
        assert down.returncode == 0, down.stderr
        assert all(gone(pid) for pid in pids), [pid for pid in pids if not gone(pid)]
        assert not (directory / "cluster.json").exists()
        for name in ("n1", "n2", "n3"):
            assert "stopped cleanly (stores closed)" in (directory / f"{name}.log").read_text()
    finally:
        for pid in pids:  # only if an assertion failed before `down` finished
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)


def test_down_leaves_alone_a_process_it_did_not_start(tmp_path):
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "cluster.json").write_text(json.dumps({"nodes": [
            {"name": "n1", "pid": stranger.pid, "store_dir": str(tmp_path / "n1")}]}))
        result = cluster("down", "--dir", str(tmp_path))
        assert result.returncode == 0, result.stderr
        assert "is not running jsraft serve" in result.stderr
        assert stranger.poll() is None, "down signalled a process it did not start"
    finally:
        stranger.kill()
        stranger.wait()
    assert cluster("down", "--dir", str(tmp_path / "never")).returncode == 0
