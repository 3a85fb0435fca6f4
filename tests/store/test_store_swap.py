"""`store.swap`: a replacement store built beside the live one and swapped in atomically.

Method: a live FileStore holds sequences 1..10; a `BesideBuild` builds a replacement holding 5..30 (what a
repair that cut the head would refill). On real files (`OsDisk`, real fsync): an abandoned build leaves
the old store intact, open and readable, and the build directory gone; a build is swapped in and reopens
at the live path; the process "dies" right after each step of the swap (a hook raises and every handle
is dropped), then `recover_swap` runs as the next open would and the store opened at the live path must be
exactly the old one or exactly the new one, never neither, with the new one from the first rename of the
build on. On a `SimDisk` the same steps end in a power failure (`crash()`: unsynced names and content
lost): the same rule, and from the parent's fsync on it must be the new one. Leftover build directories
are removed at recovery, and the recovery table's three `.old` rows are built by hand and checked;
`jsraft check` looks for a stream's store where the next open would find it.
"""

from __future__ import annotations

import random

import pytest

from jsraft.cli.check_cmd import check_store, find_stores
from jsraft.disk.os_disk import OsDisk
from jsraft.store.base import StoreConfig
from jsraft.store.filestore import FileStore
from jsraft.store.swap import (
    BUILD_INFIX, OLD_SUFFIX, SEALED, SWAP_STEPS, BesideBuild, begin_build, recover_swap, seal_build,
)
from jsraft.testing.simdisk import SimDisk

LIVE = "stream/msgs"
CONFIG = StoreConfig(name="S", block_size=65536)


class _Died(Exception):
    """The process stopped here."""


def _open(disk, path):  # type: ignore[no-untyped-def]
    return FileStore.open(disk.sub(path), CONFIG)


def _fill(store, first: int, last: int) -> None:  # type: ignore[no-untyped-def]
    store.append_batch([(seq, f"s.{seq % 3}", b"", f"payload {seq}".encode() * 8, 1_000 + seq)
                        for seq in range(first, last + 1)])


def _live_with_old(disk):  # type: ignore[no-untyped-def]
    disk.makedirs("stream")
    store = _open(disk, LIVE)
    _fill(store, 1, 10)
    store.sync()
    disk.sync_tree("stream")
    return store


def _build_new(build: BesideBuild, old):  # type: ignore[no-untyped-def]
    new = build.start(old)
    new.compact(5)  # the group's first sequence: a fresh store refilled from there
    _fill(new, 5, 30)
    return new


def _key_at_live(disk) -> tuple:  # type: ignore[no-untyped-def]
    recover_swap(disk, LIVE)
    store = _open(disk, LIVE)
    try:
        return store.state().agreement_key()
    finally:
        store.close()


@pytest.fixture
def os_disk(tmp_path) -> OsDisk:  # type: ignore[no-untyped-def]
    return OsDisk(str(tmp_path))


def test_an_abandoned_build_leaves_the_old_store_intact_and_readable(os_disk):
    old = _live_with_old(os_disk)
    before = old.state().agreement_key()
    build = BesideBuild(os_disk, LIVE, _open)
    new = _build_new(build, old)
    assert os_disk.is_dir(build.build) and new.state().first_seq == 5
    assert old.load(3).payload == b"payload 3" * 8  # readable while the build runs
    returned = build.abandon()
    assert returned is old and not build.active
    assert old.load(3).payload == b"payload 3" * 8 and old.state().agreement_key() == before
    assert os_disk.listdir("stream") == ["msgs"]  # the build directory is gone
    old.close()
    assert _key_at_live(os_disk) == before


def test_a_restarted_build_replaces_the_previous_build_not_the_old_store(os_disk):
    old = _live_with_old(os_disk)
    build = BesideBuild(os_disk, LIVE, _open)
    first = _build_new(build, old)
    second = build.start(first)
    assert build.old is old and build.build.endswith(BUILD_INFIX + "1")
    assert sorted(os_disk.listdir("stream")) == ["msgs", "msgs" + BUILD_INFIX + "1"]
    assert second.state().msgs == 0
    build.abandon().close()


