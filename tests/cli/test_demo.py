"""`jsraft demo`, the README's main job, run as a user runs it: `python -m jsraft demo` in a subprocess.

Method: run the demo with its defaults (5,000 messages; a 3-node cluster with real TCP and files) into a
directory under `tmp_path`, and assert its exit status and the lines that carry its claims: the leader
kill and a different new leader, every acked message read back, the restarted node caught up, and three
identical replica state tuples. The state tuples printed are also checked against the replica files left
on disk, read offline by `jsraft check --json`. A directory the demo did not make is never wiped.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jsraft", *args], capture_output=True, text=True, timeout=timeout)


def test_demo_survives_a_leader_kill_and_the_replicas_agree(tmp_path):
    directory = tmp_path / "demo"
    started = time.monotonic()
    result = run("demo", "--dir", str(directory))
    elapsed = time.monotonic() - started
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert elapsed < 60, f"the demo took {elapsed:.1f}s"
    assert "FAILED" not in out
    assert "created stream ORDERS: subjects ['ORDERS.*'], R3, file storage" in out
    assert "  acked   5000/5000" in out and "  acked   1000/1000" in out
    killed = re.search(r"^killed (n\d) \(a crash", out, re.M).group(1)
    assert re.search(r"^ORDERS leader: (n\d)$", out, re.M).group(1) == killed
    new_leader = re.search(r"^new ORDERS leader: (n\d) ", out, re.M).group(1)
    assert new_leader != killed
    assert "ok: every acknowledged message read back with its payload (6000/6000)" in out
    assert re.search(rf"ok: {killed} caught up in [\d.]+s", out)
    rows = re.findall(r"^(n\d) +(\d+) +(\d+) +(\d+) +(\d+) +([0-9a-f]{16})$", out, re.M)
    assert sorted(row[0] for row in rows) == ["n1", "n2", "n3"]
    assert len({row[1:] for row in rows}) == 1 and rows[0][1:4] == ("1", "6000", "6000")
    assert "ok: the replicas' state tuples (first_seq, last_seq, messages, bytes, digest) are identical" in out
    assert out.rstrip().splitlines()[-1].startswith("demo passed in ")

    for name, first, last, msgs, size, digest in rows:  # what was printed is what is on disk
        report = json.loads(run("check", str(directory / name), "--json").stdout)
        (stream,) = report["streams"]
        assert (stream["first_seq"], stream["last_seq"], stream["msgs"], stream["bytes"], stream["digest"]) == (
            int(first), int(last), int(msgs), int(size), digest)
        assert report["clean"]


def test_demo_refuses_a_directory_it_did_not_make(tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    result = run("demo", "--dir", str(tmp_path), "--messages", "10")
    assert result.returncode == 2 and "not made by jsraft demo" in result.stderr
    assert (tmp_path / "precious.txt").read_text() == "keep me"
    assert run("demo", "--messages", "0").returncode == 2


def test_demo_reports_a_node_that_does_not_catch_up_and_exits_1(tmp_path, monkeypatch):
    """The honest-failure path: the killed node never comes back, so the catch-up wait must run out and the
    demo must say so (`FAILED`, what it saw) and exit 1, keeping its data."""
    import io

    from jsraft.cli import demo
    from jsraft.cli.local_cluster import LocalCluster

    async def no_restart(self, name):
        return None

    monkeypatch.setattr(LocalCluster, "restart", no_restart)
    monkeypatch.setattr(demo, "CATCH_UP_TIMEOUT_S", 1.0)
    out = io.StringIO()
    assert demo.run_cluster_demo(str(tmp_path / "d"), 200, out) == 1
    text = out.getvalue()
    assert re.search(r"FAILED: n\d caught up within 1s \(its replica is at last_seq not open, acked up to 240\)", text), text
    assert "ok: every acknowledged message read back with its payload (240/240)" in text
    assert text.rstrip().splitlines()[-1].startswith("demo FAILED in ")
    assert (tmp_path / "d" / "n1").is_dir()
