"""Drift on a real 3-node cluster: a follower's store is changed while it is stopped, then it restarts.

Method: a real `Cluster` (real TCP, real files, real fsync) with 64 KiB blocks, so 3,000 ~190-byte messages
span nine block files, and every replica's Raft WAL compacted (snapshot) before the follower stops, so
nothing it lost can come back from its own log: it must be fetched from the leader. While the follower is
stopped (cleanly), its `streams/S/msgs` files are changed the way disks and bugs change them:

  (a) the oldest block file deleted (a missing head: the replica would start at a later sequence than its
      peers — the "7 messages from seq 778 vs 3 from 1027" drift nats-server never noticed);
  (b) one bit flipped in a record of a middle block;
  (c) the newest block truncated to half its size;
  (d) the store made *ahead* of its log: messages appended past the last one, with the store API;
  (e) one message's body changed at an equal sequence, its record rewritten with a valid CRC.

Each must be detected (the replica's status in stream info, and a `stream_drift` advisory naming the
range), repaired by fetching only the affected range (the `stream_drift_repaired` advisory's
`fetched_msgs` is small, never the whole stream), and end with identical state tuples and contents on all
three replicas and every acknowledged message present — also after more publishes. Every wait polls with
a deadline.
"""

from __future__ import annotations

import os

import pytest
import trio
from drift_kit import (
    advisories, block_numbers, change_body, check_identical, converged, drift_of, msgs_dir, payload, publish_range,
    replica, repaired_of, setup_stream, start, with_store,
)

from jsraft.disk import OsDisk
from jsraft.store.blocks import block_name
from jsraft.store.filestore import FileStore
from jsraft.stream import DRIFT_ADVISORY

COUNT = 3000


def read_only_store(cluster, name):
    return FileStore.open(OsDisk(msgs_dir(cluster, name), read_only=True), read_only=True)


async def restart_and_converge(cluster, js, acked: dict[int, int], follower: str) -> None:
    await cluster.start_node(follower)
    last = max(acked.values())
    await cluster.wait_until(lambda: converged(cluster, last), 30, what="replicas repaired and converged")
    check_identical(cluster, acked)
    acked.update(await publish_range(js, COUNT, 300))  # the stream goes on, the repaired replica with it
    await cluster.wait_until(lambda: converged(cluster, max(acked.values())), 30, what="converged again")
    check_identical(cluster, acked)


def one_episode(cluster, follower: str) -> tuple[dict, dict]:
    """The follower's own drift and repaired advisories: exactly one episode."""
    drift = [a for a in drift_of(cluster, follower) if a["audit_id"] == 0]
    repaired = repaired_of(cluster, follower)
    assert len(drift) == 1 and len(repaired) == 1, (drift, repaired)
    return drift[0], repaired[0]


def finding(advisory: dict, kind: str) -> dict:
    found = [f for f in advisory["findings"] if f["kind"] == kind]
    assert found, (kind, advisory["findings"])
    return found[0]


async def test_a_missing_head_block_is_fetched_back(tmp_path):
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path) as cluster:
            js, acked, leader, follower = await setup_stream(cluster, COUNT)
            await cluster.stop(follower)
            store = read_only_store(cluster, follower)
            first_block = store.blocks[0]
            lost = (first_block.first_seq, first_block.last_seq)
            store.close()
            assert lost[0] == 1 and lost[1] < COUNT // 4
            os.remove(os.path.join(msgs_dir(cluster, follower), block_name(first_block.number)))

            await restart_and_converge(cluster, js, acked, follower)
            drift, repaired = one_episode(cluster, follower)
            head = finding(drift, "missing_head")
            assert (head["first_seq"], head["last_seq"]) == lost
            assert repaired["fetched_msgs"] == lost[1] - lost[0] + 1  # the lost block, nothing else


