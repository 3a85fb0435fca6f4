"""The stream manager's one worker-thread call for a new replica: format, then open its files while the
rename's `streams/` fsync runs beside them (`stream_format` invariants 9 and 10).

Method: real directories under `tmp_path` on `OsDisk(shadow=True)` (which records what each fsync made
durable; `power_cut` rolls the directory back to what a machine losing power shows). The `streams/` fsync
is held on an event that the store's open sets, so the test sees the two overlap (it would wait out the
event's 5 s deadline and fail if they ran one after the other); `format_and_open` returned only after that
fsync, so a power cut right after it leaves the complete directory, and the files it returned are the
replica's store and recovered, empty WAL. A `streams/` fsync that fails makes the call raise, with the store
and the WAL it opened closed, and a power cut then leaves no partial directory under the stream's name.
"""

from __future__ import annotations

import threading
import types

import pytest

from jsraft.disk import OsDisk, power_cut
from jsraft.jsapi.stream_config import parse_stream_config
from jsraft.server.groups import stream_format
from jsraft.server.groups.stream_format import (
    ReplicaFiles, format_and_open, open_replica_files, remove_format_leftovers,
)
from jsraft.server.groups.stream_options import StreamOptions
from jsraft.wal import SEGMENT_BYTES_DEFAULT

RAW = b'{"name":"ORDERS","subjects":["orders.>"],"storage":"file","num_replicas":1}'
GROUP = "S-ORDERS-abc123"
OPTIONS = StreamOptions(block_bytes=64 * 1024)
# What `format_and_open` reads of the node's runtime: the WAL's segment size, and no record of started groups.
RUNTIME = types.SimpleNamespace(wal_segment_bytes=SEGMENT_BYTES_DEFAULT, group_record=None)


def test_the_rename_is_synced_beside_the_opens_and_durable_before_the_call_returns(tmp_path, monkeypatch):
    root = str(tmp_path / "node")
    streams = OsDisk(root, shadow=True).sub("streams")
    streams.makedirs("")
    events: list[str] = []
    store_opening = threading.Event()
    real = OsDisk.sync_dir

    def sync_dir(self, path):
        if self is streams and path == "":
            events.append("sync start")
            assert store_opening.wait(5), "the store's open did not run beside the streams/ fsync"
            events.append("sync end")
        real(self, path)
    monkeypatch.setattr(OsDisk, "sync_dir", sync_dir)
    opened: list = []
    config, raw = parse_stream_config(RAW)

    def open_store():
        events.append("store open")
        store_opening.set()
        store = open_replica_files(streams.sub("ORDERS"), GROUP, config, raw, OPTIONS)
        opened.append(store)
        return store
    formatted, files = format_and_open(streams, name="ORDERS", group=GROUP, config=config, raw=raw,
                                       prepared=False, open_store_fn=open_store,
                                       runtime=RUNTIME, assigned_index=5)
    events.append("returned")
    assert formatted and isinstance(files, ReplicaFiles)
    # The fsync waited for the store's open to begin (which thread began first is the scheduler's choice).
    assert events.index("store open") < events.index("sync end") and "sync start" in events
    assert events[-2:] == ["sync end", "returned"]
    wal, recovered, started = files.storage
    assert files.store is opened[0] and recovered.entries == [] and not started and not files.memory_lost
    wal.close()
    files.store.close()
    monkeypatch.undo()
    power_cut(root, "drop", 3)
    after = OsDisk(root).sub("streams")
    assert after.read_file("ORDERS/group") == GROUP.encode() and after.read_file("ORDERS/config.json") == RAW


@pytest.mark.parametrize("seed", [1, 2])
def test_a_failed_streams_fsync_fails_the_call_and_closes_what_it_opened(tmp_path, monkeypatch, seed):
    root = str(tmp_path / "node")
    streams = OsDisk(root, shadow=True).sub("streams")
    streams.makedirs("")
    real = OsDisk.sync_dir

    def sync_dir(self, path):
        if self is streams and path == "":
            raise OSError("injected: streams/ fsync failed")
        real(self, path)
    monkeypatch.setattr(OsDisk, "sync_dir", sync_dir)
    config, raw = parse_stream_config(RAW)
    closed: list[str] = []
    real_open_storage = stream_format.open_storage

    def open_storage(*args):
        storage = real_open_storage(*args)
        wal_close = storage[0].close

        def close():
            closed.append("wal")
            wal_close()
        storage[0].close = close
        return storage
    monkeypatch.setattr(stream_format, "open_storage", open_storage)

    def open_store():
        store = open_replica_files(streams.sub("ORDERS"), GROUP, config, raw, OPTIONS)
        real_close = store.close

        def close():
            closed.append("store")
            real_close()
        store.close = close
        return store
    with pytest.raises(OSError, match="injected"):
        format_and_open(streams, name="ORDERS", group=GROUP, config=config, raw=raw,
                        prepared=False, open_store_fn=open_store, runtime=RUNTIME, assigned_index=5)
    assert sorted(closed) == ["store", "wal"]
    monkeypatch.undo()
    power_cut(root, "drop", seed)
    after = OsDisk(root, shadow=True).sub("streams")
    remove_format_leftovers(after)
    assert not after.exists("ORDERS") or after.read_file("ORDERS/group") == GROUP.encode()
