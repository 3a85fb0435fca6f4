"""A stream's directory prepared while its create commits (`streams` invariant 7, `stream_format` 5).

Method: one real node (`jsraft.open_node`, real files and fsync) and nats-py in an asyncio worker thread.
A create through the API runs the meta leader's preparation (`MetaService.prepare_stream`), so the
test wraps the node's `prepare_stream` to record the names it prepared, and checks that the create used
it and answered a complete stream. A preparation for config bytes that then never commit (the node's
`StreamManager.prepare`, called directly, as a meta leader whose proposal is lost would leave it) must
not be used by a later create of that name with another config — the stream's `config.json` holds the
applied config — and a leftover of one that never commits is removed when the node restarts. A create
whose entry was in the meta log when it was handed over prepares the tree with its group's name
(`stream_format` invariant 7): the names prepared are the applied groups' (at least one of several
creates in a row is prepared named, or the path would be dead), and a tree prepared under another group's
name for the same bytes (as a replaced entry would leave it) is opened with the applied group's name.
A new R1 stream's group leads from its open, and its CONFIG entry goes into its log then (`streams`
invariant 8): when the create is answered (which waits for the group's leader, ready once its log applied)
the group has applied the assignment's config already — the replica's run loop, a tick after the answer,
would have proposed it only then; a restart of such a replica (its directory exists) replays that entry
and proposes none (the log grows by the new term's no-op alone).
A preparation's thread runs before its caller yields (`streams` invariant 10): the trio thread blocks
right after `prepare` (as an inline fsync of the meta entry would) and the build has begun meanwhile — a
preparation started from a spawned task would wait for the trio thread, and the wait would time out.
Waits are polls with deadlines.
"""

from __future__ import annotations

import json
import threading

import trio

import jsraft
from jsraft.disk import OsDisk
from jsraft.raft.types import EntryType
from jsraft.server.groups import streams as streams_module
from jsraft.server.groups.stream_format import FORMAT_PREFIX
from jsraft.stream.entries import EntryKind, entry_kind
from jsraft.wal import Wal
from nats_kit import in_asyncio, nats_connect, single, until

RAW_GHOST = b'{"name":"GHOST","subjects":["ghost.a"],"storage":"file","num_replicas":1}'
RAW_RENAMED = b'{"name":"RENAMED","subjects":["renamed.a"],"storage":"file","num_replicas":1}'


async def test_a_create_uses_its_prepared_tree_and_never_one_for_other_bytes(tmp_path):
    async def scenario(url: str, node) -> dict:
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=20)
        seen = {}
        created = await js.add_stream(name="FAST", subjects=["fast.>"])
        seen["created"] = created.config.subjects
        for i in range(4):
            await js.add_stream(name=f"MORE{i}", subjects=[f"more{i}.>"])
        # Prepared under a group name the entry will not get (the entry replaced, the name created again).
        trio.from_thread.run_sync(node.streams.prepare, "RENAMED", RAW_RENAMED, "S-RENAMED-999999")
        await until(lambda: "RENAMED" in node.streams._prepared and node.streams._prepared["RENAMED"].done.is_set(),
                    "the preparation under another group name ended")
        await js.add_stream(name="RENAMED", subjects=["renamed.a"])
        seen["renamed_seq"] = (await js.publish("renamed.a", b"x")).seq
        # A preparation for bytes that never commit; then the name is created with other subjects.
        trio.from_thread.run_sync(node.streams.prepare, "GHOST", RAW_GHOST)
        await until(lambda: "GHOST" in node.streams._prepared and node.streams._prepared["GHOST"].done.is_set(),
                    "the preparation for other bytes ended")
        ghost = await js.add_stream(name="GHOST", subjects=["ghost.b"])
        seen["ghost"] = ghost.config.subjects
        ack = await js.publish("ghost.b", b"x")
        seen["ghost_seq"] = ack.seq
        await nc.close()
        return seen

    async with jsraft.open_node(single(tmp_path)) as node:
        prepared: list[str] = []
        groups: dict[str, str | None] = {}
        real = node.meta_service.prepare_stream

        def recording(name: str, raw: bytes, group: str | None) -> None:
            prepared.append(name)
            groups[name] = group
            real(name, raw, group)
        node.meta_service.prepare_stream = recording
        seen = await in_asyncio(scenario, node.url, node, timeout_s=60)
        streams_dir = tmp_path / "n1" / "streams"
        more = [f"MORE{i}" for i in range(4)]
        assert prepared == ["FAST", *more, "RENAMED", "GHOST"]
        assert seen == {"created": ["fast.>"], "renamed_seq": 1, "ghost": ["ghost.b"], "ghost_seq": 1}
        for name in ["FAST", *more, "RENAMED"]:
            assert groups[name] in (None, node.meta.stream(name).group), name  # named only with its own group
            assert (streams_dir / name / "group").read_bytes() == node.meta.stream(name).group.encode()
        assert any(groups[name] is not None for name in ["FAST", *more])
        assert json.loads((streams_dir / "GHOST" / "config.json").read_bytes())["subjects"] == ["ghost.b"]
        assert (streams_dir / "FAST" / "group").read_bytes() == node.meta.stream("FAST").group.encode()
        assert not node.streams._prepared  # every preparation was taken by its create's open
        assert not [p.name for p in streams_dir.iterdir() if p.name.startswith(FORMAT_PREFIX)]
        # One that never commits: prepared, then the node stops before any create of the name.
        node.streams.prepare("ORPHAN", RAW_GHOST.replace(b"GHOST", b"ORPHAN").replace(b"ghost.a", b"orphan.a"))

        def orphan_built() -> bool:
            entry = node.streams._prepared.get("ORPHAN")
            return entry is not None and entry.done.is_set() and entry.ok
        await in_asyncio(until, orphan_built, "the orphan's tree prepared")
        assert (streams_dir / f"{FORMAT_PREFIX}ORPHAN" / "config.json").exists()
    async with jsraft.open_node(single(tmp_path)) as node:
        names = sorted(["FAST", "GHOST", "RENAMED", *(f"MORE{i}" for i in range(4))])
        assert sorted(p.name for p in streams_dir.iterdir()) == names
        assert sorted(node.meta.names()) == names


