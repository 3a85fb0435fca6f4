"""Cluster-secret authentication of node-to-node links, sans-IO: a mutual challenge-response HMAC.

Owns: the bytes of the proof exchange that precedes HELLO when the cluster has a shared secret, and the
checks. With a secret configured, a connection starts::

    acceptor -> dialer   CHALLENGE  nonce_a (32 random bytes)
    dialer   -> acceptor PROOF      nonce_d (32 random bytes) | HMAC(secret, "dialer" | cluster | nonce_a | nonce_d)
    acceptor -> dialer   PROOF      HMAC(secret, "acceptor" | cluster | nonce_a | nonce_d)

and then HELLO as usual (`wire`). The acceptor reads nothing else — no HELLO, no DATA — from a dialer
whose proof did not verify; the dialer sends its HELLO only to an acceptor whose proof verified.

Invariants:
  1. The secret never crosses the wire: only HMAC-SHA256 values over fresh nonces do, so a recorded
     exchange proves nothing on a later connection (each side picks a new nonce per connection).
  2. The two proofs differ by role label, so an acceptor's proof cannot be reflected back as a dialer's.
  3. Proofs are compared in constant time (`hmac.compare_digest`).
  4. Bodies have fixed lengths; anything else is a protocol error (the link closes).

`secure_outbound` / `secure_inbound` run the exchange (and TLS first, when configured) on a `Link`.

Imports: stdlib (`hmac`, `hashlib`, `os`), trio, transport siblings (`wire`, `errors`, `link`).
Reference: RFC 2104 (HMAC); nats-server route authorization (user/password in CONNECT) made a
challenge-response so a passive listener learns nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import Any

import trio

from jsraft.transport.errors import HandshakeRefused, TransportProtocolError
from jsraft.transport.link import Link
from jsraft.transport.wire import FrameKind, decode_refuse, encode_frame

NONCE_BYTES = 32
MAC_BYTES = 32  # SHA-256
SECRET_REFUSAL = "cluster authentication failed: the peer did not prove the cluster secret"


def _mac(secret: bytes, role: bytes, cluster: str, nonce_a: bytes, nonce_d: bytes) -> bytes:
    message = b"jsraft-cluster-v1|" + role + b"|" + cluster.encode("utf-8") + b"|" + nonce_a + nonce_d
    return hmac.new(secret, message, hashlib.sha256).digest()


class ClusterAuth:
    """One node's side of the exchange, for one cluster name and secret."""

    def __init__(self, secret: str | bytes, cluster_name: str) -> None:
        self._secret = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
        self.cluster_name = cluster_name

    def __repr__(self) -> str:
        return f"ClusterAuth(cluster_name={self.cluster_name!r})"  # never the secret (invariant 1)

    # --- Acceptor ---------------------------------------------------------------------------------

    @staticmethod
    def challenge() -> tuple[bytes, bytes]:
        """(nonce_a, the CHALLENGE frame to send)."""
        nonce_a = os.urandom(NONCE_BYTES)
        return nonce_a, encode_frame(FrameKind.CHALLENGE, nonce_a)

    def check_dialer(self, nonce_a: bytes, proof_body: bytes) -> bytes | None:
        """The acceptor's PROOF frame if the dialer's proof verifies, else None (invariants 2–4)."""
        if len(proof_body) != NONCE_BYTES + MAC_BYTES:
            raise TransportProtocolError(f"PROOF of {len(proof_body)} bytes, expected {NONCE_BYTES + MAC_BYTES}")
        nonce_d, mac = proof_body[:NONCE_BYTES], proof_body[NONCE_BYTES:]
        if not hmac.compare_digest(mac, _mac(self._secret, b"dialer", self.cluster_name, nonce_a, nonce_d)):
            return None
        return encode_frame(FrameKind.PROOF, _mac(self._secret, b"acceptor", self.cluster_name, nonce_a, nonce_d))

    # --- Dialer -----------------------------------------------------------------------------------

    def answer(self, challenge_body: bytes) -> tuple[bytes, bytes]:
        """(the dialer's PROOF frame, the acceptor proof it must then receive) for a CHALLENGE body."""
        if len(challenge_body) != NONCE_BYTES:
            raise TransportProtocolError(f"CHALLENGE of {len(challenge_body)} bytes, expected {NONCE_BYTES}")
        nonce_d = os.urandom(NONCE_BYTES)
        mac = _mac(self._secret, b"dialer", self.cluster_name, challenge_body, nonce_d)
        expected = _mac(self._secret, b"acceptor", self.cluster_name, challenge_body, nonce_d)
        return encode_frame(FrameKind.PROOF, nonce_d + mac), expected

    @staticmethod
    def acceptor_ok(expected: bytes, proof_body: bytes) -> bool:
        return len(proof_body) == MAC_BYTES and hmac.compare_digest(proof_body, expected)


# --- Running the exchange on a link (the caller bounds it with the handshake timeout) --------------------


async def secure_outbound(link: Link, auth: ClusterAuth | None, tls: Any) -> None:
    """Dialer: TLS (if `tls`), then prove the secret and check the acceptor's proof (if `auth`); raises
    `HandshakeRefused` / `TransportProtocolError` / a link error otherwise."""
    if tls is not None:
        await link.start_tls(tls.client, server_side=False)
    if auth is None:
        return
    frame = await link.receive_frame()
    if frame.kind is FrameKind.REFUSE:
        raise HandshakeRefused(f"peer refused: {decode_refuse(frame.body)}")
    if frame.kind is not FrameKind.CHALLENGE:
        raise TransportProtocolError(f"expected CHALLENGE (this cluster uses a secret), got {frame.kind.name}")
    proof, expected = auth.answer(frame.body)
    await link.stream.send_all(proof)
    frame = await link.receive_frame()
    if frame.kind is FrameKind.REFUSE:
        raise HandshakeRefused(f"peer refused: {decode_refuse(frame.body)}")
    if frame.kind is not FrameKind.PROOF or not auth.acceptor_ok(expected, frame.body):
        raise TransportProtocolError("the acceptor did not prove the cluster secret")


async def secure_inbound(link: Link, auth: ClusterAuth | None, tls: Any) -> str | None:
    """Acceptor: TLS (if `tls`), then the challenge (if `auth`); the refusal's reason (sent to the peer
    when it got that far), or None when the dialer may go on to HELLO."""
    if tls is not None:
        try:
            await link.start_tls(tls.server, server_side=True)
        except (trio.BrokenResourceError, OSError) as exc:
            return f"TLS handshake failed: {exc.__cause__ or exc}"
    if auth is None:
        return None
    nonce_a, challenge = auth.challenge()
    await link.stream.send_all(challenge)
    frame = await link.receive_frame()
    reply = auth.check_dialer(nonce_a, frame.body) if frame.kind is FrameKind.PROOF else None
    if reply is None:
        await link.refuse(SECRET_REFUSAL)
        got = "a wrong proof" if frame.kind is FrameKind.PROOF else f"{frame.kind.name} instead of a proof"
        return f"{SECRET_REFUSAL} ({got})"
    await link.stream.send_all(reply)
    return None
