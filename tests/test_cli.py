"""`jsraft check` and `jsraft demo`, run as a user runs them: the real console entry point in a subprocess.

Method: build stores on disk, damage some, run `python -m jsraft check ...`, and assert on exit codes
(0 clean, 1 damage, 2 usage), the JSON report's keys and the ranges it names, a replica that awaits an audit
(its `audit_pending` mark: named, not damage), and that checking changes nothing on disk (the bytes of every file are the same before and after).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from jsraft.disk import OsDisk
from jsraft.replica.install_mark import AuditMark
from jsraft.store import StoreConfig
from jsraft.store.blocks import block_name
from jsraft.store.filestore import FileStore


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jsraft", *args], capture_output=True, text=True, timeout=120)


def _make_store(directory: str, count: int = 2000) -> dict[int, tuple[int, int, int]]:
    store = FileStore.open(OsDisk(directory), StoreConfig(block_size=64 * 1024))
    store.append_batch([(s, f"o.{s % 3}", b"", b"p" * 100, s) for s in range(1, count + 1)])
    where = {s: (store.locate(s)[0].number, store.locate(s)[1], store.locate(s)[2]) for s in range(1, count + 1)}
    store.close()
    return where


def _digest_tree(root: str) -> dict[str, str]:
    result = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            result[os.path.relpath(path, root)] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    return result


def test_check_clean_store_json(tmp_path):
    root = str(tmp_path / "ORDERS")
    _make_store(root)
    result = _run("check", root, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    (stream,) = report["streams"]
    assert set(stream) >= {"name", "first_seq", "last_seq", "msgs", "bytes", "digest", "faults"}
    assert (stream["name"], stream["first_seq"], stream["last_seq"], stream["msgs"]) == ("ORDERS", 1, 2000, 2000)
    assert stream["faults"] == []


def test_check_names_damage_and_changes_nothing(tmp_path):
    root = str(tmp_path / "data")
    msgs = os.path.join(root, "streams", "ORDERS", "msgs")
    other = os.path.join(root, "streams", "EVENTS", "msgs")
    where = _make_store(msgs)
    _make_store(other, count=10)
    number, offset, length = where[777]
    with open(os.path.join(msgs, block_name(number)), "r+b") as handle:
        handle.seek(offset + length - 2)
        byte = handle.read(1)
        handle.seek(offset + length - 2)
        handle.write(bytes([byte[0] ^ 1]))
    before = _digest_tree(root)
    result = _run("check", root, "--json")
    assert result.returncode == 1, result.stderr
    report = {s["name"]: s for s in json.loads(result.stdout)["streams"]}
    assert report["ORDERS"]["faults"] == [{"first": 777, "last": 777, "kind": "corrupt"}]
    assert report["ORDERS"]["msgs"] == 1999
    assert report["EVENTS"]["faults"] == []
    assert _digest_tree(root) == before, "check must not change anything on disk"
    text = _run("check", root)
    assert text.returncode == 1 and "DAMAGED 777..777 (corrupt)" in text.stdout


def test_check_says_which_replica_awaits_an_audit_and_changes_nothing(tmp_path):
    root = str(tmp_path / "data")
    _make_store(os.path.join(root, "streams", "ORDERS", "msgs"), count=10)
    _make_store(os.path.join(root, "streams", "EVENTS", "msgs"), count=10)
    AuditMark(OsDisk(os.path.join(root, "streams", "ORDERS"))).set(42)  # what an unverified repair leaves
    before = _digest_tree(root)
    result = _run("check", root, "--json")
    assert result.returncode == 0, result.stderr  # not damage: the next audit decides
    report = {s["name"]: s for s in json.loads(result.stdout)["streams"]}
    assert report["ORDERS"]["awaits_audit_since"] == 42 and report["EVENTS"]["awaits_audit_since"] is None
    text = _run("check", root)
    assert text.returncode == 0 and "awaits an audit's confirmation since index 42" in text.stdout
    assert text.stdout.count("awaits an audit") == 1
    assert _digest_tree(root) == before, "check must not change anything on disk"


@pytest.mark.parametrize("args", [["check"], ["check", "/nonexistent/jsraft"], ["frobnicate"]])
def test_usage_errors_exit_2(args, tmp_path):
    assert _run(*args).returncode == 2


def test_check_empty_directory_is_a_usage_error(tmp_path):
    result = _run("check", str(tmp_path))
    assert result.returncode == 2 and "no store found" in result.stderr


def test_demo_runs_and_verifies(tmp_path):
    result = _run("demo", "--store", "--dir", str(tmp_path / "demo"), "--messages", "3000")
    assert result.returncode == 0, result.stderr
    assert "index and full-scan recovery agree: True" in result.stdout
    assert "damaged sequences: none" in result.stdout
