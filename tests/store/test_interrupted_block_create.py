"""A crash while a new block file is being created loses nothing and damages nothing.

Method: `BlockFiles.create` opens the next block file, writes its preamble and syncs it before the block
takes a message; a process killed between the open and the write leaves an empty file (a power cut can
also leave a prefix of the preamble). Found by the chaos harness (S11, seed 2, 2026-11-27): the restarted
store adopted the empty file as its newest block and appended the next messages at offset 0, with no
header, so the next full scan read the whole block as damage (32 sequences reported corrupt on a node
that had only been SIGKILLed). Here a store is written past a block roll, the next block's file is
replaced by what the crash left (empty, or a prefix of its preamble), the store is reopened (from its
index and by a full scan), written to, closed, and reopened by a full scan: every message must load,
with no fault. A newest block with a bad header that is not such a prefix is left as it is.
"""

from __future__ import annotations

import pytest

from jsraft.disk import OsDisk
from jsraft.store import StoreConfig
from jsraft.store.blocks import block_name, block_preamble
from jsraft.store.filestore import FileStore

CONFIG = StoreConfig(block_size=65536)
PAYLOAD = b"p" * 3000


def _fill(store: FileStore, first: int, last: int) -> None:
    for seq in range(first, last + 1):
        store.append(seq, f"s.{seq % 3}", b"", PAYLOAD + seq.to_bytes(4, "big"), 10 * seq)


def _loads_everything(store: FileStore, last: int) -> None:
    assert store.faults() == []
    assert store.state().msgs == last
    for seq in range(1, last + 1):
        assert store.load(seq).payload == PAYLOAD + seq.to_bytes(4, "big")


@pytest.mark.parametrize("left", ["empty", "file header only", "preamble minus one byte"])
@pytest.mark.parametrize("use_index", [True, False])
def test_an_interrupted_block_create_is_finished_on_open(tmp_path, left: str, use_index: bool) -> None:
    root = str(tmp_path)
    store = FileStore.open(OsDisk(root), CONFIG)
    _fill(store, 1, 30)
    store.sync()
    newest = store.newest()
    number, first_seq = newest.number + 1, newest.last_seq + 1
    store.close()  # writes the index; the crash below happens after it, while the next block is created
    preamble = block_preamble(number, first_seq)
    cut = {"empty": 0, "file header only": 8, "preamble minus one byte": len(preamble) - 1}[left]
    with open(tmp_path / block_name(number), "wb") as handle:
        handle.write(preamble[:cut])

    reopened = FileStore.open(OsDisk(root), CONFIG, use_index=use_index)
    _loads_everything(reopened, 30)
    _fill(reopened, 31, 60)
    reopened.sync()
    reopened.files.abandon()  # a second crash: no close, no index

    scanned = FileStore.open(OsDisk(root), CONFIG, use_index=False)
    _loads_everything(scanned, 60)
    assert open(tmp_path / block_name(number), "rb").read().startswith(preamble)
    scanned.close()


def test_a_bad_header_that_is_not_a_torn_preamble_is_left_alone(tmp_path) -> None:
    """A newest block that holds messages and has a bad header is not an interrupted create: its file
    is not rewritten (its bytes stay for repair and for the operator), and none of its messages is
    served."""
    root = str(tmp_path)
    store = FileStore.open(OsDisk(root), CONFIG)
    _fill(store, 1, 30)
    newest = store.newest()
    number, first_seq = newest.number, newest.first_seq
    store.close()
    path = tmp_path / block_name(number)
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF  # the magic of a block that holds messages
    path.write_bytes(bytes(data))
    reopened = FileStore.open(OsDisk(root), CONFIG, use_index=False)
    assert path.read_bytes() == bytes(data)
    assert reopened.state().last_seq < first_seq
