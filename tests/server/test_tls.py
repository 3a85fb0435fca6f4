"""TLS on the client port and the monitoring port, and the monitor token, on a real node.

Method: certificates made at test time (`jsraft.testing.certs`: a CA, leaves, an expired leaf, a
foreign CA) in tmp_path; a real node (`jsraft.open_node`, free ports); clients are Python `ssl` over
trio streams, driven by hand so each step is visible: the plain INFO line (`tls_required`), the TLS
handshake, then CONNECT/PING and a PONG for an admitted client, or a closed connection for a refused
one (TLS 1.3 reports a refused client certificate on the client's first read). nats-py covers the
whole path once. SIGHUP's reload is driven through `Node.reload_tls`, the method the signal handler
calls.
"""

from __future__ import annotations

import json
import logging
import ssl

import pytest
import trio

import jsraft
from jsraft.server.settings.auth_config import TlsConfig
from jsraft.server.ops.monitor import Monitor
from jsraft.testing.certs import TestCa

from nats_kit import in_asyncio, nats_connect, single

pytestmark = pytest.mark.trio

DEADLINE_S = 10.0


def client_context(ca_file: str, cert: tuple[str, str] | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca_file)
    if cert is not None:
        context.load_cert_chain(*cert)
    return context


async def read_line(stream: trio.abc.Stream) -> bytes:
    data = b""
    with trio.fail_after(DEADLINE_S):
        while not data.endswith(b"\r\n"):
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            data += chunk
    return data


async def tls_client(address, context: ssl.SSLContext, *, handshake_first: bool = False) -> tuple[dict, bool]:
    """(INFO, whether CONNECT+PING got a PONG over TLS); False when the server closed the connection."""
    tcp = await trio.open_tcp_stream(*address)
    info: dict = {}
    if not handshake_first:
        line = await read_line(tcp)
        assert line.startswith(b"INFO "), line
        info = json.loads(line[5:])
    stream = trio.SSLStream(tcp, context, server_hostname="localhost")
    try:
        with trio.fail_after(DEADLINE_S):
            await stream.do_handshake()
            if handshake_first:
                info = json.loads((await read_line(stream))[5:])
            await stream.send_all(b'CONNECT {"verbose":false}\r\nPING\r\n')
            return info, (await read_line(stream)).startswith(b"PONG")
    except (trio.BrokenResourceError, ssl.SSLError):
        return info, False
    finally:
        await trio.aclose_forcefully(stream)


@pytest.fixture
def pki(tmp_path):
    ca = TestCa(tmp_path / "ca")
    foreign = TestCa(tmp_path / "foreign", "foreign CA")
    return {"ca": ca, "server": ca.issue("server"), "client": ca.issue("client"),
            "expired": ca.issue("expired", expired=True), "foreign": foreign.issue("intruder")}


async def test_client_port_requires_a_valid_client_certificate(tmp_path, pki):
    cert, key = pki["server"]
    tls = TlsConfig(cert_file=cert, key_file=key, ca_file=pki["ca"].ca_file, verify=True)
    async with jsraft.open_node(single(tmp_path, client_tls=tls)) as node:
        ca_file = pki["ca"].ca_file
        info, admitted = await tls_client(node.client_address, client_context(ca_file, pki["client"]))
        assert info["tls_required"] is True and admitted
        for refused in (None, pki["expired"], pki["foreign"]):
            _, admitted = await tls_client(node.client_address, client_context(ca_file, refused))
            assert not admitted, refused
        assert node.clients.stats.tls_failures == 3

        async def scenario(url: str) -> bytes:
            nc = await nats_connect(url.replace("nats://", "tls://"), tls=client_context(ca_file, pki["client"]),
                                    tls_hostname="localhost")
            sub = await nc.subscribe("greet")
            await nc.publish("greet", b"hello over tls")
            msg = await sub.next_msg(timeout=5)
            await nc.close()
            return msg.data

        assert await in_asyncio(scenario, node.url) == b"hello over tls"


async def test_handshake_first_and_reload_on_sighup(tmp_path, pki):
    cert, key = pki["server"]
    tls = TlsConfig(cert_file=cert, key_file=key, handshake_first=True)
    async with jsraft.open_node(single(tmp_path, client_tls=tls)) as node:
        ca_file = pki["ca"].ca_file
        info, admitted = await tls_client(node.client_address, client_context(ca_file, None), handshake_first=True)
        assert admitted and info["server_name"] == "n1"
        # New certificate files from another CA in place of the old: after the reload, a client that
        # trusts only the new CA is admitted and one that trusts only the old CA is not.
        new_ca = TestCa(tmp_path / "new-ca", "new CA")
        new_cert, new_key = new_ca.issue("server2")
        with open(cert, "wb") as out, open(new_cert, "rb") as src:
            out.write(src.read())
        with open(key, "wb") as out, open(new_key, "rb") as src:
            out.write(src.read())
        node.reload_tls()
        _, admitted = await tls_client(node.client_address, client_context(new_ca.ca_file, None), handshake_first=True)
        assert admitted
        _, admitted = await tls_client(node.client_address, client_context(ca_file, None), handshake_first=True)
        assert not admitted


async def https_get(address, context: ssl.SSLContext, path: str, token: str | None = None) -> int:
    tcp = await trio.open_tcp_stream(*address)
    stream = trio.SSLStream(tcp, context, server_hostname="localhost", https_compatible=True)
    headers = f"Authorization: Bearer {token}\r\n" if token else ""
    with trio.fail_after(DEADLINE_S):
        await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
    await trio.aclose_forcefully(stream)
    return int(data.split(b" ", 2)[1])


async def test_monitor_over_tls_with_a_token(tmp_path, pki, caplog):
    caplog.set_level(logging.WARNING, logger="jsraft.server.ops.monitor")
    cert, key = pki["server"]
    config = single(tmp_path, monitor_tls=TlsConfig(cert_file=cert, key_file=key), monitor_token="monitor-token-1")
    async with jsraft.open_node(config) as node:
        monitor = Monitor(node.monitor_parts, "127.0.0.1", 0)
        async with trio.open_nursery() as nursery:
            address = await nursery.start(monitor.run)
            monitor.mark_running()
            context = client_context(pki["ca"].ca_file, None)
            assert await https_get(address, context, "/healthz") == 200  # liveness needs no token
            assert await https_get(address, context, "/jsz") == 401
            assert await https_get(address, context, "/jsz", token="wrong-token") == 401
            assert await https_get(address, context, "/jsz", token="monitor-token-1") == 200
            # Plain HTTP on the TLS port gets no answer.
            tcp = await trio.open_tcp_stream(*address)
            await tcp.send_all(b"GET /jsz HTTP/1.1\r\n\r\n")
            with trio.fail_after(DEADLINE_S):
                reply = await tcp.receive_some(65536)
            assert b"HTTP/1.1 200" not in reply
            await tcp.aclose()
            nursery.cancel_scope.cancel()
    assert not [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]
