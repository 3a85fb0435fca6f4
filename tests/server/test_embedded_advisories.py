"""The embedded JetStream API (`Node.jetstream()`) publishes the stream lifecycle advisories the JetStream
API publishes: a subscriber on `$JS.EVENT.ADVISORY.>` cannot tell how a stream was created, updated or
deleted.

Method: a real 3-node `Cluster` (real TCP, real files); a `jsraft.client` connection subscribes on n2 and
the test waits until every node routes that interest; n3's embedded API creates, re-creates with the same
config (no second "create", as nats-server), updates and deletes a stream; the subscriber must see exactly
one create, one modify and one delete advisory with nats-server's subjects and `type`.
"""

from __future__ import annotations

import json
from typing import Any

import trio

from jsraft.replica.stream_events import ACTION_TYPE
from drift_kit import start
from test_advisories import _collect, subscribed_on_n2


async def test_embedded_create_update_delete_publish_stream_action_advisories(tmp_path):
    seen: list[tuple[str, dict[str, Any]]] = []
    async with trio.open_nursery() as nursery:
        async with start(nursery, tmp_path) as cluster:
            client, sub = await subscribed_on_n2(cluster, "$JS.EVENT.ADVISORY.STREAM.CREATED.E")
            js = cluster.node("n3").jetstream()
            await js.add_stream(name="E", subjects=["e.>"], num_replicas=3)
            await js.add_stream(name="E", subjects=["e.>"], num_replicas=3)  # idempotent: no new "create"
            await js.update_stream(name="E", subjects=["e.>"], num_replicas=3, description="updated")
            await js.delete_stream("E")

            def actions(s: list) -> list[tuple[str, str]]:
                return [(subject, body["action"]) for subject, body in s if body["type"] == ACTION_TYPE]
            await _collect(sub, seen, lambda s: ("$JS.EVENT.ADVISORY.STREAM.DELETED.E", "delete") in actions(s))
            with trio.move_on_after(0.5):  # anything published after the delete's advisory would be a duplicate
                while True:
                    msg = await sub.next_msg(timeout=5)
                    seen.append((msg.subject, json.loads(msg.data)))
            await client.close()
    assert actions(seen) == [("$JS.EVENT.ADVISORY.STREAM.CREATED.E", "create"),
                             ("$JS.EVENT.ADVISORY.STREAM.UPDATED.E", "modify"),
                             ("$JS.EVENT.ADVISORY.STREAM.DELETED.E", "delete")]
    assert all(body["stream"] == "E" for _, body in seen if body["type"] == ACTION_TYPE)
