"""Operating errors of the node-to-node transport (layer L4).

Owns: the conditions a link or a caller of `Transport` meets — a peer that breaks the wire protocol, a
handshake refused, a frame too large to send, a Raft message that does not decode. They are `JsraftError`s
with stable codes in jsraft's 2xxxx range; 20400–20499 is reserved for the transport
(20100–20199 Raft, 20200–20299 runtime, 20300–20399 meta).

A peer's misbehaviour never crashes the node: every error a peer can cause is a `TransportProtocolError`,
which closes that one link and is logged. `RaftCodecError` is also a `PeerProtocolError` (the Raft core's
gateway error), so the runtime can wrap "decode, then `validate_message()`" in one `except`.

Invariants:
  1. An `err_code` here is never reused or renumbered (same rule as `jsraft.errors`).

Imports: L0, L1 (`raft.errors`). Reference: DESIGN.md §1 and STYLE.md "Errors".
"""

from __future__ import annotations

from jsraft.errors import JsraftError
from jsraft.raft.errors import PeerProtocolError


class TransportError(JsraftError):
    """Base of the transport's operating errors."""

    err_code = 20400
    http_code = 503
    default_description = "transport error"


class TransportProtocolError(TransportError):
    """A peer sent bytes that break the wire protocol (framing, CRC, size, handshake); its link is closed."""

    err_code = 20401
    http_code = 500
    default_description = "transport protocol error"


class HandshakeRefused(TransportProtocolError):
    """A well-formed handshake that is refused: another cluster, another protocol version, an unknown node,
    the wrong node at a peer's address, or a duplicate connection. `reason` is sent to the peer."""

    err_code = 20402
    default_description = "handshake refused"

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"handshake refused: {reason}")


class FrameTooLarge(TransportError):
    """A local `send()` whose frame would exceed the frame bound: the peer would refuse it, so it is never
    queued. The caller (Raft's batching) must keep messages under `Transport.payload_bytes_max`."""

    err_code = 20403
    http_code = 500
    default_description = "frame too large"


class RaftCodecError(TransportProtocolError, PeerProtocolError):
    """Bytes that are not a valid encoding of a Raft message (truncated, unknown tag or version, bad flags,
    trailing bytes, invalid UTF-8)."""

    err_code = 20404
    http_code = 500
    default_description = "malformed raft message"


class LinkClosed(TransportError):
    """A link ended without the peer breaking the protocol: it closed the connection, stopped sending or
    reading for longer than the idle timeout, or said it was dropping the link. Reconnect and carry on."""

    err_code = 20405
    http_code = 503
    default_description = "link closed"
