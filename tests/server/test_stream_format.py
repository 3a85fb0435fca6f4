"""A new stream replica's directory, formatted whole (`server/groups/stream_format.py`).

Method: real directories under `tmp_path` on `OsDisk(shadow=True)`, which records what each fsync made
durable; `power_cut(root, mode, seed)` then rolls the directory back to what a machine losing power would
show (`drop`: nothing unsynced; `torn`: a random prefix of each unsynced change; `pages`: each unsynced
page kept or lost). Checked: a format that returned survives a power cut complete; a crash at each step of
a format (an injected `OSError` there, then a power cut) leaves either no stream directory — the leftover
is removed and the format runs again — or the complete one, never a partial tree under the stream's name;
a formatted tree holds no store index and no `raft/snapshots/`; a memory stream gets no `raft/` (its presence means "ran before"); an existing directory is left alone;
the quarantine sweep does not take a leftover for a stream; a tree prepared ahead (`prepare_format`, while the
create's meta entry commits) has no name until formatted, and is then complete after a power cut; one
prepared with its group's name (invariant 7) is renamed with no second sync round, and a crash at the
rename or the sync after it leaves no partial directory; one prepared under another group's name is opened
with the right one.
"""

from __future__ import annotations

import pytest

from jsraft.disk import OsDisk, power_cut
from jsraft.jsapi.stream_config import parse_stream_config
from jsraft.meta.quarantine import _scan
from jsraft.server.groups.stream_format import (
    FORMAT_PREFIX, format_new_replica, prepare_format, remove_format_leftovers,
)
from jsraft.server.groups.stream_options import StreamOptions, replica_store_config
from jsraft.store.filestore import FileStore
from jsraft.wal import Wal

RAW = b'{"name":"ORDERS","subjects":["orders.>"],"storage":"file","num_replicas":1}'
RAW_MEMORY = b'{"name":"ORDERS","subjects":["orders.>"],"storage":"memory","num_replicas":1}'
GROUP = "S-ORDERS-abc123"
OPTIONS = StreamOptions(block_bytes=64 * 1024)


def _format(streams: OsDisk, raw: bytes = RAW) -> bool:
    config, raw = parse_stream_config(raw)
    return format_new_replica(streams, name="ORDERS", group=GROUP, config=config, raw=raw)


def _assert_complete(streams: OsDisk) -> None:
    """The tree a replica's open expects, every file readable and clean."""
    assert streams.read_file("ORDERS/config.json") == RAW
    assert streams.read_file("ORDERS/group") == GROUP.encode()
    config, _ = parse_stream_config(RAW)
    store = FileStore.open(streams.sub("ORDERS/msgs"), replica_store_config(config, OPTIONS))
    try:
        state = store.state()
        assert (state.msgs, state.last_seq) == (0, 0)
    finally:
        store.close()
    wal, recovered = Wal.open(streams.sub("ORDERS/raft"))
    try:
        assert not recovered.repairing, recovered.reasons
        assert recovered.damage_findings() == ()
        assert recovered.entries == []
    finally:
        wal.close()
    assert not [entry for entry in streams.listdir("") if entry.startswith(FORMAT_PREFIX)]


