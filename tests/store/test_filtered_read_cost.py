"""A filtered consumer reading a stream in order costs each read O(1) block slots, not the rest of the block.

Method: a FileStore with one large block of 4,000 messages on one subject; every block's `offsets` (the
per-sequence slot table every read scans) is wrapped in a sequence that counts the slots read. Reading the
whole stream as a filtered consumer does — `load_next(filters, seq)` from each found message's seq + 1 —
must read a number of slots proportional to the messages, not to their square (which is what listing the
rest of the block on every read did: nats-py's `pull_subscribe` sets a filter, and a 30,000-message pull
loop stalled on it). The same with a filter that matches every other message, and the results are checked
against the messages put.
"""

from __future__ import annotations

from store_helpers import put

from jsraft.disk import OsDisk
from jsraft.store import StoreConfig
from jsraft.store.filestore import FileStore

MESSAGES = 4000


class CountingSlots:
    def __init__(self, slots) -> None:
        self.slots, self.reads = slots, 0

    def __getitem__(self, index):
        self.reads += 1
        return self.slots[index]

    def __len__(self) -> int:
        return len(self.slots)

    def __getattr__(self, name):
        return getattr(self.slots, name)


def read_all(store, filters) -> list[int]:
    found, seq = [], 1
    while True:
        try:
            msg = store.load_next(filters, seq)
        except Exception as error:  # NoMessageFound ends the read
            assert type(error).__name__ == "NoMessageFound", error
            return found
        found.append(msg.seq)
        seq = msg.seq + 1


def test_a_filtered_in_order_read_is_linear(tmp_path):
    store = FileStore.open(OsDisk(str(tmp_path)), StoreConfig(name="S", block_size=64 << 20))
    try:
        for i in range(MESSAGES):
            put(store, "f.x" if i % 2 == 0 else "f.y")
        counters = []
        for block in store.blocks:
            block.offsets = CountingSlots(block.offsets)
            counters.append(block.offsets)
        assert read_all(store, ["f.x"]) == list(range(1, MESSAGES + 1, 2))
        assert read_all(store, ["f.>"]) == list(range(1, MESSAGES + 1))
        reads = sum(counter.reads for counter in counters)
        assert reads < 10 * MESSAGES, f"{reads} slot reads for {MESSAGES + MESSAGES // 2} in-order reads"
    finally:
        store.close()
