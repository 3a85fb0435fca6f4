"""Tests for `jsraft.disk`: `OsDisk` on the real file system, and shadow-mode power cuts.

Method: the basics run `OsDisk` on a fresh `tmp_path` and check each operation of the `Disk` protocol
and its path rules. The power-cut tests follow the durability contract in `jsraft.disk.base` literally:
a test writes, fsyncs files (`DiskFile.sync`) and directories (`Disk.sync_dir`) in a chosen pattern,
calls `power_cut(root, mode, seed)` exactly as a harness would after the node is dead, then reads the
directory back with plain `os` calls (not through the code under test) and checks that every byte that
was made durable (content synced *and* name synced) is there in every mode, and that what was not made
durable is rolled back the way the mode promises (`drop`: nothing unsynced; `torn`: a prefix of an
unsynced append; `pages`: whole 4 KiB pages, kept or zero). Renames and removals are checked both
synced and unsynced. Regression tests cover the file-system behaviours a path-keyed model gets wrong
(a directory renamed with its entries, a directory re-created at an old path, a handle kept across a
rename, a tracker started after a SIGKILL). A Hypothesis test drives random operation sequences against
an independent model of what is durable, derandomized and bounded. Each test uses its own root, since
trackers are cached per root for the life of the process.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jsraft.disk import POWER_CUT_MODES, Disk, DiskFile, OsDisk, check_relative, power_cut
from jsraft.disk import shadow as shadow_module
from jsraft.disk.shadow import shadow_dir

PAGE = 4096


def _bytes(count: int, seed: int) -> bytes:
    """Reproducible content: a failure replays with the same bytes."""
    return random.Random(seed).randbytes(count)


def _tree(root: str) -> dict[str, bytes]:
    """Every file under `root`, read with plain `os` calls."""
    out: dict[str, bytes] = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            with open(path, "rb") as handle:
                out[os.path.relpath(path, root)] = handle.read()
    return out


def _dirs(root: str) -> set[str]:
    return {os.path.relpath(d, root) for d, _, _ in os.walk(root)} - {"."}


def _write_file(disk: OsDisk, path: str, data: bytes, *, sync: bool = True) -> None:
    handle = disk.open(path, create=True)
    try:
        handle.append(data)
        if sync:
            handle.sync()
    finally:
        handle.close()


@pytest.fixture
def root(tmp_path: Path) -> str:
    return str(tmp_path / "data")


@pytest.fixture
def disk(root: str) -> OsDisk:
    return OsDisk(root, shadow=True)


# --- Paths -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "normal"),
    [("a", "a"), ("a/b/c", "a/b/c"), ("./a", "a"), ("a/./b", "a/b"), ("a/../b", "b"), ("a//b", "a/b"),
     ("", ""), (".", ""), ("a/..", "")],
)
def test_check_relative_normalises(path: str, normal: str) -> None:
    assert check_relative(path) == normal


@pytest.mark.parametrize("path", ["/", "/etc/passwd", "..", "../x", "a/../../x", "a/b/../../.."])
def test_check_relative_refuses_absolute_and_escaping_paths(path: str) -> None:
    with pytest.raises(ValueError):
        check_relative(path)


@pytest.mark.parametrize("bad", ["/tmp/x", "../x", "a/../../x"])
def test_every_operation_refuses_bad_paths(tmp_path: Path, bad: str) -> None:
    disk = OsDisk(str(tmp_path / "data"))
    operations = [
        lambda: disk.open(bad, create=True),
        lambda: disk.read_file(bad),
        lambda: disk.write_atomic(bad, b"x"),
        lambda: disk.exists(bad),
        lambda: disk.is_dir(bad),
        lambda: disk.listdir(bad),
        lambda: disk.makedirs(bad),
        lambda: disk.remove(bad),
        lambda: disk.remove_tree(bad),
        lambda: disk.rename("a", bad),
        lambda: disk.rename(bad, "a"),
        lambda: disk.sync_dir(bad),
        lambda: disk.file_size(bad),
        lambda: disk.sub(bad),
    ]
    for operation in operations:
        with pytest.raises(ValueError):
            operation()
    assert os.listdir(tmp_path) == ["data"]  # nothing was created outside the root


# --- OsDisk basics -----------------------------------------------------------------------------


def test_protocols_are_satisfied(tmp_path: Path) -> None:
    disk: Disk = OsDisk(str(tmp_path / "d"))
    handle: DiskFile = disk.open("f", create=True)
    handle.close()


def test_root_is_created_and_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    disk = OsDisk("nested/root")
    assert disk.root == str(tmp_path / "nested" / "root")
    assert os.path.isdir(disk.root)
    assert disk.shadow is None


def test_file_operations(tmp_path: Path) -> None:
    disk = OsDisk(str(tmp_path / "d"))
    with pytest.raises(FileNotFoundError):
        disk.open("missing")
    handle = disk.open("f", create=True)
    assert handle.size() == 0
    assert handle.append(b"hello") == 0
    assert handle.append(b" world") == 5
    assert handle.size() == 11
    assert handle.pread(0, 5) == b"hello"
    assert handle.pread(6, 100) == b"world"
    handle.pwrite(0, b"J")
    handle.pwrite(20, b"!")  # past the end: a hole reads as zeros
    assert handle.size() == 21
    assert handle.pread(11, 10) == bytes(9) + b"!"
    handle.truncate(5)
    assert handle.size() == 5
    handle.sync()
    handle.close()
    handle.close()  # closing twice is harmless
    assert disk.read_file("f") == b"Jello"
    assert disk.file_size("f") == 5
    assert handle.path == os.path.join(disk.root, "f")
    reopened = disk.open("f")
    assert reopened.size() == 5
    assert reopened.append(b"!") == 5
    reopened.close()
    assert disk.read_file("f") == b"Jello!"


def test_namespace_operations(tmp_path: Path) -> None:
    disk = OsDisk(str(tmp_path / "d"))
    disk.makedirs("a/b/c")
    disk.makedirs("a/b/c")  # idempotent
    disk.makedirs("")  # the root itself: nothing to do
    assert disk.is_dir("a/b") and disk.exists("a/b/c")
    _write_file(disk, "a/z", b"z")
    _write_file(disk, "a/m", b"m")
    assert disk.listdir("a") == ["b", "m", "z"]
    assert disk.listdir("") == ["a"]
    assert not disk.is_dir("a/z")
    disk.rename("a/z", "a/b/y")
    assert not disk.exists("a/z")
    assert disk.read_file("a/b/y") == b"z"
    disk.rename("a/m", "a/b/y")  # replaces the destination
    assert disk.read_file("a/b/y") == b"m"
    disk.remove("a/b/y")
    assert not disk.exists("a/b/y")
    with pytest.raises(FileNotFoundError):
        disk.remove("a/b/y")
    disk.sync_dir("a")
    disk.sync_dir("")
    disk.remove_tree("a")
    assert not disk.exists("a")
    disk.remove_tree("a")  # absent: nothing to do
    _write_file(disk, "single", b"s")
    disk.remove_tree("single")  # a plain file is removed too
    assert disk.listdir("") == []


def test_write_atomic(tmp_path: Path) -> None:
    disk = OsDisk(str(tmp_path / "d"))
    disk.makedirs("cfg")
    disk.write_atomic("cfg/config.json", b'{"a": 1}')
    assert disk.read_file("cfg/config.json") == b'{"a": 1}'
    disk.write_atomic("cfg/config.json", b"{}")  # shorter content replaces, not overlays
    assert disk.read_file("cfg/config.json") == b"{}"
    assert disk.listdir("cfg") == ["config.json"]  # no temporary file is left behind
    disk.write_atomic("top", b"t")
    assert disk.read_file("top") == b"t"


def test_sub_disk_is_rooted_below(tmp_path: Path) -> None:
    disk = OsDisk(str(tmp_path / "d"))
    streams = disk.sub("streams/ORDERS")
    assert disk.is_dir("streams/ORDERS")  # sub() creates its directory
    assert streams.root == os.path.join(disk.root, "streams", "ORDERS")
    streams.makedirs("msgs")
    _write_file(streams, "msgs/1.blk", b"block")
    assert disk.read_file("streams/ORDERS/msgs/1.blk") == b"block"
    assert streams.listdir("") == ["msgs"]
    nested = streams.sub("msgs")
    assert nested.read_file("1.blk") == b"block"
    with pytest.raises(ValueError):
        streams.read_file("../other")  # a sub disk cannot reach its siblings
    streams.write_atomic("config.json", b"{}")
    assert disk.read_file("streams/ORDERS/config.json") == b"{}"


# --- Power cut: content ------------------------------------------------------------------------


def _synced_then_appended(disk: OsDisk, synced: bytes, unsynced: bytes) -> None:
    handle = disk.open("log", create=True)
    handle.append(synced)
    handle.sync()
    disk.sync_dir("")
    handle.append(unsynced)
    handle.close()


@pytest.mark.parametrize("mode", POWER_CUT_MODES)
def test_synced_bytes_survive_every_mode(root: str, disk: OsDisk, mode: str) -> None:
    synced = _bytes(5000, seed=1)
    _synced_then_appended(disk, synced, _bytes(3 * PAGE + 100, seed=2))
    power_cut(root, mode, seed=1)
    after = _tree(root)
    assert list(after) == ["log"]
    assert after["log"][: len(synced)] == synced


def test_drop_mode_loses_every_unsynced_append(tmp_path: Path) -> None:
    for seed in range(5):
        root = str(tmp_path / f"data{seed}")
        synced = b"s" * 100
        _synced_then_appended(OsDisk(root, shadow=True), synced, b"u" * 9000)
        power_cut(root, "drop", seed)
        assert _tree(root) == {"log": synced}


def test_torn_mode_keeps_a_prefix_of_an_unsynced_append(tmp_path: Path) -> None:
    synced, unsynced = _bytes(1000, seed=3), _bytes(3000, seed=4)
    lengths = set()
    for seed in range(20):
        root = str(tmp_path / f"data{seed}")
        _synced_then_appended(OsDisk(root, shadow=True), synced, unsynced)
        power_cut(root, "torn", seed)
        content = _tree(root)["log"]
        assert len(synced) <= len(content) <= len(synced) + len(unsynced)
        assert content == (synced + unsynced)[: len(content)]
        lengths.add(len(content))
    # The cut point varies with the seed and is not always at either end.
    assert any(len(synced) < n < len(synced) + len(unsynced) for n in lengths)


def test_pages_mode_keeps_or_loses_whole_pages(tmp_path: Path) -> None:
    synced, unsynced = _bytes(5000, seed=5), _bytes(4 * PAGE, seed=6)
    live = synced + unsynced
    kept_pages = lost_pages = 0
    for seed in range(10):
        root = str(tmp_path / f"data{seed}")
        _synced_then_appended(OsDisk(root, shadow=True), synced, unsynced)
        power_cut(root, "pages", seed)
        content = _tree(root)["log"]
        assert content[: len(synced)] == synced
        # A lost page beyond the durable length reads back as zeros (delayed allocation).
        durable_view = synced + bytes(len(live) - len(synced))
        assert len(content) == len(live)
        for start in range(0, len(live), PAGE):
            page = content[start : start + PAGE]
            if page == live[start : start + PAGE]:
                kept_pages += start >= len(synced)
            else:
                assert page == durable_view[start : start + PAGE], (seed, start)
                lost_pages += 1
    assert kept_pages and lost_pages


@pytest.mark.parametrize("mode", POWER_CUT_MODES)
def test_power_cut_is_deterministic_for_a_seed(tmp_path: Path, mode: str) -> None:
    synced, unsynced = _bytes(3000, seed=7), _bytes(5 * PAGE, seed=8)
    results = []
    for copy in range(2):
        root = str(tmp_path / f"data{copy}")
        _synced_then_appended(OsDisk(root, shadow=True), synced, unsynced)
        power_cut(root, mode, seed=42)
        results.append(_tree(root))
    assert results[0] == results[1]


@pytest.mark.parametrize("mode", POWER_CUT_MODES)
def test_unsynced_overwrite_and_truncate(root: str, disk: OsDisk, mode: str) -> None:
    handle = disk.open("f", create=True)
    handle.append(b"a" * 100)
    handle.sync()
    disk.sync_dir("")
    handle.truncate(40)  # an unsynced shrink is not there after the cut
    handle.close()
    power_cut(root, mode, seed=3)
    assert _tree(root) == {"f": b"a" * 100}


def test_synced_overwrite_and_truncate_survive(tmp_path: Path) -> None:
    for mode in POWER_CUT_MODES:
        root = str(tmp_path / mode)
        disk = OsDisk(root, shadow=True)
        handle = disk.open("f", create=True)
        handle.append(b"a" * 100)
        handle.sync()
        disk.sync_dir("")
        handle.pwrite(10, b"XY")
        handle.truncate(60)
        handle.append(b"tail")
        handle.sync()
        handle.close()
        power_cut(root, mode, seed=3)
        assert _tree(root) == {"f": b"a" * 10 + b"XY" + b"a" * 48 + b"tail"}, mode


@pytest.mark.parametrize("mode", POWER_CUT_MODES)
def test_a_sync_through_a_handle_opened_before_another_handles_writes_keeps_them(root: str, disk: OsDisk,
                                                                                  mode: str) -> None:
    """An fsync makes the whole file durable, whichever descriptor wrote: a FileStore's block-roll job
    (fs_append invariant 3) opens the new block by name on its thread and fsyncs it while the store goes on
    appending through its own handle. The tracker took the syncing handle's size as of its open, copied
    only that far and forgot the rest of what was written: the bytes appended between the job's open and
    its fsync were never durable for it, even after later fsyncs, and read back as zeros after a cut
    (chaos S03: records in older, rolled blocks that did not verify)."""
    writer = disk.open("blk", create=True)
    writer.append(b"a" * 100)
    disk.sync_dir("")
    syncer = disk.open("blk")  # opened at 100 bytes
    writer.append(b"b" * 5000)  # written before the fsync below
    syncer.sync()
    syncer.close()
    writer.append(b"c" * 50)
    writer.sync()
    writer.close()
    power_cut(root, mode, seed=3)
    assert _tree(root)["blk"] == b"a" * 100 + b"b" * 5000 + b"c" * 50


def test_unsynced_overwrite_in_drop_mode_reads_old_bytes(root: str, disk: OsDisk) -> None:
    handle = disk.open("f", create=True)
    handle.append(b"0123456789")
    handle.sync()
    disk.sync_dir("")
    handle.pwrite(3, b"xxx")
    handle.close()
    power_cut(root, "drop", seed=0)
    assert _tree(root) == {"f": b"0123456789"}


# --- Power cut: names ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", POWER_CUT_MODES)
def test_created_file_without_directory_sync_disappears(root: str, disk: OsDisk, mode: str) -> None:
    _write_file(disk, "new", b"content synced, name not")
    power_cut(root, mode, seed=0)
    assert _tree(root) == {}


@pytest.mark.parametrize("mode", POWER_CUT_MODES)
def test_created_file_after_directory_sync_stays(root: str, disk: OsDisk, mode: str) -> None:
    _write_file(disk, "new", b"durable")
    disk.sync_dir("")
    power_cut(root, mode, seed=0)
    assert _tree(root) == {"new": b"durable"}


def test_name_synced_but_content_not(root: str, disk: OsDisk) -> None:
    _write_file(disk, "empty", b"never synced", sync=False)
    disk.sync_dir("")
    power_cut(root, "drop", seed=0)
    assert _tree(root) == {"empty": b""}


def test_name_synced_before_content(root: str, disk: OsDisk) -> None:
    handle = disk.open("f", create=True)
    disk.sync_dir("")
    handle.append(b"later")
    handle.sync()
    handle.close()
    power_cut(root, "drop", seed=0)
    assert _tree(root) == {"f": b"later"}


@pytest.mark.parametrize("mode", POWER_CUT_MODES)
def test_unsynced_rename_is_undone(root: str, disk: OsDisk, mode: str) -> None:
    _write_file(disk, "a", b"A")
    disk.sync_dir("")
    disk.rename("a", "b")
    power_cut(root, mode, seed=0)
    assert _tree(root) == {"a": b"A"}


@pytest.mark.parametrize("mode", POWER_CUT_MODES)
def test_synced_rename_stays(root: str, disk: OsDisk, mode: str) -> None:
    _write_file(disk, "a", b"A")
    disk.sync_dir("")
    disk.rename("a", "b")
    disk.sync_dir("")
    power_cut(root, mode, seed=0)
    assert _tree(root) == {"b": b"A"}


def test_unsynced_rename_over_an_existing_file_keeps_the_old_file(root: str, disk: OsDisk) -> None:
    _write_file(disk, "old", b"old content")
    _write_file(disk, "new.tmp", b"new content")
    disk.sync_dir("")
    disk.rename("new.tmp", "old")
    power_cut(root, "drop", seed=0)
    assert _tree(root) == {"old": b"old content", "new.tmp": b"new content"}


def test_rename_between_directories_needs_both_synced(tmp_path: Path) -> None:
    expectations = {
        (False, False): {"src/f": b"F"},
        (True, True): {"dst/f": b"F"},
        # Only the destination synced: the file is reachable under both names.
        (False, True): {"src/f": b"F", "dst/f": b"F"},
        # Only the source synced: the file is gone from both.
        (True, False): {},
    }
    for (sync_src, sync_dst), expected in expectations.items():
        root = str(tmp_path / f"d{int(sync_src)}{int(sync_dst)}")
        disk = OsDisk(root, shadow=True)
        disk.makedirs("src")
        disk.makedirs("dst")
        _write_file(disk, "src/f", b"F")
        disk.sync_dir("src")
        disk.rename("src/f", "dst/f")
        if sync_src:
            disk.sync_dir("src")
        if sync_dst:
            disk.sync_dir("dst")
        power_cut(root, "drop", seed=0)
        assert _tree(root) == expected, (sync_src, sync_dst)


@pytest.mark.parametrize("mode", POWER_CUT_MODES)
def test_unsynced_remove_is_undone(root: str, disk: OsDisk, mode: str) -> None:
    _write_file(disk, "f", b"kept")
    disk.sync_dir("")
    disk.remove("f")
    assert not disk.exists("f")
    power_cut(root, mode, seed=0)
    assert _tree(root) == {"f": b"kept"}


def test_synced_remove_stays_removed(root: str, disk: OsDisk) -> None:
    _write_file(disk, "f", b"gone")
    disk.sync_dir("")
    disk.remove("f")
    disk.sync_dir("")
    power_cut(root, "drop", seed=0)
    assert _tree(root) == {}


def test_remove_tree_synced_and_unsynced(tmp_path: Path) -> None:
    for synced in (False, True):
        root = str(tmp_path / f"d{int(synced)}")
        disk = OsDisk(root, shadow=True)
        disk.makedirs("s/t")
        _write_file(disk, "s/t/f", b"F")
        disk.sync_dir("s/t")
        disk.remove_tree("s")
        if synced:
            disk.sync_dir("")
        power_cut(root, "drop", seed=0)
        assert _tree(root) == ({} if synced else {"s/t/f": b"F"})


@pytest.mark.parametrize("mode", POWER_CUT_MODES)
def test_write_atomic_survives(root: str, disk: OsDisk, mode: str) -> None:
    disk.makedirs("streams/S")
    disk.write_atomic("streams/S/config.json", b'{"v": 1}')
    disk.write_atomic("streams/S/config.json", b'{"v": 2}')
    power_cut(root, mode, seed=5)
    assert _tree(root) == {"streams/S/config.json": b'{"v": 2}'}


@pytest.mark.parametrize("mode", POWER_CUT_MODES)
def test_makedirs_makes_the_directory_chain_durable(root: str, disk: OsDisk, mode: str) -> None:
    disk.makedirs("a/b/c")
    disk.makedirs("a/x")
    _write_file(disk, "a/b/c/f", b"deep")
    disk.sync_dir("a/b/c")
    _write_file(disk, "a/x/unsynced-name", b"lost")
    power_cut(root, mode, seed=0)
    assert _tree(root) == {"a/b/c/f": b"deep"}
    assert _dirs(root) == {"a", "a/b", "a/b/c", "a/x"}


def test_unsynced_directory_content_vanishes_but_directory_stays(root: str, disk: OsDisk) -> None:
    disk.makedirs("d")
    _write_file(disk, "d/f", b"F")  # d never synced after f was created
    power_cut(root, "drop", seed=0)
    assert _tree(root) == {}
    assert _dirs(root) == {"d"}


# --- Power cut: lifecycle of the shadow state -----------------------------------------------------


def test_shadow_state_lives_beside_the_root(root: str, disk: OsDisk) -> None:
    assert disk.shadow is not None
    assert os.path.isfile(os.path.join(shadow_dir(root), "state.json"))
    assert shadow_dir(root) == root + ".shadow"


def test_after_a_cut_the_rolled_back_state_is_durable(root: str, disk: OsDisk) -> None:
    _write_file(disk, "kept", b"K")
    disk.sync_dir("")
    handle = disk.open("kept")
    handle.append(b"-unsynced")
    handle.close()
    _write_file(disk, "lost", b"L")
    summary = power_cut(root, "drop", seed=0)
    assert summary["files_kept"] == 1
    assert not os.path.exists(shadow_dir(root))
    assert _tree(root) == {"kept": b"K"}
    # A new tracker adopts what the cut left as durable: a second cut changes nothing.
    again = OsDisk(root, shadow=True)
    assert again.shadow is not disk.shadow
    power_cut(root, "drop", seed=1)
    assert _tree(root) == {"kept": b"K"}
    # And the adopted state is tracked like any other: new unsynced work is rolled back again.
    third = OsDisk(root, shadow=True)
    handle = third.open("kept")
    handle.append(b"+more")
    handle.close()
    third.remove("kept")
    power_cut(root, "drop", seed=2)
    assert _tree(root) == {"kept": b"K"}


def test_adopted_subdirectories_survive_a_second_cut(root: str, disk: OsDisk) -> None:
    disk.makedirs("a/b")
    _write_file(disk, "a/b/f", b"F")
    disk.sync_dir("a/b")
    power_cut(root, "drop", seed=0)
    OsDisk(root, shadow=True)
    power_cut(root, "torn", seed=0)
    assert _tree(root) == {"a/b/f": b"F"}
    assert _dirs(root) == {"a", "a/b"}


def test_sub_disks_share_the_tracker(root: str, disk: OsDisk) -> None:
    stream = disk.sub("streams/ORDERS")
    msgs = stream.sub("msgs")
    assert stream.shadow is disk.shadow and msgs.shadow is disk.shadow
    _write_file(msgs, "1.blk", b"durable block")
    msgs.sync_dir("")
    handle = msgs.open("1.blk")
    handle.append(b"+unsynced")
    handle.close()
    _write_file(msgs, "2.blk", b"name never synced")
    stream.write_atomic("config.json", b"{}")
    stream.rename("config.json", "renamed.json")  # not synced: undone
    power_cut(root, "drop", seed=0)
    assert _tree(root) == {"streams/ORDERS/msgs/1.blk": b"durable block", "streams/ORDERS/config.json": b"{}"}


def test_power_cut_without_shadow_state_raises(tmp_path: Path) -> None:
    root = str(tmp_path / "plain")
    disk = OsDisk(root, shadow=False)
    _write_file(disk, "f", b"F")
    with pytest.raises(FileNotFoundError):
        power_cut(root, "drop", seed=0)
    assert _tree(root) == {"f": b"F"}  # nothing was touched


def test_power_cut_refuses_unknown_modes(root: str, disk: OsDisk) -> None:
    with pytest.raises(ValueError):
        power_cut(root, "flood", seed=0)


@pytest.mark.parametrize(("value", "enabled"), [("1", True), ("yes", True), ("0", False), ("", False)])
def test_environment_variable_enables_shadow_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, enabled: bool
) -> None:
    monkeypatch.setenv("JSRAFT_TEST_SHADOW_DISK", value)
    root = str(tmp_path / "data")
    disk = OsDisk(root)
    assert (disk.shadow is not None) is enabled
    assert os.path.exists(shadow_dir(root)) is enabled
    assert OsDisk(str(tmp_path / "explicit"), shadow=False).shadow is None


def test_environment_variable_unset_means_no_shadow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JSRAFT_TEST_SHADOW_DISK", raising=False)
    assert OsDisk(str(tmp_path / "data")).shadow is None


def test_environment_shadow_mode_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JSRAFT_TEST_SHADOW_DISK", "1")
    root = str(tmp_path / "data")
    disk = OsDisk(root)
    _write_file(disk, "f", b"F")
    disk.sync_dir("")
    _write_file(disk, "g", b"G")
    power_cut(root, "drop", seed=0)
    assert _tree(root) == {"f": b"F"}


# --- Regressions: what a path-keyed model of durability gets wrong ---------------------------------


@pytest.mark.parametrize("synced", [False, True])
def test_renamed_directory_keeps_its_durable_entries(root: str, disk: OsDisk, synced: bool) -> None:
    # Quarantining a stream directory is a directory rename. Its files were durable before and are
    # durable after, under whichever name the parent's last sync recorded.
    disk.makedirs("streams/S/msgs")
    _write_file(disk, "streams/S/msgs/1.blk", b"block")
    disk.sync_dir("streams/S/msgs")
    disk.makedirs("quarantine")
    disk.rename("streams/S", "quarantine/S")
    if synced:
        disk.sync_dir("streams")
        disk.sync_dir("quarantine")
    power_cut(root, "drop", seed=0)
    expected = "quarantine/S/msgs/1.blk" if synced else "streams/S/msgs/1.blk"
    assert _tree(root) == {expected: b"block"}


def test_directory_recreated_at_an_old_path_starts_empty(root: str, disk: OsDisk) -> None:
    # Delete a stream and create one with the same name: the old messages must not come back.
    disk.makedirs("streams/S")
    _write_file(disk, "streams/S/1.blk", b"old stream")
    disk.sync_dir("streams/S")
    disk.remove_tree("streams/S")
    disk.makedirs("streams/S")  # syncs "streams", which makes the removal durable too
    power_cut(root, "drop", seed=0)
    assert _tree(root) == {}
    assert _dirs(root) == {"streams", "streams/S"}


def test_handle_kept_across_a_rename_still_tracks_its_file(root: str, disk: OsDisk) -> None:
    handle = disk.open("segment.tmp", create=True)
    handle.append(b"header")
    handle.sync()
    disk.rename("segment.tmp", "segment")
    disk.sync_dir("")
    handle.append(b"+entries")
    handle.sync()
    handle.close()
    power_cut(root, "drop", seed=0)
    assert _tree(root) == {"segment": b"header+entries"}


def test_handle_kept_across_an_unsynced_remove(root: str, disk: OsDisk) -> None:
    _write_file(disk, "f", b"one")
    disk.sync_dir("")
    handle = disk.open("f")
    disk.remove("f")  # not made durable: f comes back, with what was synced through the handle
    handle.append(b"+two")
    handle.sync()
    handle.close()
    power_cut(root, "drop", seed=0)
    assert _tree(root) == {"f": b"one+two"}


def test_new_file_at_the_path_of_an_open_renamed_file(root: str, disk: OsDisk) -> None:
    old = disk.open("log", create=True)
    old.append(b"first")
    old.sync()
    disk.rename("log", "log.1")
    _write_file(disk, "log", b"second")
    disk.sync_dir("")
    old.append(b"+more")  # goes to log.1, not to the new log
    old.sync()
    old.close()
    power_cut(root, "drop", seed=0)
    assert _tree(root) == {"log.1": b"first+more", "log": b"second"}


def test_fsync_after_sigkill_and_restart_persists_earlier_writes(tmp_path: Path) -> None:
    # A node writes without fsync and is SIGKILLed: its writes are in the page cache. The restarted
    # node appends and fsyncs, which makes the whole file durable, including the earlier bytes.
    root = str(tmp_path / "data")
    child = textwrap.dedent(
        f"""
        import os, signal
        from jsraft.disk import OsDisk
        disk = OsDisk({root!r}, shadow=True)
        handle = disk.open("log", create=True)
        handle.append(b"synced;")
        handle.sync()
        disk.sync_dir("")
        handle.append(b"unsynced-before-kill;")
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    completed = subprocess.run([sys.executable, "-c", child], capture_output=True, timeout=60, check=False)
    assert completed.returncode == -signal.SIGKILL, completed.stderr
    restarted = OsDisk(root, shadow=True)  # this process has no tracker for root yet: it loads state
    handle = restarted.open("log")
    handle.append(b"after-restart")
    handle.sync()
    handle.close()
    power_cut(root, "drop", seed=0)
    assert _tree(root) == {"log": b"synced;unsynced-before-kill;after-restart"}