@pytest.mark.parametrize("mode", ["drop", "torn", "pages"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_returned_format_survives_a_power_cut(tmp_path, mode, seed):
    root = str(tmp_path / "node")
    streams = OsDisk(root, shadow=True).sub("streams")
    assert _format(streams)
    power_cut(root, mode, seed)
    _assert_complete(OsDisk(root).sub("streams"))


def test_a_formatted_tree_holds_only_what_the_open_needs(tmp_path):
    """Eight names, each an inode the kernel allocates on the create's path (`bench/README.md`, "R1 stream
    create"): no store index (written at the store's first close) and no `raft/snapshots/` (made by the
    first snapshot)."""
    streams = OsDisk(str(tmp_path / "node")).sub("streams")
    assert _format(streams)
    tree = streams.sub("ORDERS")
    assert tree.listdir("") == ["config.json", "group", "msgs", "raft"]
    assert tree.listdir("msgs") == ["00000001.blk"]
    assert tree.listdir("raft") == ["hardstate", "wal"]
    assert len(tree.listdir("raft/wal")) == 1
    _assert_complete(streams)


class Crash(Exception):
    pass


STEPS = ["write", "sync_tree", "rename", "sync_dir"]


def _crash_at(monkeypatch, step: str) -> None:
    """Raise at the given step of the format, as a process killed there would stop."""
    if step == "write":
        real = OsDisk.write_atomic

        def write_atomic(self, path, data):
            if path == "group":  # after config.json, before the store and the WAL directory
                raise Crash(step)
            real(self, path, data)
        monkeypatch.setattr(OsDisk, "write_atomic", write_atomic)
        return
    if step in ("rename", "sync_dir"):
        # The tree's own rename (not a file's inside it); the sync of `streams/` once the tree has its name.
        when = {"rename": lambda self, src, *_: src.startswith(FORMAT_PREFIX),
                "sync_dir": lambda self, path: path == "" and self.root.endswith("streams") and self.exists("ORDERS")}
        real = getattr(OsDisk, step)

        def patched(self, *args):
            if when[step](self, *args):
                raise Crash(step)
            real(self, *args)
        monkeypatch.setattr(OsDisk, step, patched)
        return

    def crash(self, *args, **kwargs):
        raise Crash(step)
    monkeypatch.setattr(OsDisk, step, crash)


@pytest.mark.parametrize("mode", ["drop", "torn", "pages"])
@pytest.mark.parametrize("step", STEPS)
def test_a_crash_at_any_step_leaves_no_partial_stream_directory(tmp_path, monkeypatch, step, mode):
    root = str(tmp_path / "node")
    streams = OsDisk(root, shadow=True).sub("streams")
    with monkeypatch.context() as patch:
        _crash_at(patch, step)
        with pytest.raises(Crash):
            _format(streams)
    power_cut(root, mode, 7)
    # The restart: the manager sweeps leftovers, then the replayed create formats (or finds) the directory.
    streams = OsDisk(root, shadow=True).sub("streams")
    remove_format_leftovers(streams)
    if streams.exists("ORDERS"):
        assert step in ("sync_dir",), f"a crash at {step} left a stream directory under its name"
        _assert_complete(streams)
        assert not _format(streams)  # invariant 3: found, left alone
    else:
        assert _format(streams)
    _assert_complete(streams)
    power_cut(root, mode, 8)
    _assert_complete(OsDisk(root).sub("streams"))


def test_a_memory_stream_gets_no_raft_directory(tmp_path):
    streams = OsDisk(str(tmp_path / "node")).sub("streams")
    assert _format(streams, RAW_MEMORY)
    assert sorted(streams.listdir("ORDERS")) == ["config.json", "group"]


def test_an_existing_directory_is_left_alone(tmp_path):
    streams = OsDisk(str(tmp_path / "node")).sub("streams")
    streams.sub("ORDERS").write_atomic("group", b"another-incarnation")
    assert not _format(streams)
    assert streams.read_file("ORDERS/group") == b"another-incarnation"
    assert streams.listdir("ORDERS") == ["group"]


def test_the_quarantine_sweep_ignores_a_format_leftover(tmp_path):
    disk = OsDisk(str(tmp_path / "node"))
    disk.sub(f"streams/{FORMAT_PREFIX}ORDERS").write_atomic("group", GROUP.encode())
    disk.sub("streams/LOST").write_atomic("group", b"x")
    unknown, kept, ignored = _scan(disk, assigned=())
    assert (unknown, kept, ignored) == (["LOST"], [], [f"{FORMAT_PREFIX}ORDERS"])
    assert remove_format_leftovers(disk.sub("streams")) == [f"{FORMAT_PREFIX}ORDERS"]
    assert disk.listdir("streams") == ["LOST"]


def _prepare(streams: OsDisk, group: str | None = None) -> bool:
    config, raw = parse_stream_config(RAW)
    return prepare_format(streams, name="ORDERS", config=config, raw=raw, group=group)


@pytest.mark.parametrize("mode", ["drop", "torn", "pages"])
def test_a_prepared_tree_is_never_a_stream_directory_until_formatted(tmp_path, mode):
    """Invariant 5: a tree prepared while the create's entry commits has no name (a create that never
    commits leaves a leftover the restart sweeps); once formatted from it, it is complete and durable."""
    root = str(tmp_path / "node")
    streams = OsDisk(root, shadow=True).sub("streams")
    assert _prepare(streams)
    assert streams.listdir("") == [f"{FORMAT_PREFIX}ORDERS"]
    assert not streams.exists(f"{FORMAT_PREFIX}ORDERS/group")  # the group's name comes with the entry's index
    power_cut(root, mode, 3)
    streams = OsDisk(root, shadow=True).sub("streams")
    # The power cut may have taken the unnamed tree's own entry in `streams/` (never synced): either way
    # there is no stream directory, and the restart's sweep leaves nothing behind.
    assert remove_format_leftovers(streams) in ([], [f"{FORMAT_PREFIX}ORDERS"])
    assert streams.listdir("") == []
    assert _prepare(streams)
    config, raw = parse_stream_config(RAW)
    assert format_new_replica(streams, name="ORDERS", group=GROUP, config=config, raw=raw,
                              prepared=True)
    _assert_complete(streams)
    power_cut(root, mode, 4)
    _assert_complete(OsDisk(root).sub("streams"))


def test_preparing_leaves_an_existing_directory_alone(tmp_path):
    streams = OsDisk(str(tmp_path / "node")).sub("streams")
    streams.sub("ORDERS").write_atomic("group", b"another-incarnation")
    assert not _prepare(streams)
    assert streams.listdir("") == ["ORDERS"]


def _format_prepared(streams: OsDisk) -> bool:
    config, raw = parse_stream_config(RAW)
    return format_new_replica(streams, name="ORDERS", group=GROUP, config=config, raw=raw,
                              prepared=True)


@pytest.mark.parametrize("mode", ["drop", "torn", "pages"])
def test_a_tree_prepared_with_its_group_is_renamed_without_a_second_sync_round(tmp_path, monkeypatch, mode):
    """Invariant 7: its `group` file was synced with the tree, so the format after the apply only renames
    it and syncs `streams/`; a power cut then leaves the complete directory."""
    root = str(tmp_path / "node")
    streams = OsDisk(root, shadow=True).sub("streams")
    assert _prepare(streams, GROUP)
    trees = []
    monkeypatch.setattr(OsDisk, "sync_tree", lambda self, path: trees.append(path))
    assert _format_prepared(streams)
    assert trees == []
    monkeypatch.undo()
    power_cut(root, mode, 6)
    _assert_complete(OsDisk(root).sub("streams"))


@pytest.mark.parametrize("step", ["rename", "sync_dir"])
def test_a_crash_formatting_a_named_tree_leaves_no_partial_stream_directory(tmp_path, monkeypatch, step):
    root = str(tmp_path / "node")
    streams = OsDisk(root, shadow=True).sub("streams")
    assert _prepare(streams, GROUP)
    with monkeypatch.context() as patch:
        _crash_at(patch, step)
        with pytest.raises(Crash):
            _format_prepared(streams)
    power_cut(root, "drop", 7)
    streams = OsDisk(root, shadow=True).sub("streams")
    remove_format_leftovers(streams)
    if streams.exists("ORDERS"):
        assert step == "sync_dir", f"a crash at {step} left a stream directory under its name"
        _assert_complete(streams)
    else:
        assert _format(streams)
    power_cut(root, "drop", 8)
    _assert_complete(OsDisk(root).sub("streams"))


def test_a_tree_prepared_under_another_group_is_opened_with_the_applied_group(tmp_path):
    """Invariant 7: the entry was replaced and the name created again at another index: the `group` file
    is rewritten and synced before the rename."""
    root = str(tmp_path / "node")
    streams = OsDisk(root, shadow=True).sub("streams")
    assert _prepare(streams, "S-ORDERS-999")
    assert _format_prepared(streams)
    power_cut(root, "drop", 9)
    _assert_complete(OsDisk(root).sub("streams"))
