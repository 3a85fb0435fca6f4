"""`Republisher`: a stream's `republish` — each message this node stored as leader, published again on
its transformed subject once stored (layer L3½).

Owns: deciding which applied messages are republished and building what is sent: the republish
transform (`jsapi.subject_transform`) applied to the stored subject, and nats-server's headers —
the client's own header block kept, then `Nats-Stream`, `Nats-Subject`, `Nats-Sequence`,
`Nats-Time-Stamp` (RFC 3339, UTC), `Nats-Last-Sequence` (the last sequence of that exact subject before
this message, 0 for the first), and for `headers_only` `Nats-Msg-Size` (the payload's length) with an
empty payload. `StreamAdapter` calls `before` ahead of each entry it applies and `after` once applied.

Invariants:
  1. Only a leader republishes, once: an entry is republished by the node that leads the term it was
     proposed in (`entry.term` is this node's current term as leader, `leading_term`), so a new leader
     never republishes what its predecessor applied and published before it went (nats-server
     republishes from its leader's apply too; an entry whose leader lost its term before applying it
     is not republished by anyone, as in nats-server).
  2. Only stored messages: nothing for an entry that drifted or failed, nor for a seq the store
     refused; the message goes out after its entry applied (it is committed, DESIGN §2).
  3. A subject the transform does not match, or that the transform turns into one that cannot be
     published, is not republished (nats-server suppresses it); it never fails the store.
  4. `Nats-Last-Sequence` is read from the store before the entry applies (a per-subject limit may
     remove that message as this one is stored) and carried along the entry's own messages.
  5. No I/O here: what is to be sent goes to `send` (the stream replica attaches the node's client port;
     until then nothing is republished).

Imports: stdlib, L0, L1 (`jsapi`, `raft.types`), L3 (`stream`), replica siblings (`consumer_pull.Send`). Reference: nats-server
`server/stream.go` (`processJetStreamMsg`: "Republish state if needed", "Check for republish").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from jsraft.errors import JsraftError
from jsraft.jsapi.consumer_config import rfc3339
from jsraft.jsapi.subject_transform import Transform, compile_transform, publishable
from jsraft.raft.types import Entry
from jsraft.replica.consumer_pull import Send
from jsraft.stream import ApplyResult, EntryKind, Health, StreamStateMachine
from jsraft.stream.entries import MsgsBatch, decode_entry, entry_kind

Publish = Callable[[Send], None]


class Pending(NamedTuple):
    """An entry about to apply whose messages are to be republished (invariant 4)."""

    transform: Transform
    headers_only: bool
    batch: MsgsBatch
    last_seqs: dict[str, int]  # per subject: its last seq in the store before the entry


def _drop(send: Send) -> None:
    return None


class Republisher:
    def __init__(self, machine: StreamStateMachine, leading_term: Callable[[], int | None]) -> None:
        self.machine = machine
        self.leading_term = leading_term  # the Raft term this node leads the group in, else None
        self.send: Publish = _drop  # invariant 5
        self.republished = 0  # messages sent (monitoring, tests)

    def before(self, entry: Entry) -> Pending | None:
        """What `entry` will republish once applied, or None (the common case, decided cheaply)."""
        machine = self.machine
        republish = machine.config.republish
        if republish is None or not republish.dest or machine.health is not Health.current:
            return None
        try:
            if entry_kind(entry.data) is not EntryKind.MSGS:
                return None
            if self.leading_term() != entry.term:  # invariant 1
                return None
            batch = decode_entry(entry.data)
            transform = compile_transform(republish.src or ">", republish.dest)
        except (JsraftError, ValueError):  # malformed (the machine reports it) or no transform
            return None
        if transform is None or not isinstance(batch, MsgsBatch):
            return None
        last_seqs: dict[str, int] = {}
        for msg in batch.msgs:
            if msg[0] not in last_seqs:
                last_seqs[msg[0]] = self._last_seq(msg[0])
        return Pending(transform, republish.headers_only, batch, last_seqs)

    def _last_seq(self, subject: str) -> int:
        try:
            return self.machine.store.load_last(subject).seq
        except JsraftError:  # none stored (or unreadable): nats-server says 0 then too
            return 0

    def after(self, pending: Pending, result: object) -> None:
        """`pending`'s entry applied with `result`: send its stored messages (invariants 2 and 3)."""
        if not isinstance(result, ApplyResult) or result.finding is not None or result.error is not None:
            return
        refused = result.refused or {}
        stream, batch, last_seqs = self.machine.config.name, pending.batch, pending.last_seqs
        for offset, (subject, headers, payload, timestamp_ns, _, _) in enumerate(batch.msgs):
            seq = batch.first_seq + offset
            if seq in refused:
                continue
            last_seq, last_seqs[subject] = last_seqs.get(subject, 0), seq
            target = pending.transform.match(subject)
            if target is None or not publishable(target):
                continue
            block = republish_headers(headers, stream, subject, seq, timestamp_ns, last_seq,
                                      len(payload) if pending.headers_only else None)
            self.send(Send(target, b"" if pending.headers_only else bytes(payload), None, block))
            self.republished += 1


def republish_headers(headers: bytes, stream: str, subject: str, seq: int, timestamp_ns: int, last_seq: int,
                      msg_size: int | None) -> bytes:
    """nats-server's republish header block: the client's headers (without their closing blank line),
    then the stream's, `Nats-Msg-Size` only for `headers_only` (`msg_size` not None)."""
    lines = (f"Nats-Stream: {stream}\r\nNats-Subject: {subject}\r\nNats-Sequence: {seq}\r\n"
             f"Nats-Time-Stamp: {rfc3339(timestamp_ns)}\r\nNats-Last-Sequence: {last_seq}\r\n")
    if msg_size is not None:
        lines += f"Nats-Msg-Size: {msg_size}\r\n"
    head = bytes(headers[:-2]) if headers else b"NATS/1.0\r\n"
    return head + lines.encode() + b"\r\n"
