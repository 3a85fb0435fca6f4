"""Secrets never leave a node: not in its log, not in `/varz` or `/jsz`, not in an error a client gets.

Method: a real `jsraft serve` process at debug log level, configured by a nats-server-style file with
every kind of secret (user passwords, a bcrypt hash, a cluster secret, a monitor token) — each a
distinctive string — plus `--auth`-less flags. Clients then try wrong and right credentials, a
forbidden publish, the monitor with and without the token; the process is stopped with SIGTERM and
SIGHUP is sent once on the way (the reload path logs too). Everything the node said — its stderr, the
monitor's bodies, the `-ERR` lines clients received — is searched for each secret. The test first
checks it saw real traffic (the refusals and the 200s), so an empty log cannot pass it.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import bcrypt
from test_serve import free_ports, poll

SECRETS = {"user password": "pw-Aq7-zz-user", "bcrypt password": "pw-Bc9-zz-hashed",
           "cluster secret": "cs-Kx2-zz-cluster-secret", "monitor token": "mt-Wd4-zz-monitor-token"}
HASH = bcrypt.hashpw(SECRETS["bcrypt password"].encode(), bcrypt.gensalt(rounds=4)).decode()


def get(port: int, path: str, token: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except OSError:
        return 0, b""


async def clients(port: int) -> list[str]:
    """Wrong and right credentials and a forbidden publish; the errors the clients were told."""
    import nats

    told: list[str] = []
    violated = asyncio.Event()

    async def error_cb(error: Exception) -> None:
        told.append(str(error))
        if "permissions violation" in str(error).lower():
            violated.set()

    url = f"nats://127.0.0.1:{port}"
    for user, password in (("admin", "wrong-" + SECRETS["user password"]), ("hashed", SECRETS["user password"])):
        try:
            await nats.connect(url, user=user, password=password, allow_reconnect=False, connect_timeout=3,
                               max_reconnect_attempts=0, error_cb=error_cb)
        except Exception as error:  # noqa: BLE001 — the refusal is what is being collected
            told.append(str(error))
    nc = await nats.connect(url, user="hashed", password=SECRETS["bcrypt password"], error_cb=error_cb)
    await nc.publish("forbidden", b"x")
    await nc.flush()
    # nats-py hands an -ERR to error_cb from its reader task: wait for it (bounded) before closing, or a
    # close that wins the race drops it.
    await asyncio.wait_for(violated.wait(), 20)
    await nc.close()
    admin = await nats.connect(url, user="admin", password=SECRETS["user password"], error_cb=error_cb)
    await admin.jetstream().add_stream(name="S", subjects=["s.*"])
    await admin.close()
    return told


def test_no_secret_in_logs_monitor_or_errors(tmp_path):
    client_port, cluster_port, monitor_port = free_ports(3)
    (tmp_path / "token").write_text(SECRETS["monitor token"] + "\n")
    conf = tmp_path / "node.conf"
    conf.write_text(f"""
server_name: n1
port: {client_port}
http_port: {monitor_port}
jetstream {{ store_dir: "{tmp_path / 'data'}" }}
cluster {{ listen: 127.0.0.1:{cluster_port}, authorization {{ token: "{SECRETS['cluster secret']}" }} }}
authorization {{
  users: [
    {{ user: admin, password: "{SECRETS['user password']}" }}
    {{ user: hashed, password: "{HASH}", permissions: {{ publish: {{ deny: ["forbidden"] }} }} }}
  ]
}}
""")
    process = subprocess.Popen([sys.executable, "-m", "jsraft", "serve", "-c", str(conf), "-D",
                                "--monitor-token-file", str(tmp_path / "token")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        poll(lambda: get(monitor_port, "/varz", SECRETS["monitor token"])[0] == 200, 60, "/varz 200")
        told = asyncio.run(asyncio.wait_for(clients(client_port), 60))
        bodies = [get(monitor_port, path, SECRETS["monitor token"]) for path in ("/varz", "/jsz", "/metrics", "/")]
        refused = get(monitor_port, "/jsz")
        process.send_signal(signal.SIGHUP)
        poll(lambda: get(monitor_port, "/healthz")[0] == 200, 10, "alive after SIGHUP")
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    # It saw real traffic: refusals, a permission violation, the monitor answering and refusing.
    assert sum("authorization violation" in text.lower() for text in told) >= 2, told  # error_cb and raise
    assert any("permissions violation" in text.lower() for text in told), told
    assert [status for status, _ in bodies] == [200, 200, 200, 200] and refused[0] == 401
    assert "authorization violation: bad password for user 'admin'" in stderr
    assert b'"S"' in bodies[1][1]  # /jsz lists the stream the admin made
    everything = "\n".join([stderr, *told, *(body.decode() for _, body in bodies), refused[1].decode()])
    for what, secret in SECRETS.items():
        assert secret not in everything, f"the {what} leaked"
    assert HASH not in everything, "the bcrypt hash leaked"
    assert json.loads(bodies[0][1])["server_name"] == "n1"
