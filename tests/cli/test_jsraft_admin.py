"""The JetStream walkthrough of the `nats` CLI documents (stream ORDERS, consumers NEW, DISPATCH and
MONITOR), done entirely through `jsraft` commands against a 3-node cluster started with `jsraft cluster up`.

Method: one cluster of real `jsraft serve` processes for the module (`jsraft cluster up` on free loopback
ports, `jsraft cluster down` at the end); each step is `python -m jsraft …` in a subprocess with
NATS_URL naming all three nodes, and is checked on its exit status and on what the API then answers
(`--json`, the raw API answer). One stream is created through prompts on a pseudo-terminal. Errors must
carry the JetStream code and exit 1; a missing value without a terminal must exit 2.
"""

from __future__ import annotations

import json

import pytest

from jsraft_kit import LocalCluster, Pty, poll


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    local = LocalCluster(str(tmp_path_factory.mktemp("jsraft-admin") / "cluster")).up()
    try:
        yield local
    finally:
        local.down()


def state(cluster, stream: str) -> dict:
    return cluster.json("stream", "info", stream)["state"]


def test_cluster_up_printed_one_line_per_node(cluster):
    lines = cluster.up_result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["n1", "n2", "n3"]
    assert [line.split()[2] for line in lines] == [f"nats://127.0.0.1:{cluster.base + i}" for i in range(3)]


def test_stream_lifecycle(cluster):
    out = cluster.ok("stream", "add", "ORDERS", "--subjects", "ORDERS.*", "--ack", "--max-msgs=-1",
                     "--max-bytes=-1", "--max-age=1y", "--storage", "file", "--retention", "limits",
                     "--max-msg-size=-1", "--discard=old", "--replicas", "3", "--dupe-window", "2m")
    assert "Created stream ORDERS" in out and "ORDERS.*" in out
    info = cluster.json("stream", "info", "ORDERS")
    assert info["type"] == "io.nats.jetstream.api.v1.stream_info_response"
    config = info["config"]
    assert (config["subjects"], config["num_replicas"], config["storage"], config["retention"]) == \
        (["ORDERS.*"], 3, "file", "limits")
    assert (config["max_age"], config["duplicate_window"], config["discard"]) == (365 * 86400 * 10**9, 120 * 10**9, "old")
    assert "ORDERS" in cluster.ok("stream", "ls") and cluster.ok("stream", "ls", "--names").split() == ["ORDERS"]

    cluster.ok("stream", "cp", "ORDERS", "ARCHIVE", "--subjects", "ORDERS_ARCHIVE.*", "--max-age", "2y")
    archive = cluster.json("stream", "info", "ARCHIVE")["config"]
    assert (archive["subjects"], archive["max_age"], archive["num_replicas"]) == \
        (["ORDERS_ARCHIVE.*"], 2 * 365 * 86400 * 10**9, 3)
    cluster.ok("stream", "edit", "ARCHIVE", "--subjects", "ORDERS_ARCHIVE.*,ARCHIVE.>", "--max-msgs", "1000", "-f")
    archive = cluster.json("stream", "info", "ARCHIVE")["config"]
    assert (archive["subjects"], archive["max_msgs"]) == (["ORDERS_ARCHIVE.*", "ARCHIVE.>"], 1000)
    cluster.ok("stream", "rm", "ARCHIVE", "-f")
    assert cluster.ok("stream", "ls", "--names").split() == ["ORDERS"]

    assert "Published" in cluster.ok("pub", "ORDERS.scratch", "hello")
    assert state(cluster, "ORDERS")["messages"] == 1
    assert "Purged 1 messages" in cluster.ok("stream", "purge", "ORDERS", "-f")
    assert state(cluster, "ORDERS")["messages"] == 0


def test_a_stream_created_through_prompts(cluster):
    terminal = Pty("stream", "add", env=cluster.env)
    terminal.expect("Stream Name")
    terminal.send("PROMPTED")
    terminal.expect("Subjects")
    terminal.send("PROMPTED.*")
    terminal.expect("Storage")
    terminal.send("memory")
    terminal.expect("Retention Policy")
    terminal.send("")  # the default: limits
    terminal.expect("Discard Policy")
    terminal.send("new")
    terminal.expect("Replicas")
    terminal.send("3")
    assert terminal.wait() == 0, terminal.text
    config = cluster.json("stream", "info", "PROMPTED")["config"]
    assert (config["subjects"], config["storage"], config["retention"], config["discard"], config["num_replicas"]) \
        == (["PROMPTED.*"], "memory", "limits", "new", 3)
    cluster.ok("stream", "rm", "PROMPTED", "-f")


