"""A FileStore whose block rolls sync in the background (store/fs_append.py invariant 3): the same store on
disk, and a crash at any step of a roll's job opens as a crash before or after that step.

Method: real files. A store with a `background` runner rolls its blocks (64 KiB, messages of ~3 KiB) while
the runner decides when each roll's job runs: `_HeldJobs` queues the jobs and runs them only when the
store waits for one (`settle`, from `sync()` or the next roll) or when the test releases them, so the test
knows exactly which steps of which roll completed. The disk is `OsDisk(shadow=True)`, which records what
each fsync and directory fsync made durable; a crash is the store dropped without closing
(`files.abandon()`), then `power_cut(root, mode, seed)` rolls the directory back to what a machine that
lost power shows (`drop`, `torn`, `pages`). `_CrashDisk` stops a job at a chosen step (the step raises, as
if the machine died there), so every prefix of the job is cut: before the sealed block's fsync, before the
new block's, before the rename, before the directory fsync, before the index, and after all of it.
Reopened (from the index and by a full scan), the store must hold every message a completed `sync()` or a
completed sealed-block fsync made durable, report no fault on them, leave no pending file, and go on
(appends, more rolls, a clean reopen). The store-roll thread itself (`runtime.workers.BackgroundJobs`) is
checked for order and for handing a job's error to its waiter; a failed job fails every later `sync()`.
`_GatedDisk` runs a job on the real roll thread and holds it between its open of the new block and that
block's fsync, so the store appends into the block meanwhile, as the running node does.
"""

from __future__ import annotations

import os
import threading

import pytest

from jsraft.disk import OsDisk, power_cut
from jsraft.errors import DamagedSequence, NoMessageFound
from jsraft.runtime.workers import BackgroundJobs
from jsraft.store import StoreConfig
from jsraft.store.blockfiles import PENDING_SUFFIX
from jsraft.store.blocks import block_name
from jsraft.store.filestore import FileStore

CONFIG = StoreConfig(block_size=64 * 1024)
PER_BLOCK = 21  # messages of ~3 KiB in a 64 KiB block


class _Crash(Exception):
    """The machine died at this step."""


class _HeldJobs:
    """A background runner that runs a job only when the store waits for it or the test releases it."""

    def __init__(self) -> None:
        self.jobs: list[list] = []  # [job, ran, error]

    def __call__(self, job):
        entry = [job, False, None]
        self.jobs.append(entry)

        def wait() -> None:
            self._run(entry)
            if entry[2] is not None:
                raise entry[2]

        return wait

    def _run(self, entry: list) -> None:
        if not entry[1]:
            entry[1] = True
            try:
                entry[0]()
            except Exception as error:  # noqa: BLE001 - handed to the waiter, as BackgroundJobs does
                entry[2] = error

    def release(self) -> None:
        for entry in self.jobs:
            self._run(entry)


class _CrashDisk:
    """An `OsDisk` whose disk operations raise `_Crash` once `steps_left` reaches zero (when armed)."""

    def __init__(self, disk: OsDisk) -> None:
        self._disk = disk
        self.steps_left: int | None = None

    def _step(self) -> None:
        if self.steps_left is not None:
            if self.steps_left == 0:
                raise _Crash()
            self.steps_left -= 1

    def __getattr__(self, name):
        return getattr(self._disk, name)

    def open(self, path, *, create=False):
        handle = self._disk.open(path, create=create)
        if self.steps_left is None:
            return handle
        crash_disk = self

        class _File:
            def sync(self) -> None:
                crash_disk._step()
                handle.sync()

            def __getattr__(self, name):
                return getattr(handle, name)

        return _File()

    def rename(self, src, dst):
        self._step()
        self._disk.rename(src, dst)

    def sync_dir(self, path):
        self._step()
        self._disk.sync_dir(path)

    def write_atomic(self, path, data):
        self._step()
        self._disk.write_atomic(path, data)


def _payload(seq: int) -> bytes:
    return bytes([seq % 251]) * 3000 + seq.to_bytes(4, "big")


def _append(store: FileStore, first: int, last: int) -> None:
    store.append_batch([(seq, f"s.{seq % 3}", b"", _payload(seq), 10 * seq) for seq in range(first, last + 1)])


def _check(root: str, durable: int, *, use_index: bool) -> FileStore:
    store = FileStore.open(OsDisk(root, shadow=True), CONFIG, use_index=use_index)
    assert not [name for name in os.listdir(root) if name.endswith(PENDING_SUFFIX)]
    faulted = {s for f in store.faults() for s in range(f.first, f.last + 1)}
    assert not [s for s in faulted if s <= durable], f"durable sequences reported damaged: {sorted(faulted)[:5]}"
    assert store.state().last_seq >= durable
    for seq in range(1, store.state().last_seq + 1):
        try:
            assert store.load(seq).payload == _payload(seq), f"seq {seq} served with wrong bytes"
        except DamagedSequence:
            assert seq > durable
        except NoMessageFound:
            assert seq > durable, f"durable seq {seq} lost"
    return store


