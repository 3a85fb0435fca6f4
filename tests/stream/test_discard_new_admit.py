"""The stream leader's `discard: new` admission (`stream.leader_checks.DiscardNew`) sizes the message a
replacement evicts only when `max_bytes` asks for it.

Method: a MemStore whose per-subject reads (`load_next`) are counted, a KV bucket's config (history 2 per key,
`discard: new`, no `max_bytes`): a put to a key at its limit is admitted as a replacement (no new message,
the whole size) reading nothing — it used to find the key's oldest revision by scanning the stream from its
head, a read per message, on every put. With `max_bytes` set the size is read and counted, as before.
"""

from __future__ import annotations

import json

from jsraft.jsapi.stream_config import parse_stream_config
from jsraft.store.memstore import MemStore
from jsraft.stream.inflight import InFlight
from jsraft.stream.leader_checks import DiscardNew


class CountingStore(MemStore):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def load_next(self, filters, start_seq):  # type: ignore[no-untyped-def]
        self.reads += 1
        return super().load_next(filters, start_seq)


def _admission(**limits):
    config, _ = parse_stream_config(json.dumps({"name": "KV", "subjects": ["k.>"], "discard": "new",
                                                "max_msgs_per_subject": 2, **limits}).encode())
    store = CountingStore()
    for seq, subject in enumerate(["k.a", "k.b", "k.a", "k.b"], start=1):
        store.append(seq, subject, b"", b"x" * 10, seq)
    return DiscardNew(config, store, InFlight()), store


def test_a_replacement_is_admitted_without_reading_the_evicted_message():
    check, store = _admission()
    assert check.admit("k.a", 50) == (0, 50)  # replaces: no new message
    assert check.admit("k.c", 50) == (1, 50)
    assert store.reads == 0


def test_with_max_bytes_the_evicted_size_is_read_and_counted():
    check, store = _admission(max_bytes=10_000)
    net_msgs, net_bytes = check.admit("k.a", 50)
    assert net_msgs == 0 and 0 < net_bytes < 50 and store.reads > 0
