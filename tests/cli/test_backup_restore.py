"""`jsraft stream backup` / `restore` (and `jsraft backup` / `restore`) through `$JS.API.STREAM.SNAPSHOT` /
`RESTORE`, on clusters of real `jsraft serve` processes started with `jsraft cluster up`.

Method: fill a 3-replica stream with 100,000 messages (known subjects, payloads and some headers; a few
removed so its first sequence and an interior gap are not trivial), back it up, delete it, stop that
cluster, restore into a fresh cluster, and require (1) every replica of the restored stream to hold the
original's state tuple (first, last, messages, bytes, digest), (2) a backup of the restored stream to
hold exactly the original's messages, byte for byte (sequence, timestamp, subject, headers, payload), and
(3) the first backup to hold exactly what was published. A damaged backup must be refused by the command
before anything is sent, and a damaged snapshot sent by a client that does not check must be refused by
the server, with nothing restored either way. The progress bar must show on a pseudo-terminal and not
with --no-progress.
"""

from __future__ import annotations

import base64
import json
import os

import pytest
import trio
from crc32c import crc32c

from jsraft.client import connect
from jsraft.client.inbox import new_inbox_prefix
from jsraft.client.pull import parse_metadata
from jsraft.server.api import snapshot_format
from jsraft.server.api.snapshot_format import SnapshotReader
from jsraft_kit import LocalCluster, Pty, poll

MESSAGES = 100_000
WORKERS = 64


def subject_of(i: int) -> str:
    return f"ORDERS.{('new', 'paid', 'shipped', 'returned')[i % 4]}"


def payload_of(i: int) -> bytes:
    return f'{{"order": {i}, "lines": {i % 13}}}'.encode() + b"x" * (i % 37)


def headers_of(i: int) -> dict[str, str] | None:
    return {"Nats-Msg-Id": f"order-{i}", "Region": "eu"} if i % 1000 == 0 else None


async def _fill(url: str, count: int) -> None:
    client = await connect(url)
    js = client.jetstream(timeout=60.0)

    async def worker(first: int) -> None:
        for i in range(first, count + 1, WORKERS):
            await js.publish(subject_of(i), payload_of(i), headers=headers_of(i))

    try:
        async with trio.open_nursery() as nursery:
            for w in range(WORKERS):
                nursery.start_soon(worker, w + 1)
    finally:
        await client.close()


def read_snapshot(directory: str) -> tuple[list[tuple], dict]:
    reader = SnapshotReader()
    messages: list[tuple] = []
    with open(os.path.join(directory, "stream.snap"), "rb") as handle:
        while data := handle.read(1 << 20):
            reader.feed(data)
            messages.extend(reader.messages())
    return messages, reader.finish()


def replica_tuples(cluster: LocalCluster, stream: str) -> set[tuple[str, ...]]:
    report = cluster.ok("stream", "report", "--dir", cluster.directory)
    rows = [line.split("\t") for line in report.splitlines() if line.startswith(f"{stream}\tn")]
    assert len(rows) == 3 and {row[-1] for row in rows} == {"current"}, report
    return {tuple(row[2:7]) for row in rows}


