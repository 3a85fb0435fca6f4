"""A burst of commands a TLS client sends in one write is answered in one write (client_conn invariant 9).

Method: a real node with TLS on its client port (certificates from `jsraft.testing.certs`), and a
client driven by hand with Python's `ssl.SSLObject` over memory BIOs on a trio TCP stream, so the test
controls record boundaries: each round writes two PUBs as two TLS records in one TCP write, to two
subjects this same connection subscribes. The server's TLS stream hands it one record per read with a
scheduling point between, so a writer that does not give the reader its turn answers the first PUB
alone about half the time. The client reads the answer record by record (`SSLObject.read` returns one
record's data at most) and requires both MSGs in the first; twenty rounds make a lucky pass without
the fix about one in a million. This is what made nats-py's `test_tls_reconnect` flaky: the second
answer arrived after the client had sent its close_notify.
"""

from __future__ import annotations

import ssl

import pytest
import trio

import jsraft
from jsraft.server.settings.auth_config import TlsConfig
from jsraft.testing.certs import TestCa

from nats_kit import single

pytestmark = pytest.mark.trio

DEADLINE_S = 10.0
ROUNDS = 20


class ManualTls:
    """A TLS client whose records are exactly the `write` calls it makes."""

    def __init__(self, tcp: trio.SocketStream, context: ssl.SSLContext) -> None:
        self.tcp = tcp
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_hostname="localhost")

    async def _pump(self) -> None:
        """Send what TLS produced; then wait for the server's next bytes."""
        if self.outgoing.pending:
            await self.tcp.send_all(self.outgoing.read())
        data = await self.tcp.receive_some(65536)
        assert data, "the server closed the connection"
        self.incoming.write(data)

    async def handshake(self) -> None:
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._pump()
        if self.outgoing.pending:
            await self.tcp.send_all(self.outgoing.read())

    async def send_records(self, *records: bytes) -> None:
        """Each of `records` as its own TLS record, all in one TCP write."""
        for record in records:
            self.tls.write(record)
        await self.tcp.send_all(self.outgoing.read())

    async def next_record(self) -> bytes:
        """The plaintext of the server's next application-data record."""
        while True:
            try:
                return self.tls.read(1 << 20)
            except ssl.SSLWantReadError:
                await self._pump()


async def test_two_records_sent_together_are_answered_in_one_record(tmp_path):
    ca = TestCa(tmp_path / "ca")
    cert, key = ca.issue("server")
    config = single(tmp_path, client_tls=TlsConfig(cert_file=cert, key_file=key))
    async with jsraft.open_node(config) as node:
        with trio.fail_after(DEADLINE_S * 3):
            tcp = await trio.open_tcp_stream(*node.client_address)
            info = b""
            while not info.endswith(b"\r\n"):
                info += await tcp.receive_some(4096)
            assert info.startswith(b"INFO ")
            client = ManualTls(tcp, ssl.create_default_context(cafile=ca.ca_file))
            await client.handshake()
            await client.send_records(b'CONNECT {"verbose":false}\r\nSUB a 1\r\nSUB b 2\r\nPING\r\n')
            assert await client.next_record() == b"PONG\r\n"
            for round_ in range(ROUNDS):
                await client.send_records(b"PUB a 1\r\nx\r\n", b"PUB b 1\r\ny\r\n")
                first = await client.next_record()
                assert first == b"MSG a 1 1\r\nx\r\nMSG b 2 1\r\ny\r\n", (round_, first)
            await trio.aclose_forcefully(tcp)