def test_consumers_next_acks_and_reports(cluster):
    cluster.ok("consumer", "add", "ORDERS", "NEW", "--filter", "ORDERS.received", "--ack", "explicit", "--pull",
               "--deliver", "all", "--max-deliver=-1", "--sample", "100")
    cluster.ok("consumer", "add", "ORDERS", "DISPATCH", "--filter", "ORDERS.processed", "--ack", "explicit",
               "--pull", "--deliver", "all", "--max-deliver=-1", "--sample", "100")
    cluster.ok("consumer", "add", "ORDERS", "MONITOR", "--filter", "", "--ack", "none", "--target",
               "monitor.ORDERS", "--deliver", "last", "--replay", "instant", "--defaults")
    listed = {info["name"]: info for info in cluster.json("consumer", "ls", "ORDERS")}
    assert set(listed) == {"NEW", "DISPATCH", "MONITOR"}
    assert listed["NEW"]["config"]["sample_freq"] == "100%" and "deliver_subject" not in listed["NEW"]["config"]
    assert listed["MONITOR"]["config"]["deliver_subject"] == "monitor.ORDERS"

    cluster.ok("pub", "ORDERS.processed", "order {{Count}}", "--count", "3")
    cluster.ok("pub", "ORDERS.received", "new order")
    first = cluster.ok("consumer", "next", "ORDERS", "DISPATCH")
    assert "order 1" in first and "Acknowledged message" in first
    second = cluster.ok("consumer", "next", "ORDERS", "DISPATCH", "--no-ack")
    assert "order 2" in second and "Acknowledged" not in second
    dispatch = cluster.json("consumer", "info", "ORDERS", "DISPATCH")
    assert (dispatch["delivered"]["stream_seq"], dispatch["ack_floor"]["stream_seq"]) == (3, 2)
    assert (dispatch["num_ack_pending"], dispatch["num_pending"]) == (1, 1)
    report = cluster.ok("consumer", "report", "ORDERS")
    assert "DISPATCH\tPull\texplicit" in report and "MONITOR\tPush\tnone" in report

    assert state(cluster, "ORDERS")["messages"] == 4 and state(cluster, "ORDERS")["consumer_count"] == 3
    stream_report = cluster.ok("stream", "report", "--dir", cluster.directory)
    assert "ORDERS\tfile\t3\t4\t" in stream_report
    replicas = [line.split("\t") for line in stream_report.splitlines() if line.startswith("ORDERS\tn")]
    assert len(replicas) == 3 and {row[-1] for row in replicas} == {"current"}
    assert len({tuple(row[2:7]) for row in replicas}) == 1, replicas  # equal state tuples

    assert "order 2" in cluster.ok("stream", "get", "ORDERS", "3")
    cluster.ok("stream", "rmm", "ORDERS", "3", "-f")
    assert state(cluster, "ORDERS")["num_deleted"] == 1
    assert json.loads(cluster.ok("stream", "purge", "ORDERS", "--subject", "ORDERS.processed", "--keep", "1",
                                 "-f", "--json"))["purged"] == 1
    assert json.loads(cluster.ok("stream", "purge", "ORDERS", "--seq", "5", "-f", "--json"))["purged"] == 1
    assert state(cluster, "ORDERS")["messages"] == 1

    cluster.ok("consumer", "rm", "ORDERS", "MONITOR", "-f")
    assert {info["name"] for info in cluster.json("consumer", "ls", "ORDERS")} == {"NEW", "DISPATCH"}


def test_errors_carry_codes_and_exit_status(cluster):
    missing = cluster.js("stream", "info", "NOPE")
    assert missing.returncode == 1 and "stream not found (err_code 10059" in missing.stderr
    prompt_needed = cluster.js("stream", "add", "NEEDS")
    assert prompt_needed.returncode == 2 and "--subjects is required" in prompt_needed.stderr
    unforced = cluster.js("stream", "rm", "ORDERS")
    assert unforced.returncode == 2 and "-f/--force" in unforced.stderr
    unreachable = cluster.js("stream", "ls", "--server", "nats://127.0.0.1:1")
    assert unreachable.returncode == 1 and "cannot connect" in unreachable.stderr
    account = cluster.json("account", "info")
    assert account["type"] == "io.nats.jetstream.api.v1.account_info_response" and account["streams"] >= 1


def test_req_and_sub(cluster):
    answer = json.loads(cluster.ok("req", "$JS.API.STREAM.NAMES", "", "--raw"))
    assert "ORDERS" in answer["streams"]
    subscriber = Pty("sub", "quick.check", "--count", "1", env=cluster.env)
    subscriber.expect("Subscribing on quick.check")

    def published_and_seen() -> bool:
        cluster.ok("pub", "quick.check", "ping!")
        try:
            subscriber.expect("ping!", timeout_s=2.0)
        except AssertionError:
            return False
        return True

    poll(published_and_seen, "the subscriber printed the message", timeout_s=30)
    assert subscriber.wait() == 0


def test_stream_rm_last(cluster):
    cluster.ok("stream", "rm", "ORDERS", "-f")
    assert cluster.ok("stream", "ls", "--names").split() == []