def test_an_installed_build_is_the_live_store_after_a_reopen(os_disk):
    old = _live_with_old(os_disk)
    build = BesideBuild(os_disk, LIVE, _open)
    new_key = _build_new(build, old).state().agreement_key()
    installed = build.install(b"verified")
    assert installed.state().agreement_key() == new_key and installed.load(30).payload == b"payload 30" * 8
    installed.close()
    assert os_disk.listdir("stream") == ["msgs"] and not os_disk.exists(f"{LIVE}/{SEALED}")
    assert recover_swap(os_disk, LIVE) == ""
    assert _key_at_live(os_disk) == new_key


def _install_until(disk, step: str, *, power_fails: bool) -> tuple[tuple, tuple]:  # type: ignore[no-untyped-def]
    """Old store 1..10, a build 5..30 installed until `step`, where the process dies (and, with
    `power_fails`, the disk loses what was not durable); the old and the new state tuples."""
    old = _live_with_old(disk)
    old_key = old.state().agreement_key()
    build = BesideBuild(disk, LIVE, _open)
    new_key = _build_new(build, old).state().agreement_key()

    def die(name: str) -> None:
        if name == step:
            if power_fails:
                disk.crash()
            raise _Died(name)

    with pytest.raises(_Died):
        build.install(b"verified", step=die)
    return old_key, new_key


@pytest.mark.parametrize("step", SWAP_STEPS)
def test_a_process_that_dies_after_any_step_recovers_to_the_old_or_the_new_store(os_disk, tmp_path, step):
    old_key, new_key = _install_until(os_disk, step, power_fails=False)
    found = _key_at_live(OsDisk(str(tmp_path)))  # a new process: a new view of the directory
    expected = old_key if step == "seal" else new_key  # from the build's first rename on, the new one
    assert found == expected
    assert not any(BUILD_INFIX in name or name.endswith(OLD_SUFFIX) for name in os_disk.listdir("stream"))


@pytest.mark.parametrize("step", SWAP_STEPS)
def test_a_power_failure_after_any_step_recovers_to_the_old_or_the_new_store(step):
    disk = SimDisk(random.Random(3), corruption_allowed=False)
    old_key, new_key = _install_until(disk, step, power_fails=True)
    found = _key_at_live(disk)
    assert found in (old_key, new_key)  # never neither (invariant 1)
    if SWAP_STEPS.index(step) >= SWAP_STEPS.index("sync"):
        assert found == new_key  # the parent's fsync made the swap durable
    if step == "seal":
        assert found == old_key


def test_recovery_completes_or_rolls_back_each_interrupted_state(os_disk):
    old = _live_with_old(os_disk)
    old_key = old.state().agreement_key()
    old.close()
    # The live store moved aside, the sealed build not yet moved in: completed with the build.
    build = begin_build(os_disk, LIVE)
    new = _open(os_disk, build)
    new.compact(5)
    _fill(new, 5, 30)
    new_key = new.state().agreement_key()
    new.close()
    seal_build(os_disk, build, b"v")
    os_disk.rename(LIVE, LIVE + OLD_SUFFIX)
    assert recover_swap(os_disk, LIVE) == "completed"
    assert _key_at_live(os_disk) == new_key
    # Moved aside with an unsealed build: rolled back to the store that was moved aside.
    build = begin_build(os_disk, LIVE)
    os_disk.rename(LIVE, LIVE + OLD_SUFFIX)
    assert recover_swap(os_disk, LIVE) == "rolled back"
    assert _key_at_live(os_disk) == new_key and os_disk.listdir("stream") == ["msgs"]
    # Both the live store and a leftover `.old`: the swap had ended; the leftover goes.
    os_disk.makedirs(LIVE + OLD_SUFFIX)
    assert recover_swap(os_disk, LIVE) == "completed"
    assert os_disk.listdir("stream") == ["msgs"] and new_key != old_key


def test_jsraft_check_looks_where_the_next_open_finds_the_store(tmp_path):
    """A crash between moving the live store aside and moving the sealed build in: `jsraft check` checks
    the build (what the next open completes the swap with), not nothing."""
    disk = OsDisk(str(tmp_path))
    live = "streams/S/msgs"
    disk.makedirs("streams/S")
    _open(disk, live).close()
    build = begin_build(disk, live)
    new = _open(disk, build)
    _fill(new, 1, 5)
    new.close()
    seal_build(disk, build, b"v")
    disk.rename(live, live + OLD_SUFFIX)
    (name, directory), = find_stores(str(tmp_path))
    assert name == "S" and directory == str(tmp_path / build)
    assert check_store(name, directory)["msgs"] == 5
