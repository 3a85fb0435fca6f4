"""A consumer create's answer counts `num_pending` from where the consumer starts, not from the leader's
live cursor.

Method: CI saw nats-py's KV watcher (an ordered push consumer) take its initial values as done before it
saw them: the push leader delivered both values between the CREATE's apply and the create's answer, the
answer said `num_pending: 0`, and nats-py emitted its end-of-initial-values marker first
(tests/server/test_consumers_push.py::test_kv_watch_and_object_store_get_use_ordered_consumers, once in
CI, 2026-11-27). Here `info_json` gets a leader whose cursor already ran past every message, as after
such deliveries: the create's answer (`as_created`) still counts every message above the consumer's
replicated start cursor, while a later info counts from the live cursor, as nats-server's does.
"""

from __future__ import annotations

import json

from jsraft.consumer.machine import ConsumerEntry
from jsraft.replica.consumer_pull import Leading
from jsraft.server.api.consumer_admin import info_json
from jsraft.store.memstore import MemStore


def _store_with(subjects: list[str]) -> MemStore:
    store = MemStore()
    for seq, subject in enumerate(subjects, start=1):
        store.append(seq, subject, b"", b"v", seq)
    return store


def test_the_create_answer_counts_from_the_start_not_the_live_cursor() -> None:
    store = _store_with(["$KV.B.a", "$KV.B.b", "$KV.B.a"])
    raw = json.dumps({"deliver_subject": "_INBOX.w", "deliver_policy": "all", "ack_policy": "none"}).encode()
    entry = ConsumerEntry("W", raw, created_ns=1)
    leading = Leading("KV_B", entry, now_ns=1)
    leading.leader.next_seq = 4  # the push leader delivered seqs 1..3 before the answer was built

    created = info_json("KV_B", entry, leading, store, None, now_ns=2, api_level=1, as_created=True)
    later = info_json("KV_B", entry, leading, store, None, now_ns=2, api_level=1)

    assert created["num_pending"] == 3
    assert later["num_pending"] == 0