def _go_on(store: FileStore, root: str, durable: int) -> None:
    """After recovery the store appends, rolls in the background again, and reopens clean: damage the cut
    left in unsynced pages goes with the truncation (fs_ops `_cut_point`)."""
    damaged = bool(store.faults())
    if damaged:  # unsynced pages a cut kept or lost: cut back to what was durable, as a replica does
        store.truncate(durable)
    store.background = BackgroundJobs("t-roll-go-on").submit
    last = store.state().last_seq
    _append(store, last + 1, last + 3 * PER_BLOCK)
    store.close()
    again = FileStore.open(OsDisk(root), CONFIG, use_index=False)
    assert again.state().last_seq == last + 3 * PER_BLOCK
    assert again.faults() == []
    for seq in range(last + 1 if damaged else 1, again.state().last_seq + 1):
        assert again.load(seq).payload == _payload(seq)
    again.close()


def test_a_background_roll_leaves_the_same_store_as_an_inline_one(tmp_path):
    roots = {name: str(tmp_path / name) for name in ("inline", "background")}
    jobs = BackgroundJobs("t-roll-same")
    for name, root in roots.items():
        store = FileStore.open(OsDisk(root), CONFIG, background=jobs.submit if name == "background" else None)
        for first in range(1, 10 * PER_BLOCK, 17):  # batches that straddle the rolls
            _append(store, first, min(first + 16, 10 * PER_BLOCK))
        store.close()
    listings = {name: sorted(os.listdir(root)) for name, root in roots.items()}
    assert listings["inline"] == listings["background"]
    assert len([n for n in listings["inline"] if n.endswith(".blk")]) >= 9
    for root in roots.values():
        for use_index in (True, False):
            store = FileStore.open(OsDisk(root), CONFIG, use_index=use_index)
            assert store.faults() == [] and store.state().msgs == 10 * PER_BLOCK
            assert [store.load(s).payload for s in (1, 99, 10 * PER_BLOCK)] == [_payload(s) for s in (1, 99, 210)]
            store.close()
    for name in os.listdir(roots["inline"]):
        if name.endswith(".blk"):
            contents = [open(os.path.join(root, name), "rb").read() for root in roots.values()]
            assert contents[0] == contents[1], name


def test_the_new_block_gets_its_name_only_when_the_job_ran(tmp_path):
    root = str(tmp_path / "store")
    held = _HeldJobs()
    store = FileStore.open(OsDisk(root), CONFIG, background=held)
    _append(store, 1, PER_BLOCK + 5)  # one roll: its job held
    assert len(held.jobs) == 1 and not held.jobs[0][1]
    names = set(os.listdir(root))
    assert block_name(2) not in names and block_name(2) + PENDING_SUFFIX in names
    assert store.load(PER_BLOCK + 3).payload == _payload(PER_BLOCK + 3)  # the pending block reads
    store.sync()  # waits for the job first: what the sync vouches for lies above it
    assert held.jobs[0][1]
    names = set(os.listdir(root))
    assert block_name(2) in names and block_name(2) + PENDING_SUFFIX not in names
    _append(store, PER_BLOCK + 6, 2 * PER_BLOCK + 5)  # the next roll does not wait: nothing is pending
    assert len(held.jobs) == 2 and not held.jobs[1][1]
    _append(store, 2 * PER_BLOCK + 6, 3 * PER_BLOCK + 5)  # the one after waits for it (one outstanding)
    assert held.jobs[1][1] and not held.jobs[2][1]
    store.close()
    assert all(entry[1] for entry in held.jobs)
    reopened = FileStore.open(OsDisk(root), CONFIG, use_index=False)
    assert reopened.faults() == [] and reopened.state().msgs == 3 * PER_BLOCK + 5


@pytest.mark.parametrize("mode", ["drop", "torn", "pages"])
@pytest.mark.parametrize("steps_done", range(6))
def test_a_power_cut_at_each_step_of_a_roll_job_loses_nothing_durable(tmp_path, mode, steps_done):
    """steps: 0 sealed block fsync, 1 new block fsync, 2 rename, 3 directory fsync, 4 index, 5 done."""
    root = str(tmp_path / "store")
    held = _HeldJobs()
    disk = _CrashDisk(OsDisk(root, shadow=True))
    store = FileStore.open(disk, CONFIG, background=held)
    _append(store, 1, 2 * PER_BLOCK + 4)  # two rolls; the second job is outstanding
    store.sync()
    durable = 2 * PER_BLOCK + 4
    _append(store, durable + 1, 3 * PER_BLOCK + 7)  # a roll whose job the cut interrupts, then more
    roll_end = store.blocks[-2].last_seq  # where the interrupted roll sealed its block
    assert durable < roll_end < 3 * PER_BLOCK + 7
    disk.steps_left = steps_done
    held.release()
    if steps_done < 5:
        assert isinstance(held.jobs[-1][2], _Crash)
    else:
        assert held.jobs[-1][2] is None
    if steps_done >= 1:
        durable = roll_end  # the sealed block's fsync completed
    store.files.abandon()  # crash: no close, no index write
    power_cut(root, mode, steps_done)
    for use_index in (True, False):
        store = _check(root, durable, use_index=use_index)
        store.files.close()
    _go_on(_check(root, durable, use_index=True), root, durable)


