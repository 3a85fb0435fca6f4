"""Transport (layer L4): node-to-node links over TCP, framed with length + CRC32C, multiplexed by group.

Modules: `transport` (the `Transport` a node runs), `config` (`TransportConfig`), `peer` (per-peer state,
the duplicate-connection rule, `PeerStatus`), `link` (one connection's handshake and read/write loops),
`send_queue` (bounded per-peer queue), `backoff` (reconnect delays), `wire` (sans-IO frame format,
decoder, handshake), `cluster_auth` (the cluster secret's challenge-response proof before HELLO),
`raft_codec` (binary encoding of Raft messages), `binary` (strict reader), `seeds` (open membership:
peers met at run time, bare routes dialed by address), `errors`.

Imports: L0–L1 and trio only (DESIGN.md §1).
"""

from jsraft.transport.config import TransportConfig
from jsraft.transport.errors import (
    FrameTooLarge, HandshakeRefused, LinkClosed, RaftCodecError, TransportError, TransportProtocolError,
)
from jsraft.transport.peer import PeerStatus
from jsraft.transport.raft_codec import decode_message, encode_message, encode_message_parts
from jsraft.transport.seeds import add_peer, start_seed
from jsraft.transport.transport import OnMessage, Transport
from jsraft.transport.wire import FRAME_BYTES_MAX, PROTOCOL_VERSION, FrameDecoder, Hello

__all__ = [
    "FRAME_BYTES_MAX", "FrameDecoder", "FrameTooLarge", "HandshakeRefused", "Hello", "LinkClosed", "OnMessage",
    "PROTOCOL_VERSION", "PeerStatus", "RaftCodecError", "Transport", "TransportConfig", "TransportError",
    "TransportProtocolError", "add_peer", "decode_message", "encode_message", "encode_message_parts", "start_seed",
]
