"""The chaos harness's at-rest faults (`jsraft.testing.chaos.disk_faults`) on real store directories.

Method: a real `FileStore` (small blocks, so there are several sealed ones) is written and closed; a fault
is applied to its files; then the store is verified the way an operator (and the chaos scenarios) would:
`python -m jsraft check DIR --json` in a subprocess, and/or `FileStore.open` on the directory. Each test
checks that the damage found is exactly what the fault's description says it made — a flipped bit is
found at exactly that seq and nothing after it is lost, a cut tail loses exactly the records cut, a
deleted block's seqs are reported missing — and `rollback_chunks` is checked byte for byte.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

from jsraft.disk import OsDisk
from jsraft.codec.records import Kind
from jsraft.errors import DamagedSequence
from jsraft.store.base import StoreConfig
from jsraft.store.filestore import FileStore
from jsraft.testing.chaos import disk_faults

MESSAGES = 300


def write_store(directory: str, compression: str = "none") -> dict[int, bytes]:
    rng = random.Random(7)
    store = FileStore.open(OsDisk(directory), StoreConfig(name="T", block_size=64 << 10, compression=compression))
    payloads = {}
    for seq in range(1, MESSAGES + 1):
        payloads[seq] = rng.randbytes(rng.randint(200, 1200))
        store.append(seq, f"chaos.c{seq % 3}", b"", payloads[seq], 1_000_000 + seq)
    store.sync()
    store.close()
    assert len(disk_faults.store_blocks(directory)) >= 4
    return payloads


def jsraft_check(directory: str) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, "-m", "jsraft", "check", directory, "--json"], capture_output=True,
                          text=True, timeout=120)
    return done.returncode, json.loads(done.stdout)


@pytest.mark.parametrize("compression", ["none", "zstd"])
@pytest.mark.parametrize("seed", [1, 2])
def test_flip_bits_found_at_exactly_that_seq(tmp_path, compression, seed):
    directory = str(tmp_path / "msgs")
    payloads = write_store(directory, compression)
    fault = disk_faults.flip_bits(directory, random.Random(seed), n_bits=2)
    assert fault["file"] != disk_faults.store_blocks(directory)[-1]  # a sealed block, not the newest
    assert len(fault["bits"]) == 2
    code, report = jsraft_check(directory)
    assert code == 1 and not report["clean"]
    assert report["streams"][0]["faults"] == [{"first": fault["seq"], "last": fault["seq"], "kind": "corrupt"}]
    store = FileStore.open(OsDisk(directory), StoreConfig(name="T", block_size=64 << 10), use_index=False)
    try:
        with pytest.raises(DamagedSequence):
            store.load(fault["seq"])
        for seq in range(1, MESSAGES + 1):  # nothing else is lost: the rest of the block reads back
            if seq != fault["seq"]:
                assert store.load(seq).payload == payloads[seq]
        assert store.state().last_seq == MESSAGES
    finally:
        store.close()


def test_flip_bits_disabled_check_is_clean(tmp_path):
    """The check above can fail: without the flip the same store is clean."""
    directory = str(tmp_path / "msgs")
    write_store(directory)
    code, report = jsraft_check(directory)
    assert code == 0 and report["clean"] and report["streams"][0]["last_seq"] == MESSAGES


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_truncate_tail_of_newest_block(tmp_path, seed):
    directory = str(tmp_path / "msgs")
    write_store(directory)
    newest = disk_faults.store_blocks(directory)[-1]
    fault = disk_faults.truncate_tail(newest, random.Random(seed), zipf=1.2)
    assert fault["new_size"] == os.path.getsize(newest) == fault["old_size"] - fault["cut_bytes"] > 0
    cut = [a for kind, a, _ in fault["records_cut"] if kind in (Kind.MSG, Kind.MSG_ZSTD)]
    store = FileStore.open(OsDisk(directory), StoreConfig(name="T", block_size=64 << 10), use_index=False)
    try:
        assert store.state().last_seq == (min(cut) - 1 if cut else MESSAGES)
        assert store.faults() == []  # a cut tail is a torn tail, not corruption
    finally:
        store.close()


def test_delete_block_reports_its_seqs_missing(tmp_path):
    directory = str(tmp_path / "msgs")
    write_store(directory)
    fault = disk_faults.delete_block(directory, random.Random(3))
    assert not os.path.exists(fault["file"]) and fault["first_seq"] <= fault["last_seq"] < MESSAGES
    code, report = jsraft_check(directory)
    assert code == 1
    assert report["streams"][0]["faults"] == [{"first": fault["first_seq"], "last": fault["last_seq"],
                                               "kind": "missing"}]


def test_rollback_chunks_writes_back_old_bytes(tmp_path):
    path = str(tmp_path / "state")
    old = bytes(range(256)) * 64  # 4 chunks
    with open(path, "wb") as handle:
        handle.write(old)
    copy = disk_faults.read_copy(path)
    new = bytearray(old)
    new[4096:4100] = b"NEW1"
    new[3 * 4096 + 10:3 * 4096 + 14] = b"NEW3"
    new += b"tail"
    with open(path, "wb") as handle:
        handle.write(new)
    fault = disk_faults.rollback_chunks(path, copy, random.Random(1), n_chunks=2)
    assert fault["chunks"] == [[4096, 4096], [3 * 4096, 4096]] and fault["changed"] == 2
    assert open(path, "rb").read() == old + b"tail"
    fault = disk_faults.rollback_chunks(path, copy, random.Random(1), n_chunks=1)
    assert fault["changed"] == 0 and len(fault["chunks"]) == 1  # nothing left to roll back


_OPEN_STORE = """
import json, sys
from jsraft.disk import OsDisk
from jsraft.store.base import StoreConfig
from jsraft.store.filestore import FileStore
from jsraft.testing.chaos import mutants
if sys.argv[2] != "none":
    mutants.apply(sys.argv[2])
