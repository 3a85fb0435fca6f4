"""A pull request's answer as the differential oracle (`oracle_script`) plays and compares it.

Method: a JetStream pull delivers a message under the stream's subject (not the request's reply inbox),
so nats-py's `nc.request`, which routes answers by inbox token, never sees it: the request is published
with a reply inbox subscribed for one message (`pull`). The answer is kept as a dict
(`message_answer`): headers (a status is `Status` / `Description`), payload, subject, and the ack reply
subject with its delivery timestamp masked, the only token that differs between two servers.
"""

from __future__ import annotations

from typing import Any

REQUEST_TIMEOUT_S = 10.0


async def pull(nc: Any, subject: str, payload: bytes) -> Any:
    """One pull request's first answer, on an inbox of its own."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, max_msgs=1)
    try:
        await nc.publish(subject, payload, reply=inbox)
        return await sub.next_msg(timeout=REQUEST_TIMEOUT_S)
    finally:
        await sub.unsubscribe()


def message_answer(subject: str, reply: str | None, headers: dict[str, str] | None, data: bytes) -> dict[str, Any]:
    """A delivered message or a status as compared: its subject (a status comes on the requester's inbox:
    not compared), the ack reply's tokens with the delivery time masked, headers and payload."""
    answer: dict[str, Any] = {"headers": dict(headers or {}), "data": data.decode(errors="replace")}
    if not subject.startswith("_INBOX."):
        answer["subject"] = subject
    if reply:
        tokens = reply.split(".")
        answer["reply"] = ".".join("<ts>" if t.isdigit() and len(t) >= 16 else t for t in tokens)
    return answer