async def test_a_new_single_voter_group_applied_its_config_when_the_create_is_answered(tmp_path):
    async def scenario(url: str, node) -> list[tuple[int, int]]:
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=20)
        found = []
        for i in range(3):
            await js.add_stream(name=f"CFG{i}", subjects=[f"cfg{i}.>"])
            # Read on the node's own trio thread, right after the answer arrived.
            found.append(trio.from_thread.run_sync(lambda: (
                node.streams.replicas[f"CFG{i}"].machine.config_meta_index,
                node.meta.stream(f"CFG{i}").config_index)))
        await nc.close()
        return found

    async with jsraft.open_node(single(tmp_path)) as node:
        found = await in_asyncio(scenario, node.url, node, timeout_s=60)
    assert all(applied == assigned > 0 for applied, assigned in found), found


async def test_a_restarted_single_voter_group_gets_no_second_config_entry(tmp_path):
    """Invariant 8 is for a directory this open formatted: a restart replays the group's own CONFIG entry
    and proposes none. Counted in the group's WAL once the node stopped (other entries, an audit for
    one, may come and go with timing; the CONFIG entries may not)."""
    async def create(url: str) -> None:
        nc = await nats_connect(url)
        await nc.jetstream(timeout=20).add_stream(name="KEEP", subjects=["keep.>"])
        await nc.close()

    async with jsraft.open_node(single(tmp_path)) as node:
        await in_asyncio(create, node.url, timeout_s=60)
        await node.streams.replicas["KEEP"].wait_leader(10.0)
    assert _config_entries(tmp_path) == 1
    async with jsraft.open_node(single(tmp_path)) as node:
        with trio.fail_after(20):  # the stream manager reopens it from the replayed meta state
            while "KEEP" not in node.streams.replicas:
                await trio.sleep(0.01)
        await node.streams.replicas["KEEP"].wait_leader(10.0)  # ready: the log replayed, the no-op applied
        assert node.streams.replicas["KEEP"].machine.config_meta_index == node.meta.stream("KEEP").config_index
    assert _config_entries(tmp_path) == 1


def _config_entries(tmp_path) -> int:
    wal, recovered = Wal.open(OsDisk(str(tmp_path / "n1" / "streams" / "KEEP" / "raft")))
    try:
        return sum(1 for entry in recovered.entries
                   if entry.type is EntryType.NORMAL and entry_kind(entry.data) is EntryKind.CONFIG)
    finally:
        wal.close()


RAW_EARLY = b'{"name":"EARLY","subjects":["early.a"],"storage":"file","num_replicas":1}'
THREAD_DEADLINE_S = 10.0  # a thread already started meets it at once; one waiting for the trio thread never


async def test_a_preparation_starts_its_thread_before_the_caller_yields(tmp_path, monkeypatch):
    started = threading.Event()
    real_prepare_format = streams_module.prepare_format

    def prepare_format(*args, **kwargs):
        started.set()
        return real_prepare_format(*args, **kwargs)
    monkeypatch.setattr(streams_module, "prepare_format", prepare_format)
    async with jsraft.open_node(single(tmp_path)) as node:
        node.streams.prepare("EARLY", RAW_EARLY)
        assert started.wait(THREAD_DEADLINE_S)  # blocks the trio thread: no task can run meanwhile
        entry = node.streams._prepared["EARLY"]
        with trio.fail_after(THREAD_DEADLINE_S):
            await entry.done.wait()
        assert entry.ok and entry.error is None
        # The tree holds its WAL's first segment, made with it (`stream_format` invariant 8).
        segments = OsDisk(str(tmp_path)).listdir(f"n1/streams/{FORMAT_PREFIX}EARLY/raft/wal")
        assert [name for name in segments if name.endswith(".log")] == ["00000000000000000001.log"]
