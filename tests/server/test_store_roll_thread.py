"""The running node rolls its stream stores' blocks on the store-roll thread (store/fs_append.py invariant
3), and what it wrote that way opens clean.

Method: a real 3-node `Cluster` (real TCP, files, fsync) with 64 KiB blocks (`drift_kit`), an R3 stream
and 1,500 ~190-byte messages, so every replica rolls several blocks while it applies. The thread a roll's
job runs on is recorded by wrapping each replica's `background` runner (the one the node gave the store),
so the test sees that the jobs ran and where, not only that the files exist. Once the replicas agree, no
pending block file is left (polled with a deadline: the last roll's job may still run); a follower is
stopped (cleanly) and its store reopened by a full scan, read-only: every acknowledged message is there,
with no fault. The follower restarts and the replicas agree again.
"""

from __future__ import annotations

import os
import threading

import trio
from drift_kit import STREAM, block_numbers, converged, msgs_dir, payload, publish_range, replica, start

from jsraft.disk import OsDisk
from jsraft.store.blockfiles import PENDING_SUFFIX
from jsraft.store.filestore import FileStore

COUNT = 1500


def _record_roll_threads(store, threads: list[str]) -> None:
    given = store.background
    assert given is not None, "the running node's FileStore has a background runner"

    def recording(job):
        def wrapped() -> None:
            threads.append(threading.current_thread().name)
            job()
        return given(wrapped)

    store.background = recording


def _pending_files(cluster) -> list[str]:
    return [entry for name in cluster.names if cluster.nodes.get(name) is not None
            for entry in os.listdir(msgs_dir(cluster, name)) if entry.endswith(PENDING_SUFFIX)]


async def test_the_running_node_rolls_blocks_on_the_store_roll_thread(tmp_path):
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path) as cluster:
            await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            js = cluster.node("n1").jetstream()
            await js.add_stream(name=STREAM, subjects=["s.>"], num_replicas=3)
            await cluster.wait_until(lambda: all(replica(cluster, n) is not None for n in cluster.names), 10,
                                     what="every replica open")
            threads: dict[str, list[str]] = {name: [] for name in cluster.names}
            for name in cluster.names:
                _record_roll_threads(replica(cluster, name).store, threads[name])
            acked = await publish_range(js, 0, COUNT)
            last = max(acked.values())
            await cluster.wait_until(lambda: converged(cluster, last), 30, what="replicas converged")
            await cluster.wait_until(lambda: not _pending_files(cluster), 10, what="every roll's job done")
            for name in cluster.names:
                assert len(block_numbers(msgs_dir(cluster, name))) >= 3, name
                assert threads[name] and set(threads[name]) == {"jsraft-store-roll"}, (name, threads[name])

            follower = next(name for name in cluster.names if replica(cluster, name).leader is None)
            await cluster.stop(follower)
            store = FileStore.open(OsDisk(msgs_dir(cluster, follower), read_only=True), read_only=True,
                                   use_index=False)
            try:
                assert store.faults() == []
                assert store.state().msgs == COUNT
                for i, seq in acked.items():
                    assert store.load(seq).payload == payload(i)
            finally:
                store.close()
            await cluster.restart(follower)
            await cluster.wait_until(lambda: converged(cluster, last), 30, what="converged after the restart")