def test_backup_of_100k_messages_restored_on_a_fresh_cluster(tmp_path):
    first = LocalCluster(str(tmp_path / "first")).up()
    try:
        first.ok("stream", "add", "ORDERS", "--subjects", "ORDERS.*", "--replicas", "3", "--defaults")
        trio.run(_fill, first.url.split(",")[0], MESSAGES)
        removed = {base64.b64decode(json.loads(first.ok("stream", "get", "ORDERS", str(seq), "--json"))["message"]["data"])
                   for seq in (1, 2, 50_000)}
        first.ok("stream", "purge", "ORDERS", "--seq", "3", "-f")  # the stream now starts at 3
        first.ok("stream", "rmm", "ORDERS", "50000", "-f")  # and has an interior gap
        first.ok("consumer", "add", "ORDERS", "SHIPPING", "--pull", "--filter", "ORDERS.shipped", "--defaults")
        original = first.json("stream", "info", "ORDERS")["state"]
        assert (original["messages"], original["first_seq"], original["num_deleted"]) == (MESSAGES - 3, 3, 1)
        tuples = replica_tuples(first, "ORDERS")
        assert len(tuples) == 1

        backup_dir = str(tmp_path / "backup")
        out = first.ok("stream", "backup", "ORDERS", backup_dir, "--no-progress")
        assert "Backed up stream ORDERS" in out
        messages, end = read_snapshot(backup_dir)
        assert (end["first_seq"], end["last_seq"], end["messages"]) == (3, MESSAGES, MESSAGES - 3)
        published = {payload_of(i): i for i in range(1, MESSAGES + 1)}
        seen = set()
        for seq, _, subject, headers, payload in messages:
            i = published[payload]
            assert subject == subject_of(i) and (b"Nats-Msg-Id: order-" in headers) == (headers_of(i) is not None)
            seen.add(i)
        assert len(seen) == MESSAGES - 3
        assert {published[payload] for payload in removed} == set(range(1, MESSAGES + 1)) - seen
        first.ok("stream", "rm", "ORDERS", "-f")
    finally:
        first.down()

    fresh = LocalCluster(str(tmp_path / "fresh")).up()
    try:
        out = fresh.ok("stream", "restore", backup_dir, "--no-progress")
        assert "Restored stream ORDERS" in out
        assert replica_tuples(fresh, "ORDERS") == tuples
        assert fresh.json("consumer", "info", "ORDERS", "SHIPPING")["config"]["filter_subject"] == "ORDERS.shipped"
        again = str(tmp_path / "again")
        fresh.ok("stream", "backup", "ORDERS", again, "--no-progress")
        restored, restored_end = read_snapshot(again)
        assert restored_end == end
        assert restored == messages  # every message, byte for byte, timestamps included
    finally:
        fresh.down()


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    cluster = LocalCluster(str(tmp_path_factory.mktemp("small") / "cluster")).up()
    try:
        yield cluster
    finally:
        cluster.down()


def make_stream(cluster: LocalCluster, name: str) -> None:
    cluster.ok("stream", "add", name, "--subjects", f"{name}.>", "--replicas", "3", "--defaults")
    cluster.ok("pub", f"{name}.x", "message {{Count}} " + "y" * 400, "--count", "2000")


