"""TLS for the node's listeners and cluster links: `ssl` contexts from `TlsConfig` files, reloadable (layer L5).

Owns: `TlsContexts`, which turns one `TlsConfig` into the `ssl.SSLContext`s a listener needs — the server
side (every port) and, for cluster links, the client side a dialing node presents — and rebuilds them
from the same files on `reload()` (SIGHUP). `handshake(stream, context, ...)` wraps a trio stream in a
`trio.SSLStream` and completes the handshake within a deadline.

Invariants:
  1. A context is built completely before it replaces the current one: a reload that fails (a missing
     file, a key that does not match) keeps the working context, logs why, and returns False.
  2. Connections already open keep the context they were made with; only new ones use a reloaded one.
  3. At least TLS 1.2. A verifying side refuses a peer without a certificate, with an expired one, or
     with one its CA did not sign (Python's `ssl` checks the chain and the validity dates).
  4. A cluster link always verifies both ends (mutual TLS); the identity is the CA's signature, not the
     host name (nodes dial addresses, often loopback), so host names are not checked on cluster links.

Imports: stdlib (`ssl`, `logging`), L0, trio, server siblings (`auth_config`).
Reference: nats-server `server/opts.go` (`tls` block), `server/reload.go` (TLS reload on SIGHUP).
"""

from __future__ import annotations

import logging
import ssl

import trio

from jsraft.errors import InvalidConfig
from jsraft.server.settings.auth_config import TlsConfig

log = logging.getLogger("jsraft.server.nats.tls")


class TlsContexts:
    """The SSL contexts of one listener's `TlsConfig` (invariants 1, 2). `mutual`: a cluster link —
    both sides present and verify certificates (invariant 4)."""

    def __init__(self, config: TlsConfig, where: str, *, mutual: bool = False) -> None:
        self.config = config.validate(where)
        self.where = where
        self.mutual = mutual
        if mutual and not config.ca_file:
            raise InvalidConfig(f"{where}: cluster TLS needs a ca_file (links verify each other)")
        try:
            self.server, self.client = self._build()
        except (OSError, ssl.SSLError, ValueError) as error:
            raise InvalidConfig(f"{where}: cannot load the TLS files: {error}") from None

    @property
    def handshake_timeout_s(self) -> float:
        return self.config.timeout_ms / 1000

    def _build(self) -> tuple[ssl.SSLContext, ssl.SSLContext | None]:
        config = self.config
        server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server.minimum_version = ssl.TLSVersion.TLSv1_2
        server.load_cert_chain(config.cert_file, config.key_file)
        if config.ca_file:
            server.load_verify_locations(config.ca_file)
        server.verify_mode = ssl.CERT_REQUIRED if (config.verify or self.mutual) else ssl.CERT_NONE
        if not self.mutual:
            return server, None
        client = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=config.ca_file)
        client.minimum_version = ssl.TLSVersion.TLSv1_2
        client.check_hostname = False  # invariant 4
        client.verify_mode = ssl.CERT_REQUIRED
        client.load_cert_chain(config.cert_file, config.key_file)
        return server, client

    def reload(self) -> bool:
        """Rebuild from the files (invariant 1); True when the new contexts are in use."""
        try:
            self.server, self.client = self._build()
        except (OSError, ssl.SSLError, ValueError) as error:
            log.error("%s: TLS reload failed, keeping the current certificates: %s", self.where, error)
            return False
        log.info("%s: TLS certificates reloaded from %s", self.where, self.config.cert_file)
        return True


def check_tls_files(config: object) -> None:
    """Load every TLS file a `NodeConfig` names, so a missing or mismatched file is a configuration
    error (`InvalidConfig`) before anything starts."""
    for field, mutual in (("client_tls", False), ("cluster_tls", True), ("monitor_tls", False)):
        tls = getattr(config, field, None)
        if tls is not None:
            TlsContexts(tls, field, mutual=mutual)


async def handshake(stream: trio.abc.Stream, context: ssl.SSLContext, *, server_side: bool,
                    timeout_s: float) -> trio.SSLStream:
    """`stream` wrapped in TLS, handshake done; raises `trio.TooSlowError`, `trio.BrokenResourceError`
    (a refused certificate among its causes) or `ssl.SSLError` otherwise."""
    tls_stream = trio.SSLStream(stream, context, server_side=server_side, https_compatible=True)
    with trio.fail_after(timeout_s):
        await tls_stream.do_handshake()
    return tls_stream


def peer_address(stream: trio.abc.Stream) -> str:
    """`host:port` of the far end of a TCP stream, possibly under TLS; `?` when unknown."""
    while isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    try:
        return "%s:%d" % stream.socket.getpeername()[:2]  # type: ignore[attr-defined]
    except (OSError, AttributeError):
        return "?"
