"""The operator's way out of a halt: `stream group` shows it, `stream accept-loss` ends it (issue 14).

Method: three real nodes in one process (`Cluster`: real TCP, real files, the real WAL). An R3 stream
gets 20 acknowledged messages, held by all three replicas; all three stop, two of them lose `streams/S/`,
all three start: the two come back repairing (a lost directory), so the healthy voters are not a quorum
and the group halts — no publish is acknowledged over a window of many election timeouts, and
`$JSRAFT.API.STREAM.GROUP.S` shows both repairing, with the reason, and the halt. Then the refusals
(no confirmation, a replica that is not repairing) change nothing, and `jsraft stream accept-loss S
--replica ... --replica ... --yes-i-accept-data-loss S` (the real CLI, over the client port) ends the
halt: a leader is elected, publishes are acknowledged again, a subscriber saw the advisory, and — as the
healthy replica held everything — every replica ends with every acknowledged message (none was lost).
"""

from __future__ import annotations

import json
import os
import shutil

import trio
from click.testing import CliRunner

from jsraft.cli import cli
from jsraft.client import connect
from jsraft.server.errors import AcceptLossRefused
from jsraft.testing.cluster import Cluster
from test_lost_group_dir import nothing_acknowledged, r3_stream_on_all_three, store_content, stream_leader

TICK_MS = 20
ELECTION_TICKS = 10
NO_LEADER_WINDOW_S = 2.0  # 10 election timeouts


async def test_accept_loss_ends_a_halt_that_a_lost_majority_caused(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=TICK_MS, election_ticks=ELECTION_TICKS) as cluster:
            leader, acked = await r3_stream_on_all_three(cluster, 20)
            healthy = leader
            wiped = sorted(name for name in cluster.names if name != healthy)
            for name in cluster.names:
                await cluster.stop(name)
            for name in wiped:
                shutil.rmtree(os.path.join(cluster.configs[name].store_dir, "streams", "S"))
            for name in cluster.names:
                await cluster.start_node(name)
            await cluster.wait_until(lambda: all("S" in cluster.node(n).streams.replicas for n in cluster.names),
                                     10, what="S open on all three")
            js = cluster.node(healthy).jetstream()  # the restarted node's

            client = await connect(cluster.node(healthy).url)
            try:
                advisories = await client.subscribe("$JS.EVENT.ADVISORY.JSRAFT.DATA_LOSS_ACCEPTED.S")
                await client.flush()

                async def api(tail: str, body: dict | None = None) -> dict:
                    payload = json.dumps(body).encode() if body is not None else b""
                    return json.loads((await client.request(f"$JSRAFT.API.{tail}", payload, timeout=10)).data)

                await nothing_acknowledged(lambda: js.publish("s.a", b"halted"), NO_LEADER_WINDOW_S)
                group = await api("STREAM.GROUP.S")
                assert group["type"] == "io.jsraft.api.v1.stream_group_response"
                by_node = {r["node"]: r for r in group["replicas"]}
                assert sorted(by_node) == sorted(cluster.names)
                assert sorted(n for n, r in by_node.items() if r["repairing"]) == wiped
                for name in wiped:
                    assert "storage UUID changed" in by_node[name]["repair_reason"]
                assert any(r["halted_reason"] for r in group["replicas"]), json.dumps(group, indent=1)
                assert by_node[healthy]["last_index"] >= 20 and not by_node[healthy]["repairing"]

                shown = await trio.to_thread.run_sync(lambda: CliRunner().invoke(
                    cli, ["stream", "group", "S", "-s", cluster.node(healthy).url, "--timeout", "10"]))
                assert shown.exit_code == 0, shown.output
                assert shown.output.count("storage UUID changed") == 2 and "halted:" in shown.output, shown.output

                refusals = [
                    {"replicas": wiped},  # no confirmation
                    {"confirm": "T", "replicas": wiped},  # the wrong name
                    {"confirm": "S", "replicas": [*wiped, healthy]},  # one that is not repairing
                    {"confirm": "S", "replicas": ["n9"]},  # not a replica
                    {"confirm": "S", "replicas": []},
                ]
                for body in refusals:
                    error = (await api("STREAM.ACCEPT_LOSS.S", body))["error"]
                    assert (error["err_code"], error["code"]) == (AcceptLossRefused.err_code, 400), (body, error)
                for name in wiped:
                    assert cluster.node(name).runtime.status(cluster.node(name).streams.replicas["S"].group) \
                        .raft.repairing, f"a refused request changed {name}"

                base = ["stream", "accept-loss", "S", "-s", cluster.node(healthy).url, "--replica", wiped[0]]
                for extra in ([], ["--yes-i-accept-data-loss", "T"]):  # no terminal to type on; the wrong name
                    refused = await trio.to_thread.run_sync(lambda: CliRunner().invoke(cli, base + extra))
                    assert refused.exit_code == 2, refused.output
                assert all(cluster.node(n).runtime.status(cluster.node(n).streams.replicas["S"].group).raft.repairing
                           for n in wiped)

                args = ["stream", "accept-loss", "S", "-s", cluster.node(healthy).url, "--timeout", "10",
                        "--yes-i-accept-data-loss", "S"] + [a for n in wiped for a in ("--replica", n)]
                result = await trio.to_thread.run_sync(lambda: CliRunner().invoke(cli, args))
                assert result.exit_code == 0, result.output
                assert "accepted data loss" in result.output

                await cluster.wait_until(lambda: stream_leader(cluster) is not None, 30, what="a leader again")
                for i in range(20, 30):
                    acked[(await js.publish("s.a", f"m{i}".encode(), timeout=10)).seq] = f"m{i}".encode()
                assert sorted(acked) == list(range(1, 31))

                advisory = json.loads((await advisories.next_msg(timeout=10)).data)
                assert advisory["type"] == "io.jsraft.advisory.v1.stream_data_loss_accepted"
                assert advisory["stream"] == "S"
                named = [a["node"] for a in advisory["accepted"]] + advisory["left_repairing"]
                assert sorted(named) == wiped and advisory["accepted"]
                for accepted in advisory["accepted"]:
                    assert accepted["kept_through"] == 0 and "given_up" in accepted
            finally:
                await client.close()

            await cluster.wait_until(lambda: all(not cluster.node(n).runtime.status(
                cluster.node(n).streams.replicas["S"].group).raft.repairing for n in cluster.names), 30,
                what="no replica repairing")
            await cluster.wait_until(lambda: all(cluster.replica_store(n, "S").state().last_seq >= 30
                                                 for n in cluster.names), 30, what="30 on every replica")
            for name in cluster.names:
                content = store_content(cluster.replica_store(name, "S"))
                for seq, payload in acked.items():
                    assert content.get(seq) == payload, f"{name} lost acknowledged seq {seq}"