@pytest.mark.parametrize("found_by", ["startup scan", "background verifier"])
async def test_a_flipped_bit_in_a_middle_block_is_repaired_from_the_leader(tmp_path, found_by):
    """Without an index the restart's full scan finds the flipped bit; with one (a clean stop wrote it) the
    fast open does not read the block, the background verifier finds it, and the same repair follows."""
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path) as cluster:
            js, acked, leader, follower = await setup_stream(cluster, COUNT)
            await cluster.stop(follower)
            store = read_only_store(cluster, follower)
            middle = store.blocks[len(store.blocks) // 2]
            target = (middle.first_seq + middle.last_seq) // 2
            block, offset, length, _ = store.locate(target)
            store.close()
            path = os.path.join(msgs_dir(cluster, follower), block_name(block.number))
            with open(path, "r+b") as handle:  # a bit in the payload: the record's CRC no longer verifies
                handle.seek(offset + length - 20)
                byte = handle.read(1)[0]
                handle.seek(offset + length - 20)
                handle.write(bytes([byte ^ 0x08]))
            index = os.path.join(msgs_dir(cluster, follower), "index")
            assert os.path.exists(index)
            if found_by == "startup scan":
                os.remove(index)

            await restart_and_converge(cluster, js, acked, follower)
            report = replica(cluster, follower).store.recovery_report
            if found_by == "background verifier":
                assert report["index"] == "used" and block.number in report["trusted_blocks"]
                assert report["faults"] == []  # the open did not read the damaged record
            else:
                assert report["index"] == "none: rebuilt by a full scan"
                assert report["faults"] == [(target, target, "corrupt")]
            drift, repaired = one_episode(cluster, follower)
            corrupt = finding(drift, "corrupt")
            assert (corrupt["first_seq"], corrupt["last_seq"]) == (target, target)
            assert repaired["fetched_msgs"] == 1
            assert replica(cluster, follower).store.load(target).payload == payload(
                next(i for i, seq in acked.items() if seq == target))


async def test_a_truncated_newest_block_fetches_the_lost_tail(tmp_path):
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path) as cluster:
            js, acked, leader, follower = await setup_stream(cluster, COUNT)
            await cluster.stop(follower)
            path = msgs_dir(cluster, follower)
            newest = os.path.join(path, block_name(block_numbers(path)[-1]))
            with open(newest, "r+b") as handle:
                handle.truncate(os.path.getsize(newest) // 2)
            kept = read_only_store(cluster, follower)
            kept_last = kept.state().last_seq
            kept.close()
            assert kept_last < COUNT

            await restart_and_converge(cluster, js, acked, follower)
            drift, repaired = one_episode(cluster, follower)
            behind = finding(drift, "store_behind")
            assert (behind["first_seq"], behind["last_seq"]) == (kept_last + 1, COUNT)
            assert repaired["fetched_msgs"] == COUNT - kept_last


async def test_a_store_ahead_of_its_log_is_cut_back_and_follows_the_log(tmp_path):
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path) as cluster:
            js, acked, leader, follower = await setup_stream(cluster, COUNT)
            await cluster.stop(follower)
            rogue = [(COUNT + 1 + i, "s.rogue", b"", b"never acknowledged", 1_700_000_000_000_000_000)
                     for i in range(7)]
            with_store(cluster, follower, lambda store: store.append_batch(rogue))

            await restart_and_converge(cluster, js, acked, follower)
            drift, repaired = one_episode(cluster, follower)
            ahead = finding(drift, "store_ahead")
            assert (ahead["first_seq"], ahead["last_seq"]) == (COUNT + 1, COUNT + 7)
            assert repaired["fetched_msgs"] == 0  # cut back locally; the log delivers the real ones
            rogue_left = [seq for seq in range(COUNT + 1, COUNT + 8)
                          if replica(cluster, follower).store.load(seq).subject == "s.rogue"]
            assert rogue_left == []


async def test_a_changed_body_at_an_equal_sequence_is_found_by_the_audit_and_repaired(tmp_path):
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path) as cluster:
            js, acked, leader, follower = await setup_stream(cluster, COUNT)
            await cluster.stop(follower)
            target = COUNT - 40
            with_store(cluster, follower, change_body(target, COUNT))
            changed = read_only_store(cluster, follower)
            assert changed.state().last_seq == COUNT and not changed.faults()  # every CRC still verifies
            changed.close()

            await restart_and_converge(cluster, js, acked, follower)
            audit = [a for a in advisories(cluster, DRIFT_ADVISORY, replica_name=follower) if a["audit_id"]]
            assert audit and audit[0]["found"] != audit[0]["expected"], audit  # the leader's audit found it
            drift, repaired = one_episode(cluster, follower)
            assert finding(drift, "audit_mismatch")
            rebuilt = finding(repaired, "content_mismatch")
            assert rebuilt["first_seq"] == target
            # Probed by CRCs, then cut at the changed message and refetched above it: never the whole stream.
            assert repaired["fetched_msgs"] == COUNT - target + 1
