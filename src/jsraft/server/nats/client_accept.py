"""A new client connection's path from accept to `ClientConn.run` (layer L5).

Owns: `accept_client` — the connection bound (`connections_max`), the TLS upgrade (after the plain INFO
line, or before anything with `handshake_first`, nats-server 2.10+), the per-connection nonce. Apart
from `client_auth` so that `client_conn` (which mixes in `client_auth.ConnSecurity`) and this module,
which builds `ClientConn`s, import each other in one direction only.

Invariants:
  1. A client that fails the TLS handshake (no certificate when one is required, an expired or foreign
     one, no handshake in time) is closed and logged with its address; it never reaches the protocol.

Imports: stdlib, trio, L4 (`protocol` error texts), server siblings (`auth`, `client_auth`, `client_conn`,
`tls`). Reference: nats-server `server/server.go` (`createClient`).
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from jsraft.protocol import errors as texts
from jsraft.server.nats.auth import new_nonce
from jsraft.server.nats.client_auth import err_line
from jsraft.server.nats.client_conn import ClientConn
from jsraft.server.nats.tls import handshake, peer_address

log = logging.getLogger("jsraft.server.clients")


async def accept_client(server: Any, stream: trio.SocketStream) -> None:
    """Serve one accepted connection of `server` (a `ClientServer`) until it closes."""
    server._next_cid += 1
    cid, peer = server._next_cid, peer_address(stream)
    if len(server.clients) >= server.options.connections_max:
        log.warning("refusing client %s: %d connections", peer, len(server.clients))
        with trio.move_on_after(1.0):
            await stream.send_all(err_line(texts.ERR_MAX_CONNECTIONS))
        await trio.aclose_forcefully(stream)
        return
    conn = ClientConn(server, stream, cid, peer)
    if server.authenticator is not None and server.authenticator.wants_nonce:
        conn.nonce = new_nonce()
    info: bytes | None = server.info_line(conn)
    if server.tls is not None:
        conn.stream = await _tls_upgrade(server, stream, info, peer)
        if conn.stream is None:
            await trio.aclose_forcefully(stream)
            return
        if not server.tls.config.handshake_first:
            info = None  # sent before the upgrade
    server.clients[cid] = conn
    server.stats.connections += 1
    try:
        await conn.run(info)
    finally:
        del server.clients[cid]


async def _tls_upgrade(server: Any, stream: trio.SocketStream, info: bytes, peer: str) -> trio.SSLStream | None:
    """The client's stream under TLS, or None (logged; invariant 1)."""
    tls = server.tls
    try:
        if not tls.config.handshake_first:
            with trio.fail_after(tls.handshake_timeout_s):
                await stream.send_all(info)
        return await handshake(stream, tls.server, server_side=True, timeout_s=tls.handshake_timeout_s)
    except (trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
        log.warning("client %s: TLS handshake failed: %s", peer, error.__cause__ or error or "timed out")
        server.stats.tls_failures += 1
        return None