store = FileStore.open(OsDisk(sys.argv[1]), StoreConfig(name="T", block_size=64 << 10), use_index=False)
state = store.state()
print(json.dumps({"last_seq": state.last_seq, "msgs": state.msgs, "faults": [f.first for f in store.faults()]}))
store.close()
"""


@pytest.mark.parametrize("mutant", ["none", "truncate_at_corrupt"])
def test_truncate_at_corrupt_mutant_cuts_from_the_flipped_seq(tmp_path, mutant):
    """In a process of its own (the patch must not leak into this one): the real store keeps everything
    after a flipped record; the mutant throws away everything from it on."""
    directory = str(tmp_path / "msgs")
    write_store(directory)
    seq = disk_faults.flip_bits(directory, random.Random(4))["seq"]
    done = subprocess.run([sys.executable, "-c", _OPEN_STORE, directory, mutant], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    state = json.loads(done.stdout)
    if mutant == "none":
        assert state == {"last_seq": MESSAGES, "msgs": MESSAGES - 1, "faults": [seq]}
    else:
        assert state == {"last_seq": seq - 1, "msgs": seq - 1, "faults": []}


def test_truncate_wal_tail_and_rollback_consumer_state_on_a_copy(tmp_path):
    """The per-stream helpers on a hand-made stream directory: a WAL segment loses only a tail past its
    preamble, and the consumer-state rollback writes back a differing chunk of a snapshot file."""
    from jsraft.codec.records import FILE_HEADER, FILE_MAGIC, encode_record

    stream, old = tmp_path / "S", tmp_path / "old"
    for root in (stream, old):
        (root / "raft" / "wal").mkdir(parents=True)
        (root / "raft" / "snapshots").mkdir()
    segment = FILE_HEADER.pack(FILE_MAGIC, 1, 16) + encode_record(Kind.WAL_SEGMENT_HEADER, 1, 0) + b"".join(
        encode_record(Kind.WAL_ENTRY, index, 1, b"x" * 100) for index in range(1, 50))
    (stream / "raft" / "wal" / f"{1:020d}.log").write_bytes(segment)
    fault = disk_faults.truncate_wal_tail(str(stream / "raft"), random.Random(2))
    assert 0 < fault["cut_bytes"] and fault["new_size"] >= 8 + 25
    assert all(kind == Kind.WAL_ENTRY for kind, _, _ in fault["records_cut"])
    (old / "raft" / "snapshots" / "a.snap").write_bytes(b"A" * 9000)
    (stream / "raft" / "snapshots" / "a.snap").write_bytes(b"A" * 4096 + b"B" * 4904)
    fault = disk_faults.rollback_consumer_state(str(stream), str(old), random.Random(1), n_chunks=2)
    assert fault["chunks"] == [[4096, 4096], [8192, 808]] and fault["changed"] == 2
    assert (stream / "raft" / "snapshots" / "a.snap").read_bytes() == b"A" * 9000
