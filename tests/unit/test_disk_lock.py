"""The store directory lock (`jsraft.disk.lock`).

Method: real `flock` on real files under a temporary directory. A second opener in this process and one
in a child process are both refused with `StoreLocked` naming the directory and the holder's pid; the
probe for read-only tools sees the same; a holder killed with SIGKILL leaves no stale lock (the kernel
drops it), which is what lets a crashed node restart without an operator.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from jsraft.disk.lock import LOCK_FILE, acquire_store_lock, ensure_not_locked
from jsraft.errors import StoreLocked

_HOLDER = """
import sys
from jsraft.disk.lock import acquire_store_lock
lock = acquire_store_lock(sys.argv[1])
print("held", flush=True)
sys.stdin.read()  # hold until the parent closes our stdin or kills us
"""


def test_second_opener_in_this_process_is_refused_until_release(tmp_path):
    store_dir = str(tmp_path / "node")
    lock = acquire_store_lock(store_dir)
    assert lock.held and os.path.exists(os.path.join(store_dir, LOCK_FILE))
    with pytest.raises(StoreLocked) as refused:
        acquire_store_lock(store_dir)
    assert os.path.abspath(store_dir) in refused.value.description
    assert f"pid {os.getpid()}" in refused.value.description
    assert refused.value.err_code == 20020
    with pytest.raises(StoreLocked):
        ensure_not_locked(store_dir)
    lock.release()
    lock.release()  # idempotent
    assert not lock.held
    ensure_not_locked(store_dir)
    acquire_store_lock(store_dir).release()


def test_probe_of_a_directory_never_locked_passes(tmp_path):
    ensure_not_locked(str(tmp_path))
    assert not os.path.exists(tmp_path / LOCK_FILE), "the probe must not create the lock file"


def test_a_holder_in_another_process_is_named_and_a_killed_one_leaves_no_lock(tmp_path):
    store_dir = str(tmp_path / "node")
    child = subprocess.Popen([sys.executable, "-c", _HOLDER, store_dir], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(StoreLocked) as refused:
            acquire_store_lock(store_dir)
        assert f"pid {child.pid}" in refused.value.description
        with pytest.raises(StoreLocked):
            ensure_not_locked(store_dir)
        # The refused opener must not have overwritten the holder's pid.
        assert open(os.path.join(store_dir, LOCK_FILE)).read().strip() == str(child.pid)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    lock = acquire_store_lock(store_dir)  # a crash leaves no stale lock behind
    assert open(os.path.join(store_dir, LOCK_FILE)).read().strip() == str(os.getpid())
    lock.release()