@pytest.mark.parametrize("mode", ["drop", "torn", "pages"])
def test_a_power_cut_before_the_last_roll_job_ran_opens_before_that_roll(tmp_path, mode):
    root = str(tmp_path / "store")
    held = _HeldJobs()
    store = FileStore.open(OsDisk(root, shadow=True), CONFIG, background=held)
    _append(store, 1, PER_BLOCK // 2)
    store.sync()
    _append(store, PER_BLOCK // 2 + 1, 2 * PER_BLOCK + 3)  # two rolls
    assert [entry[1] for entry in held.jobs] == [True, False]  # the second roll ran the first job first
    durable = store.blocks[0].last_seq  # the first job's fsync made the first sealed block durable
    store.files.abandon()  # the second job never ran
    power_cut(root, mode, 7)
    _go_on(_check(root, durable, use_index=False), root, durable)


class _GatedDisk:
    """An `OsDisk` whose roll job, having opened the new (pending) block on its thread, waits at that
    block's fsync until the test lets it go: the store appends meanwhile, as the node's event loop does."""

    def __init__(self, disk: OsDisk) -> None:
        self._disk = disk
        self.opened = threading.Event()
        self.go = threading.Event()

    def __getattr__(self, name):
        return getattr(self._disk, name)

    def open(self, path, *, create=False):
        handle = self._disk.open(path, create=create)
        if not path.endswith(PENDING_SUFFIX) or threading.current_thread() is threading.main_thread():
            return handle
        gated = self

        class _File:
            def sync(self) -> None:
                gated.opened.set()
                assert gated.go.wait(10.0), "the test never let the job go"
                handle.sync()

            def __getattr__(self, name):
                return getattr(handle, name)

        return _File()


@pytest.mark.parametrize("mode", ["drop", "torn", "pages"])
def test_appends_during_a_roll_jobs_fsync_of_the_new_block_are_durable_after_the_next_sync(tmp_path, mode):
    """Chaos S03-seed4 found records of older, rolled blocks that did not verify after a coordinated power
    cut. They had been appended to the new block while the roll's job, on the store-roll thread, held its
    own handle of it between the open and the fsync; a later `sync()` and the next roll's fsyncs covered
    them. The store was right: the shadow disk's tracker took the job's handle's size as of its open and
    forgot the rest of what was written, so the power cut zeroed them in the middle of a block the index
    then vouched for."""
    root = str(tmp_path / "store")
    gated = _GatedDisk(OsDisk(root, shadow=True))
    store = FileStore.open(gated, CONFIG, background=BackgroundJobs("t-roll-gated").submit)
    _append(store, 1, PER_BLOCK + 2)  # one roll: its job opens the new block and waits at its fsync
    assert gated.opened.wait(10.0)
    _append(store, PER_BLOCK + 3, PER_BLOCK + 9)  # into the new block, while the job holds it open
    gated.go.set()
    store.sync()  # waits for the job, then syncs the new block: everything so far is durable
    durable = PER_BLOCK + 9
    _append(store, durable + 1, 3 * PER_BLOCK + 4)  # more rolls: the new block becomes an older one
    store.sync()
    durable = 3 * PER_BLOCK + 4
    store.files.abandon()
    power_cut(root, mode, 7)
    for use_index in (True, False):
        store = _check(root, durable, use_index=use_index)
        store.files.close()


def test_a_failed_job_fails_every_later_sync(tmp_path):
    root = str(tmp_path / "store")
    held = _HeldJobs()
    disk = _CrashDisk(OsDisk(root))
    store = FileStore.open(disk, CONFIG, background=held)
    _append(store, 1, PER_BLOCK + 2)
    disk.steps_left = 2  # the rename fails
    for _ in range(2):
        with pytest.raises(_Crash):
            store.sync()
    with pytest.raises(_Crash):
        _append(store, PER_BLOCK + 3, 2 * PER_BLOCK + 3)  # a roll waits for the failed job too


def test_the_roll_thread_runs_jobs_in_order_and_hands_errors_to_the_waiter():
    jobs = BackgroundJobs("t-roll-order")
    gate = threading.Event()
    order: list[int] = []
    waits = [jobs.submit(gate.wait)] + [jobs.submit(lambda i=i: order.append(i)) for i in range(5)]

    def boom() -> None:
        raise ValueError("disk gone")

    failing = jobs.submit(boom)
    assert order == []  # the first job blocks the thread: nothing after it ran
    gate.set()
    for wait in waits:
        wait()
    assert order == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="disk gone"):
        failing()
    jobs.submit(lambda: order.append(5))()  # the thread goes on after a failed job
    assert order[-1] == 5
