"""A new replica's format and the opening of its files, store and WAL share one worker-thread call
(`streams` invariant 9, `stream_format` invariant 9).

Method: one real node (`jsraft.open_node`, real files and fsync) and nats-py in an asyncio worker thread.
The test counts the calls of `open_replica_files` made by the stream manager's combined call and by
`StreamReplica.open` (which opens the store itself only when not handed one): after creates of a file
and a memory stream, every store was opened by the manager, none by the replica, the runtime's
`open_group` made no worker-thread call of its own (the WAL came opened with the store), and each stream
answers a publish. Then the manager's opening is made to refuse one stream with a `JsraftError` (as a
store that cannot recover would): that create is not answered with a running stream (the error is
logged, the replica not started, nothing registered), and the next create works, so the manager's
event loop went on. A new file store took no byte on trust: its empty block is settled when the replica
starts, with no background verification task (`memory_stream.start_store_tasks`). Waits are polls with
deadlines.
"""

from __future__ import annotations

import nats.errors
import nats.js.errors
import pytest

import jsraft
from jsraft.errors import JsraftError
from jsraft.server.groups import memory_stream, stream_format, stream_replica, streams
from nats_kit import in_asyncio, nats_connect, single, until


class _Refused(JsraftError):
    err_code = 10999
    default_description = "store refused (test)"


async def test_the_store_is_opened_on_the_formats_thread_and_a_refusal_starts_nothing(tmp_path, monkeypatch):
    calls = {"manager": [], "replica": []}
    real = stream_format.open_replica_files

    def by(who):
        def opening(disk, group, config, raw, options):
            calls[who].append(config.name)
            if config.name == "BROKEN":
                raise _Refused()
            return real(disk, group, config, raw, options)
        return opening

    monkeypatch.setattr(streams, "open_replica_files", by("manager"))
    verifies = []
    real_verify = memory_stream.verify_in_background

    async def verifying(get_store, *args):
        verifies.append(1)
        await real_verify(get_store, *args)
    monkeypatch.setattr(memory_stream, "verify_in_background", verifying)
    monkeypatch.setattr(stream_replica, "open_replica_files", by("replica"))

    async def scenario(url: str, node) -> dict:
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=5)
        seen = {}
        await js.add_stream(name="FILE1", subjects=["file1.>"])
        await js.add_stream(name="MEM1", subjects=["mem1.>"], storage="memory")
        seen["acks"] = [(await js.publish("file1.a", b"x")).seq, (await js.publish("mem1.a", b"x")).seq]
        with pytest.raises((nats.js.errors.Error, nats.errors.TimeoutError)):
            await js.add_stream(name="BROKEN", subjects=["broken.>"])
        await until(lambda: "BROKEN" not in node.streams.replicas and node.streams.pending == 0,
                    "the refused open was handled")
        await js.add_stream(name="AFTER", subjects=["after.>"])
        seen["after"] = (await js.publish("after.a", b"x")).seq
        await nc.close()
        return seen

    async with jsraft.open_node(single(tmp_path)) as node:
        hops = []  # the runtime's own worker calls (`open_group`'s WAL open when not handed one)
        run_in_worker = node.runtime._run_in_worker

        async def counting(fn, *args):
            hops.append(fn)
            return await run_in_worker(fn, *args)
        node.runtime._run_in_worker = counting
        seen = await in_asyncio(scenario, node.url, node, timeout_s=60)
        assert hops == []
        assert seen == {"acks": [1, 1], "after": 1}
        assert calls["manager"] == ["FILE1", "MEM1", "BROKEN", "AFTER"]
        assert calls["replica"] == []
        assert "BROKEN" not in node.streams.replicas
        assert set(node.streams.replicas) == {"FILE1", "MEM1", "AFTER"}
        # A new file store took no byte on trust (its one block is empty): settled at once, no task.
        assert node.streams.replicas["FILE1"].store.unverified == {} and verifies == []