def damage(directory: str, offset: int) -> None:
    with open(os.path.join(directory, "stream.snap"), "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0x20]))


def test_a_damaged_backup_is_refused_and_nothing_restored(small, tmp_path):
    make_stream(small, "SMALL")
    directory = str(tmp_path / "small")
    small.ok("stream", "backup", "SMALL", directory, "--no-progress")
    manifest = json.loads(open(os.path.join(directory, "backup.json")).read())
    assert len(manifest["chunks"]) > 3 and all("crc32c" in chunk for chunk in manifest["chunks"])
    small.ok("stream", "rm", "SMALL", "-f")
    damage(directory, manifest["chunks"][0]["size"] * 2 + 100)  # inside the third chunk
    refused = small.js("stream", "restore", directory)
    assert refused.returncode == 1
    assert "backup chunk 3" in refused.stderr and "nothing restored" in refused.stderr, refused.stderr
    assert "SMALL" not in small.ok("stream", "ls", "--names").split()

    # A client that sends the damaged bytes anyway: the server refuses them, and makes no stream.
    answers = trio.run(_restore_unchecked, small.url.split(",")[0], directory, manifest)
    error = answers[-1]["error"]
    assert error["err_code"] == 10062 and "restore failed" in error["description"], answers
    assert "SMALL" not in small.ok("stream", "ls", "--names").split()


async def _restore_unchecked(url: str, directory: str, manifest: dict) -> list[dict]:
    client = await connect(url)
    try:
        request = json.dumps({"config": manifest["config"], "state": manifest["state"]}).encode()
        answer = json.loads((await client.request("$JS.API.STREAM.RESTORE.SMALL", request)).data)
        answers = []
        with open(os.path.join(directory, "stream.snap"), "rb") as data:
            for chunk in manifest["chunks"]:
                ack = await client.request(answer["deliver_subject"], data.read(chunk["size"]), timeout=30)
                if ack.data:
                    answers.append(json.loads(ack.data))
                    return answers
        answers.append(json.loads((await client.request(answer["deliver_subject"], b"", timeout=60)).data))
        return answers
    finally:
        await client.close()


def test_progress_bar_on_a_terminal_only(small, tmp_path):
    make_stream(small, "SHOWN")
    shown = Pty("stream", "backup", "SHOWN", str(tmp_path / "shown"), env=small.env)
    assert shown.wait() == 0, shown.text
    assert "Backing up SHOWN" in shown.text and "━" in shown.text, shown.text
    quiet = Pty("stream", "backup", "SHOWN", str(tmp_path / "quiet"), "--no-progress", env=small.env)
    assert quiet.wait() == 0, quiet.text
    assert "Backed up stream SHOWN" in quiet.text and "Backing up" not in quiet.text and "━" not in quiet.text

    small.ok("stream", "rm", "SHOWN", "-f")
    restoring = Pty("stream", "restore", str(tmp_path / "shown"), env=small.env)
    assert restoring.wait() == 0, restoring.text
    assert "Restoring SHOWN" in restoring.text and "━" in restoring.text and "Restored stream SHOWN" in restoring.text
    assert small.json("stream", "info", "SHOWN")["state"]["messages"] == 2000


def test_account_backup_and_restore(small, tmp_path):
    make_stream(small, "ACCOUNT_A")
    small.ok("stream", "add", "ACCOUNT_B", "--subjects", "account_b", "--defaults")  # empty
    small.ok("consumer", "add", "ACCOUNT_A", "WORKER", "--pull", "--filter", "ACCOUNT_A.x", "--defaults")
    small.ok("consumer", "next", "ACCOUNT_A", "WORKER", "--count", "5")  # acknowledges 5: its floor is 5
    worker = small.json("consumer", "info", "ACCOUNT_A", "WORKER")
    assert (worker["ack_floor"]["stream_seq"], worker["num_pending"]) == (5, 1995)
    names = small.ok("stream", "ls", "--names").split()  # with what earlier tests left, if anything
    assert {"ACCOUNT_A", "ACCOUNT_B"} <= set(names)
    keys = ("messages", "bytes", "first_seq", "last_seq")
    before = {name: {k: small.json("stream", "info", name)["state"][k] for k in keys} for name in names}
    directory = str(tmp_path / "account")
    out = small.ok("backup", directory, "--no-progress")
    assert all(f"Backed up stream {name}" in out for name in names), out
    refused = small.js("restore", directory, "--no-progress")
    assert refused.returncode == 1 and f"exist already: {', '.join(sorted(names))}; nothing restored" in refused.stderr
    for name in names:
        small.ok("stream", "rm", name, "-f")
    small.ok("restore", directory, "--no-progress")
    after = {name: {k: small.json("stream", "info", name)["state"][k] for k in keys} for name in names}
    assert after == before
    restored = small.json("consumer", "info", "ACCOUNT_A", "WORKER")
    assert restored["config"]["filter_subject"] == "ACCOUNT_A.x"
    assert (restored["ack_floor"]["stream_seq"], restored["num_pending"]) == (5, 1995)  # it resumes after 5
    assert "message 6 " in small.ok("consumer", "next", "ACCOUNT_A", "WORKER")


async def _fetch_until(url: str, stream: str, want: int, deadline_s: float = 60.0) -> list:
    """`want` messages of consumer C (not acknowledged) by one pull request that waits for them: one
    request, so no earlier request left waiting takes a message this one should have."""
    client = await connect(url)
    try:
        sub = await client.subscribe(new_inbox_prefix() + ".pull")
        request = json.dumps({"batch": want, "expires": int(deadline_s * 1e9)}).encode()
        await client.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.C", request, reply=sub.subject)
        got: list = []
        while len(got) < want:
            msg = await sub.next_msg(timeout=deadline_s + 5)
            assert msg.status in (None, 100), (msg.status, msg.headers)
            if msg.status is None:
                meta = parse_metadata(msg.reply)
                got.append((meta.stream_seq, meta.consumer_seq, meta.num_delivered, msg.reply))
        return got
    finally:
        await client.close()


async def _ack(url: str, replies: list[str]) -> None:
    client = await connect(url)
    try:
        for reply in replies:
            await client.request(reply, b"+ACK", timeout=10)  # answered once the ack is committed
    finally:
        await client.close()


STATE_KEYS = ("num_ack_pending", "num_redelivered", "num_pending")


def consumer_state(cluster: LocalCluster, stream: str) -> dict:
    info = cluster.json("consumer", "info", stream, "C")
    return {"delivered": (info["delivered"]["consumer_seq"], info["delivered"]["stream_seq"]),
            "ack_floor": (info["ack_floor"]["consumer_seq"], info["ack_floor"]["stream_seq"]),
            **{key: info[key] for key in STATE_KEYS}}


def test_consumer_state_restored_on_a_fresh_cluster(small, tmp_path):
    """Delivered 6, acked 1, 2 and 4, seq 3 redelivered once, 3/5/6 pending: a restore on a fresh cluster
    brings back exactly that state, and the restored consumer redelivers exactly 3, 5 and 6 after its ack
    wait, each with the next delivery count, and goes on with the next consumer sequence."""
    url = small.url.split(",")[0]
    small.ok("stream", "add", "STATEFUL", "--subjects", "STATEFUL.>", "--replicas", "3", "--defaults")
    small.ok("pub", "STATEFUL.x", "m {{Count}}", "--count", "6")
    small.ok("consumer", "add", "STATEFUL", "C", "--pull", "--wait", "2s", "--defaults")
    first = trio.run(_fetch_until, url, "STATEFUL", 6)
    assert [(sseq, cseq, count) for sseq, cseq, count, _ in first] == [(s, s, 1) for s in range(1, 7)]
    trio.run(_ack, url, [first[i][3] for i in (0, 1, 3)])
    again = trio.run(_fetch_until, url, "STATEFUL", 1)  # after the ack wait: the lowest pending, seq 3
    assert [(sseq, cseq, count) for sseq, cseq, count, _ in again] == [(3, 7, 2)]
    original = poll(lambda: (state := consumer_state(small, "STATEFUL"))["num_redelivered"] == 1 and state,
                    "the redelivery of seq 3 committed")
    assert original == {"delivered": (7, 6), "ack_floor": (2, 2), "num_ack_pending": 3, "num_redelivered": 1,
                        "num_pending": 0}
    directory = str(tmp_path / "stateful")
    small.ok("stream", "backup", "STATEFUL", directory, "--no-progress")
    small.ok("stream", "rm", "STATEFUL", "-f")

    fresh = LocalCluster(str(tmp_path / "fresh")).up()
    try:
        fresh.ok("stream", "restore", directory, "--no-progress")
        assert consumer_state(fresh, "STATEFUL") == original
        fresh_url = fresh.url.split(",")[0]
        redelivered = trio.run(_fetch_until, fresh_url, "STATEFUL", 3)
        assert [(sseq, cseq, count) for sseq, cseq, count, _ in redelivered] == [(3, 8, 3), (5, 9, 2), (6, 10, 2)]
        fresh.ok("pub", "STATEFUL.x", "m 7")
        new = trio.run(_fetch_until, fresh_url, "STATEFUL", 1)
        assert [(sseq, cseq, count) for sseq, cseq, count, _ in new] == [(7, 11, 1)]
        trio.run(_ack, fresh_url, [reply for *_, reply in redelivered + new])
        assert consumer_state(fresh, "STATEFUL") == {"delivered": (11, 7), "ack_floor": (11, 7), "num_ack_pending": 0,
                                                     "num_redelivered": 0, "num_pending": 0}
    finally:
        fresh.down()

    # A backup written before consumer states were carried (ack floor only) still restores: the consumer
    # resumes after its original's ack floor, so what was pending is delivered again (at-least-once).
    older = str(tmp_path / "older")
    without_consumer_state(directory, older)
    small.ok("stream", "restore", older, "--no-progress")
    assert consumer_state(small, "STATEFUL") == {"delivered": (0, 2), "ack_floor": (0, 2), "num_ack_pending": 0,
                                                 "num_redelivered": 0, "num_pending": 4}
    resumed = trio.run(_fetch_until, url, "STATEFUL", 1)
    assert [(sseq, cseq, count) for sseq, cseq, count, _ in resumed] == [(3, 1, 1)]
    small.ok("stream", "rm", "STATEFUL", "-f")


def without_consumer_state(source: str, target: str) -> None:
    """A copy of backup `source` as a build before consumer states wrote it: CONSUMER frames without one."""
    with open(os.path.join(source, "stream.snap"), "rb") as handle:
        data = handle.read()
    out, offset = bytearray(snapshot_format.MAGIC), len(snapshot_format.MAGIC)
    while offset < len(data):
        kind, length, _ = snapshot_format._FRAME.unpack_from(data, offset)
        body = data[offset + snapshot_format._FRAME.size:offset + snapshot_format._FRAME.size + length]
        offset += snapshot_format._FRAME.size + length
        if kind == snapshot_format.KIND_CONSUMER:
            info = json.loads(body)
            del info[snapshot_format.STATE_KEY]  # KeyError if the backup did not carry it
            out += snapshot_format.encode_consumer(info)
        else:
            out += snapshot_format._frame(kind, body)
    os.makedirs(target)
    with open(os.path.join(target, "stream.snap"), "wb") as handle:
        handle.write(out)
    with open(os.path.join(source, "backup.json")) as handle:
        manifest = json.load(handle)
    manifest.update(chunks=[{"size": len(out), "crc32c": crc32c(bytes(out))}], bytes=len(out))
    with open(os.path.join(target, "backup.json"), "w") as handle:
        json.dump(manifest, handle)
