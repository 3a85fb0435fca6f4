"""A consumer leader whose store knows of damage waits for the repair (delivery rule 6, issue 14).

Method: a real `FileStore` on a temporary directory holds five messages; a consumer is created and all
five are delivered through the log (`consumer_kit.Cluster`). The store is closed, one byte of message 3's
payload is flipped in its block file, and the store is reopened and scanned (as a stream replica does at startup): the scan lists seq 3 as a
fault. A leader rebuilt on that store after `ack_wait` must deliver nothing and propose no TERM (before
the fix the damaged seq could be terminated or skipped while its peers still hold it); a new consumer on
it delivers nothing either. Once seq 3 is repaired from the (test's copy of the) committed message,
every pending message is redelivered, seq 3 included, and the new consumer gets all five in order.
"""

from __future__ import annotations

import os

from consumer_kit import SECOND, Cluster

from jsraft.consumer import ConsumerLeader, TermOp
from jsraft.disk import OsDisk
from jsraft.store import StoreConfig
from jsraft.store.filestore import FileStore

T0 = 5_000 * SECOND
ACK_WAIT_NS = 30 * SECOND


def payload(seq: int) -> bytes:
    return f"payload-{seq:04d}".encode() * 4


def open_store(path: str) -> FileStore:
    return FileStore.open(OsDisk(path), StoreConfig())


def flip_in_blocks(path: str, needle: bytes) -> None:
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        data = bytearray(open(full, "rb").read())
        at = data.find(needle)
        if at >= 0:
            data[at + 3] ^= 0x20
            open(full, "wb").write(bytes(data))
            return
    raise AssertionError("message bytes not found in any block")


def test_a_damaged_store_delivers_and_terminates_nothing_until_repaired(tmp_path):
    path = str(tmp_path / "msgs")
    store = open_store(path)
    for seq in range(1, 6):
        store.append(seq, "a", b"", payload(seq), 1_000 * SECOND + seq)
    cluster = Cluster(store)
    cluster.create("C", ack_policy="explicit")
    leader = ConsumerLeader("S", cluster.set.consumers["C"], T0)
    plan = leader.next_deliveries(store, T0, 10)
    assert [d.stream_seq for d in plan.deliveries] == [1, 2, 3, 4, 5]
    cluster.apply(*plan.ops)
    store.close()

    flip_in_blocks(path, payload(3))
    damaged = open_store(path)
    damaged.scan()  # the verifying scan a stream replica runs at startup
    assert [(fault.first, fault.last) for fault in damaged.faults()] == [(3, 3)]
    cluster.store = damaged
    cluster.set.store = damaged
    later = T0 + 2 * ACK_WAIT_NS
    leader = ConsumerLeader("S", cluster.set.consumers["C"], later)
    plan = leader.next_deliveries(damaged, later + ACK_WAIT_NS, 10)
    assert plan.deliveries == [] and not any(isinstance(op, TermOp) for op in plan.ops)
    cluster.create("D", ack_policy="explicit")
    fresh = ConsumerLeader("S", cluster.set.consumers["D"], later)
    assert fresh.next_deliveries(damaged, later, 10).deliveries == []

    damaged.repair(3, "a", b"", payload(3), 1_000 * SECOND + 3)
    assert damaged.faults() == []
    plan = leader.next_deliveries(damaged, later + ACK_WAIT_NS, 10)
    assert [d.stream_seq for d in plan.deliveries] == [1, 2, 3, 4, 5]
    assert [d.payload for d in plan.deliveries][2].endswith(payload(3))
    assert [d.stream_seq for d in fresh.next_deliveries(damaged, later, 10).deliveries] == [1, 2, 3, 4, 5]
    damaged.close()
