"""Lame duck mode of a real `jsraft serve` (SIGUSR2), seen by nats-py: what nats-py's own
`ClientLameDuckModeTest` expects of nats-server (its `lame_duck_mode_cb` fires, the connection stays until
the server closes it), plus what an operator relies on — no new connection is accepted, the clients are
closed only after the grace period, its stream takes writes meanwhile but no new stream is created, the
node then stops cleanly with its stream intact, a second SIGUSR2
changes nothing and SIGTERM still stops it at once. Every wait polls with a deadline."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import pytest

from jsraft.cli import serve_process
from jsraft.cli.serve_process import serve_pids
from tests.cli.test_serve import _accepts as connects, free_ports, poll

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGUSR2"), reason="SIGUSR2 is POSIX")

DEADLINE_S = 30.0


def start(tmp_path, duration: str, grace: str, extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen, int]:
    port, = free_ports(1)
    conf = tmp_path / "ldm.conf"
    conf.write_text(f'port: {port}\njetstream {{ store_dir: "{tmp_path / "store"}" }}\n'
                    f'lame_duck_duration: "{duration}"\nlame_duck_grace_period: "{grace}"\n')
    process = subprocess.Popen([sys.executable, "-m", "jsraft", "serve", "-c", str(conf), *extra],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    poll(lambda: connects(port) or process.poll() is not None, DEADLINE_S, "the client port open")
    assert process.poll() is None, process.communicate()[1]
    return process, port


def finish(process: subprocess.Popen) -> tuple[int, str]:
    try:
        _, stderr = process.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
        raise AssertionError(f"serve did not stop:\n{stderr}")
    return process.returncode, stderr


def test_sigusr2_tells_the_clients_refuses_new_ones_then_closes_them_and_stops(tmp_path):
    import nats
    import nats.js.errors

    process, port = start(tmp_path, duration="4s", grace="2s")  # the grace period leaves room for the writes below
    url = f"nats://127.0.0.1:{port}"
    seen: dict[str, float] = {}

    async def scenario() -> None:
        clients = []
        for name in ("a", "b"):
            async def lame(name: str = name) -> None:
                seen.setdefault(f"ldm {name}", time.monotonic())

            async def closed(name: str = name) -> None:
                seen.setdefault(f"closed {name}", time.monotonic())
            clients.append(await nats.connect(url, allow_reconnect=False, lame_duck_mode_cb=lame, closed_cb=closed))
        js = clients[0].jetstream()
        await js.add_stream(name="KEEP", subjects=["keep.>"])
        for i in range(20):
            await js.publish(f"keep.{i % 3}", f"m{i}".encode())
        seen["signal"] = time.monotonic()
        process.send_signal(signal.SIGUSR2)
        while not {"ldm a", "ldm b"} <= set(seen):
            assert time.monotonic() - seen["signal"] < 5, seen  # nats-py's own test allows 5 s
            await asyncio.sleep(0.01)
        assert not connects(port), "a new connection was accepted in lame duck mode"
        assert all(client.is_connected for client in clients)  # kept until the server closes them
        # Its streams take writes on; a new one is placed nowhere (meta_service invariant 5), as nats-server,
        # which stops JetStream in lame duck mode, creates none either.
        await js.publish("keep.0", b"during")
        with pytest.raises(nats.js.errors.BadRequestError) as refused:
            await js.add_stream(name="NEW", subjects=["new.>"])
        assert refused.value.err_code == 10005, refused.value
        process.send_signal(signal.SIGUSR2)  # a second signal changes nothing
        while not {"closed a", "closed b"} <= set(seen):
            assert time.monotonic() - seen["signal"] < DEADLINE_S, seen
            await asyncio.sleep(0.01)
    asyncio.run(scenario())
    returncode, stderr = finish(process)
    assert returncode == 0, stderr
    for name in ("a", "b"):  # not before the grace period, within the duration (and a margin)
        assert 2.0 <= seen[f"closed {name}"] - seen["signal"] < 4.0 + 2.0, seen
    for line in ("Trapped SIGUSR2 signal", "Entering lame duck mode, stop accepting new clients",
                 "Trapped SIGUSR2 signal: already in lame duck mode", "Closing existing clients",
                 "Lame duck mode done: stopping", "stopped cleanly (stores closed)"):
        assert line in stderr, (line, stderr)
    assert "WRN" not in stderr, stderr  # a standalone node has no leadership to hand over, and says nothing

    process, port = start(tmp_path, duration="3s", grace="1s")  # the same store, reopened: all 21 there

    async def read_back() -> int:
        client = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
        try:
            return (await client.jetstream().stream_info("KEEP")).state.messages
        finally:
            await client.close()
    try:
        assert asyncio.run(read_back()) == 21
    finally:
        process.send_signal(signal.SIGTERM)
        assert finish(process)[0] == 0


def test_sigterm_in_lame_duck_mode_stops_at_once(tmp_path):
    import nats
    import nats.js.errors

    process, port = start(tmp_path, duration="2m", grace="1m")

    async def scenario() -> None:
        told = asyncio.Event()

        async def lame() -> None:
            told.set()
        client = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False, lame_duck_mode_cb=lame)
        process.send_signal(signal.SIGUSR2)
        await asyncio.wait_for(told.wait(), 5)
        await client.close()
    asyncio.run(scenario())
    began = time.monotonic()
    process.send_signal(signal.SIGTERM)
    returncode, stderr = finish(process)
    assert returncode == 0 and time.monotonic() - began < 15, stderr  # not the minute of grace
    assert "Trapped SIGTERM signal: stopping" in stderr and "stopped cleanly (stores closed)" in stderr
    assert "Closing existing clients" not in stderr


def test_signal_command_and_pid_file_as_nats_servers_helm_prestop_uses_them(tmp_path):
    """`jsraft serve -P FILE` (or `pid_file`) writes the pid; `jsraft serve -sl=ldm=FILE` — the NATS Helm
    chart's preStop hook, `nats-server -sl=ldm=/var/run/nats/nats.pid` — puts that node in lame duck mode;
    `-sl reopen=PID` (SIGUSR1) and `-sl reload=PID` (SIGHUP) leave it running; the pid file goes at the stop."""
    import nats
    import nats.js.errors

    pid_file = tmp_path / "nats.pid"
    process, port = start(tmp_path, duration="2s", grace="500ms", extra=("-P", str(pid_file)))
    poll(lambda: pid_file.exists(), DEADLINE_S, "the pid file")
    assert pid_file.read_text() == f"{process.pid}\n"
    assert process.pid in serve_pids(), {pid: open(f"/proc/{pid}/cmdline").read() for pid in serve_pids()}

    def signal_command(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "jsraft", "serve", *args], capture_output=True, text=True,
                              timeout=DEADLINE_S)
    unknown = signal_command("--signal", "explode=1")
    assert unknown.returncode == 2 and "unknown signal 'explode'" in unknown.stderr
    missing = signal_command("-sl", f"ldm={tmp_path / 'nope.pid'}")
    assert missing.returncode == 1 and "No such file" in missing.stderr

    async def scenario() -> None:
        told = asyncio.Event()

        async def lame() -> None:
            told.set()
        client = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False, lame_duck_mode_cb=lame)
        for command in (f"reopen={process.pid}", f"reload={pid_file}"):
            assert signal_command("--signal", command).returncode == 0
        # A signal is delivered before the process runs user code again: an answer after it means it lived.
        assert (await client.jetstream().account_info()).streams == 0 and process.poll() is None
        assert signal_command(f"-sl=ldm={pid_file}").returncode == 0  # Go's one-dash form, as the Helm chart
        await asyncio.wait_for(told.wait(), 5)
        await client.close()
    asyncio.run(scenario())
    returncode, stderr = finish(process)
    assert returncode == 0, stderr
    for line in ("Trapped SIGUSR1 signal: no log file to reopen", "Trapped SIGHUP signal",
                 "Entering lame duck mode", "stopped cleanly (stores closed)"):
        assert line in stderr, (line, stderr)
    assert not pid_file.exists()


@pytest.mark.parametrize("running, status, words", [
    ([], 1, "no jsraft serve process running"),
    ([4242, 4343], 1, "several jsraft serve processes running (4242, 4343): name one"),
])
def test_signal_without_a_target_needs_exactly_one_node(monkeypatch, capsys, running, status, words):
    monkeypatch.setattr(serve_process, "serve_pids", lambda: running)
    assert serve_process.signal_command("ldm") == status
    assert words in capsys.readouterr().err
