"""Tuning of the node-to-node transport, with its cross-field checks (layer L4).

Owns: `TransportConfig`, every bound and timeout a `Transport` uses. Defaults suit a LAN or loopback
cluster with Raft heartbeats every ~100 ms; tests shrink the timeouts.

Invariants (checked by `validate()`):
  1. Every bound is positive, and the send queue can hold at least one maximal frame (otherwise a large
     AppendEntries could never be sent, however idle the link).
  2. `idle_timeout_s >= 2 * keepalive_s`: one late PING must not close a healthy link.
  3. `backoff_initial_s <= backoff_max_s`.

Imports: stdlib, L0, attrs, transport siblings. Reference: hashicorp/raft `Config.validate`.
"""

from __future__ import annotations

import attrs

from jsraft.errors import InvalidConfig
from jsraft.transport.wire import FRAME_BYTES_MAX, FRAME_HEADER_BYTES, HANDSHAKE_FRAME_BYTES_MAX


@attrs.frozen(kw_only=True)
class TransportConfig:
    # Frames waiting for one peer. Raft keeps at most `max_inflight_msgs` (64) AppendEntries in flight
    # per group, and a node hosts many groups; beyond this the peer is not keeping up and drops are cheaper.
    send_queue_frames_max: int = 1024
    # Bytes waiting for one peer: bounds the memory a slow peer can pin (invariant 1: >= one frame).
    send_queue_bytes_max: int = 64 << 20
    # Largest frame accepted from or sent to a peer (see `wire.FRAME_BYTES_MAX` for why).
    frame_bytes_max: int = FRAME_BYTES_MAX
    # A connection that has not completed its handshake in this time is closed.
    handshake_timeout_s: float = 5.0
    dial_timeout_s: float = 5.0
    # An idle link sends a PING this often ...
    keepalive_s: float = 1.0
    # ... and is closed when nothing arrives, or a write makes no progress, for this long.
    idle_timeout_s: float = 10.0
    backoff_initial_s: float = 0.05
    backoff_max_s: float = 2.0
    # A link that lasted this long was healthy: the next failure backs off from `backoff_initial_s`.
    link_stable_s: float = 1.0
    # Inbound connections still in their handshake; more are closed at once (a connection flood costs
    # at most this many sockets for `handshake_timeout_s`).
    inbound_handshakes_max: int = 64

    def validate(self) -> None:
        """Raise `InvalidConfig` if a field or a relation between fields is wrong."""
        positive = ("send_queue_frames_max", "send_queue_bytes_max", "handshake_timeout_s", "dial_timeout_s",
                    "keepalive_s", "idle_timeout_s", "backoff_initial_s", "backoff_max_s",
                    "inbound_handshakes_max")
        for name in positive:
            if not getattr(self, name) > 0:
                raise InvalidConfig(f"transport: {name} must be positive")
        if self.link_stable_s < 0:
            raise InvalidConfig("transport: link_stable_s must not be negative")
        if not max(HANDSHAKE_FRAME_BYTES_MAX, FRAME_HEADER_BYTES) <= self.frame_bytes_max <= 0xFFFFFFFF:
            raise InvalidConfig("transport: frame_bytes_max must fit a u32 and hold a handshake")
        if self.send_queue_bytes_max < self.frame_bytes_max:
            raise InvalidConfig("transport: send_queue_bytes_max must hold at least one frame_bytes_max frame")
        if self.idle_timeout_s < 2 * self.keepalive_s:
            raise InvalidConfig("transport: idle_timeout_s must be at least twice keepalive_s")
        if self.backoff_initial_s > self.backoff_max_s:
            raise InvalidConfig("transport: backoff_initial_s must not exceed backoff_max_s")