def test_unsynced_writes_of_a_killed_process_are_rolled_back(tmp_path: Path) -> None:
    root = str(tmp_path / "data")
    child = textwrap.dedent(
        f"""
        import os, signal
        from jsraft.disk import OsDisk
        disk = OsDisk({root!r}, shadow=True)
        handle = disk.open("log", create=True)
        handle.append(b"synced;")
        handle.sync()
        disk.sync_dir("")
        handle.append(b"unsynced;")
        disk.open("orphan", create=True).sync()
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    completed = subprocess.run([sys.executable, "-c", child], capture_output=True, timeout=60, check=False)
    assert completed.returncode == -signal.SIGKILL, completed.stderr
    power_cut(root, "drop", seed=0)
    assert _tree(root) == {"log": b"synced;"}


# --- Property: random operations, then a cut --------------------------------------------------------

_NAMES = ("f0", "f1", "f2")

_append = st.tuples(st.just("append"), st.sampled_from(_NAMES), st.binary(min_size=1, max_size=300))
_sync = st.tuples(st.just("sync"), st.sampled_from(_NAMES))
# Appends and file syncs are listed twice: they are the operations whose interleaving matters most.
operation = st.one_of(
    _append,
    _append,
    st.tuples(st.just("append_big"), st.sampled_from(_NAMES), st.integers(1, 3 * PAGE)),
    _sync,
    _sync,
    st.tuples(st.just("sync_dir")),
    st.tuples(st.just("create"), st.sampled_from(_NAMES)),
    st.tuples(st.just("rename"), st.sampled_from(_NAMES), st.sampled_from(_NAMES)),
    st.tuples(st.just("remove"), st.sampled_from(_NAMES)),
    # A process restart after SIGKILL: the page cache survives, the tracker is reloaded from its state.
    st.tuples(st.just("restart")),
)
# Half the runs start with every file created and its name durable, so that more operations act on
# an existing file instead of being skipped.
_SETUP = [("create", name) for name in _NAMES] + [("sync_dir",)]


class _Model:
    """What a file system promises, written independently of the tracker: files are inodes with live
    and synced content; a directory's durable entries are a snapshot taken at its last sync."""

    def __init__(self) -> None:
        self.live: dict[int, bytearray] = {}
        self.synced: dict[int, bytes] = {}
        self.names: dict[str, int] = {}
        self.durable_names: dict[str, int] = {}
        self.next_inode = 1

    def apply(self, disk: OsDisk, op: tuple[object, ...]) -> None:
        kind, *args = op
        if kind in ("append", "append_big") and args[0] in self.names:
            inode = self.names[args[0]]
            # Seeded by file and position, so no two files receive the same big append.
            seed = inode * 1_000_003 + len(self.live[inode])
            data = args[1] if kind == "append" else _bytes(args[1], seed=seed)
            handle = disk.open(args[0])
            handle.append(data)
            handle.close()
            self.live[self.names[args[0]]] += data
        elif kind == "sync" and args[0] in self.names:
            handle = disk.open(args[0])
            handle.sync()
            handle.close()
            inode = self.names[args[0]]
            self.synced[inode] = bytes(self.live[inode])
        elif kind == "sync_dir":
            disk.sync_dir("")
            self.durable_names = dict(self.names)
        elif kind == "create" and args[0] not in self.names:
            disk.open(args[0], create=True).close()
            self.names[args[0]] = self.next_inode
            self.live[self.next_inode] = bytearray()
            self.next_inode += 1
        elif kind == "rename" and args[0] in self.names and args[0] != args[1]:
            disk.rename(args[0], args[1])
            self.names[args[1]] = self.names.pop(args[0])
        elif kind == "remove" and args[0] in self.names:
            disk.remove(args[0])
            del self.names[args[0]]


@settings(max_examples=200, derandomize=True, deadline=None, database=None)
@given(
    st.booleans(),
    st.lists(operation, min_size=3, max_size=30),
    st.sampled_from(POWER_CUT_MODES),
    st.integers(0, 2**32),
)
def test_random_operations_keep_every_durable_byte(
    setup: bool, ops: list[tuple[object, ...]], mode: str, seed: int
) -> None:
    ops = (_SETUP if setup else []) + ops
    with tempfile.TemporaryDirectory() as parent:
        root = os.path.join(parent, "data")
        disk = OsDisk(root, shadow=True)
        model = _Model()
        try:
            for op in ops:
                if op[0] == "restart":
                    shadow_module._forget_tracker(root)
                    disk = OsDisk(root, shadow=True)
                else:
                    model.apply(disk, op)
            power_cut(root, mode, seed)
        finally:
            shadow_module._forget_tracker(root)
        after = _tree(root)
        assert set(after) == set(model.durable_names), (ops, mode)
        for name, inode in model.durable_names.items():
            synced = model.synced.get(inode, b"")
            live = bytes(model.live[inode])
            content = after[name]
            # Every synced byte is present (files here only grow, so synced is a prefix of live).
            assert content[: len(synced)] == synced, (name, mode)
            if mode == "drop":
                assert content == synced
            elif mode == "torn":
                assert len(synced) <= len(content) <= len(live)
                assert content == live[: len(content)]
            else:
                assert len(content) in (len(synced), len(live))
                assert all(c in (l, 0) for c, l in zip(content, live))
