"""Helpers for the message-schedule tests (ADR-51) on real nodes through nats-py.

Method: `at` writes an `@at` schedule for a wall-clock instant; `api` is a JetStream API request answered
as JSON; `create_stream` makes the `LATER` stream with `allow_msg_schedules` and waits for its leader;
`wait_fired` polls a target subject until it holds a message, with a deadline.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

from nats_kit import until

CONFIG = {"name": "LATER", "subjects": ["later.>"], "allow_msg_schedules": True}
FIRED_DEADLINE_S = 15.0


def at(when_s: float) -> str:
    """`Nats-Schedule: @at <RFC 3339>` for the wall-clock instant `when_s` (seconds since the epoch)."""
    return "@at " + datetime.fromtimestamp(when_s, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"


async def api(nc, subject: str, body: dict) -> dict:
    return json.loads((await nc.request(subject, json.dumps(body).encode(), timeout=10)).data)


async def create_stream(nc, node) -> None:
    created = await api(nc, "$JS.API.STREAM.CREATE.LATER", CONFIG)
    assert "error" not in created, created
    await until(lambda: node.streams.replicas["LATER"].leader is not None, "the stream's leader")


async def wait_fired(nc, target: str) -> float:
    """Poll until `target` holds a message; the seconds it took."""
    began = time.time()
    while "message" not in await api(nc, "$JS.API.STREAM.MSG.GET.LATER", {"last_by_subj": target}):
        assert time.time() - began < FIRED_DEADLINE_S, f"{target} was not fired in time"
        await until(lambda: True, "a turn of the node")
    return time.time() - began
