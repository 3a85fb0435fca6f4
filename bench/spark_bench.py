#!/usr/bin/env python3
"""The `jsraft` Spark data source against a 3-node R3 cluster, and a plain nats-py baseline, in one run.

    .venv/bin/python bench/spark_bench.py [--messages 1000000] [--size 128] [--partitions 0] [--rounds 3]
                                          [--stream-batches 10] [--write-rows 100000] [--json] [--keep]

What it does: starts three `jsraft serve` processes (`nats_servers.JsraftServers`, free ports), creates
an R3 stream BENCH (`allow_direct`) and publishes `--messages` messages of `--size` bytes on 8 subjects
(nats-py `publish_async`, every ack awaited). Then, with one `local[2]` SparkSession (UI off):

  read       `spark.read.format("jsraft")` of the whole stream, after an untimed warm-up read of 10,000:
             `count()` `--rounds` times (median reported), then `groupBy(subject).count()` (each a full
             read of every message); rows/s = messages / seconds, per action; per node, how many bulk
             chunks it read from its own replica and how many at the stream leader (`/jsz`).
  baseline   the same messages read by a plain nats-py loop: a durable pull consumer (ack none),
             `fetch(1000)` until every message came, rows appended as tuples, then
             `spark.createDataFrame(rows, schema).count()`; rows/s over the whole thing.
  stream     `spark.readStream.format("jsraft")` with `maxRecordsPerTrigger` 10,000 over the last
             `--stream-batches` × 10,000 messages, `trigger(availableNow=True)`, a `foreachBatch` that
             counts: each micro-batch's `triggerExecution` duration from the query's progress
             (median, max) — the latency from planning a batch to its rows being processed.
  write      `df.write.format("jsraft")` of `--write-rows` rows of `--size` bytes into a second R3
             stream, every row acknowledged: rows/s.

Goals (issue 17, this 2-core machine): read ≥ 100,000 rows/s and ≥ 5× the baseline. Every process
started here is stopped here. Figures go to stdout (one JSON object with `--json`). The work directory (the
cluster's stores and the streaming checkpoint) is removed at the end, also when the run fails; `--keep`
keeps it and prints its path.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ["TZ"] = "UTC"
time.tzset()

import nats_servers  # noqa: E402

SUBJECTS = 8
PUBLISH_WINDOW = 2000


async def _publish(urls: list[str], stream: str, subject: str, count: int, size: int) -> None:
    import nats

    nc = await nats.connect(servers=urls, connect_timeout=5)
    js = nc.jetstream(timeout=30)
    await js.add_stream(name=stream, subjects=[f"{subject}.>"], num_replicas=3, allow_direct=True)
    payload = b"x" * size
    sent = 0
    while sent < count:
        window = min(PUBLISH_WINDOW, count - sent)
        acks = [await js.publish_async(f"{subject}.{(sent + i) % SUBJECTS}", payload) for i in range(window)]
        await asyncio.gather(*acks)
        sent += window
    await nc.close()


async def _baseline_fetch(urls: list[str], stream: str, count: int) -> list[tuple]:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig

    nc = await nats.connect(servers=urls, connect_timeout=5)
    js = nc.jetstream(timeout=30)
    # No filter: nats-py would put it in the create subject ("...CREATE.BENCH.baseline.bench.>"), a subject
    # with a wildcard that jsraft does not route (a gap noted in bench/README.md).
    await js.add_consumer(stream, ConsumerConfig(durable_name="baseline", ack_policy=AckPolicy.NONE))
    sub = await js.pull_subscribe_bind("baseline", stream)
    rows: list[tuple] = []
    while len(rows) < count:
        for msg in await sub.fetch(1000, timeout=30):
            meta = msg.metadata
            rows.append((stream, meta.sequence.stream, msg.subject, msg.data, None, meta.timestamp, 0))
    await nc.close()
    return rows


def bench_read(spark, urls: list[str], messages: int, partitions: int, rounds: int) -> dict:
    def reader():  # a DataFrameReader's options are mutable: a fresh one per load
        base = spark.read.format("jsraft").option("servers", ",".join(urls)).option("stream", "BENCH")
        return base.option("partitions", str(partitions)) if partitions else base

    # Warm-up, not timed: the first action starts Spark's Python workers (imports of pyarrow and jsraft).
    assert reader().option("endSeq", "10000").load().count() == min(10_000, messages)
    df = reader().load()
    count_s = []
    for _ in range(rounds):
        started = time.perf_counter()
        counted = df.count()
        count_s.append(time.perf_counter() - started)
        assert counted == messages, (counted, messages)
    started = time.perf_counter()
    groups = df.groupBy("subject").count().collect()
    group_s = time.perf_counter() - started
    assert sum(row["count"] for row in groups) == messages and len(groups) == SUBJECTS
    median_s = statistics.median(count_s)
    return {"count_s": [round(s, 2) for s in count_s], "count_rows_per_s": round(messages / median_s),
            "group_by_s": round(group_s, 2), "group_by_rows_per_s": round(messages / group_s)}


def bench_baseline(spark, urls: list[str], messages: int) -> dict:
    from jsraft.spark.arrow import SCHEMA_DDL

    started = time.perf_counter()
    rows = asyncio.run(_baseline_fetch(urls, "BENCH", messages))
    fetched_s = time.perf_counter() - started
    counted = spark.createDataFrame(rows, SCHEMA_DDL).count()
    total_s = time.perf_counter() - started
    assert counted == messages, (counted, messages)
    return {"fetch_s": round(fetched_s, 2), "total_s": round(total_s, 2), "rows_per_s": round(messages / total_s)}


def bench_stream(spark, urls: list[str], messages: int, batches: int, root: str) -> dict:
    start = max(1, messages - batches * 10_000 + 1)
    seen: list[int] = []
    query = (spark.readStream.format("jsraft").option("servers", ",".join(urls)).option("stream", "BENCH")
             .option("startingOffsets", str(start)).option("maxRecordsPerTrigger", "10000").load()
             .writeStream.foreachBatch(lambda df, batch_id: seen.append(df.count()))
             .option("checkpointLocation", os.path.join(root, "stream-checkpoint")).trigger(availableNow=True).start())
    assert query.awaitTermination(600)
    durations = [p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress if p["numInputRows"]]
    assert sum(seen) == messages - start + 1, (sum(seen), messages - start + 1)
    return {"micro_batches": len(durations), "rows_per_batch": 10_000,
            "batch_ms_median": round(statistics.median(durations)), "batch_ms_max": max(durations)}


def bench_write(spark, urls: list[str], rows: int, size: int) -> dict:
    asyncio.run(_publish(urls, "BENCHOUT", "benchout", 0, size))  # just the stream
    df = spark.range(rows).selectExpr(f"concat('benchout.', CAST(id % {SUBJECTS} AS STRING)) AS subject",
                                      f"CAST(repeat('y', {size}) AS BINARY) AS data").cache()
    df.count()
    started = time.perf_counter()
    df.write.format("jsraft").option("servers", ",".join(urls)).option("stream", "BENCHOUT").mode("append").save()
    write_s = time.perf_counter() - started
    return {"rows": rows, "write_s": round(write_s, 2), "rows_per_s": round(rows / write_s)}


def bulk_chunks(cluster) -> dict:
    """Per node, where the bulk chunks it answered were read: `local` (its own replica), `leader` (at the
    stream leader, over a route), from `/jsz`'s `jsraft.bulk_get` counters."""
    chunks = {}
    for name, url in cluster.monitor_urls.items():
        counters = nats_servers.get_json(f"{url}/jsz")[1]["jsraft"]["bulk_get"]
        chunks[name] = {"local": counters["local_chunks"], "leader": counters["leader_chunks"]}
    return chunks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--partitions", type=int, default=0, help="0: the reader's default (by stream size)")
    parser.add_argument("--rounds", type=int, default=3, help="timed count() reads (the median is reported)")
    parser.add_argument("--stream-batches", type=int, default=10)
    parser.add_argument("--write-rows", type=int, default=100_000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (stores, checkpoint) and "
                        "print its path")
    args = parser.parse_args()
    figures: dict = {"messages": args.messages, "size": args.size, "partitions": args.partitions,
                     "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    root = tempfile.mkdtemp(prefix="jsraft-spark-bench-")
    try:
        run(args, root, figures)
    finally:
        # Three replicas of --messages messages and their logs, hundreds of MiB at the defaults: left in /tmp
        # by every run, they would pile up.
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(figures, indent=None if args.json else 2))
    return 0


def run(args: argparse.Namespace, root: str, figures: dict) -> None:
    """The cluster under `root`, the messages, then each measurement into `figures`."""
    from pyspark.sql import SparkSession

    from jsraft.spark import JsraftDataSource

    with nats_servers.JsraftServers(os.path.join(root, "cluster"), nodes=3, label="spark-bench") as cluster:
        started = time.perf_counter()
        asyncio.run(_publish(cluster.urls, "BENCH", "bench", args.messages, args.size))
        figures["publish_s"] = round(time.perf_counter() - started, 1)
        spark = (SparkSession.builder.master("local[2]").appName("jsraft-spark-bench")
                 .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
                 .config("spark.sql.shuffle.partitions", "2").config("spark.driver.memory", "2g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(JsraftDataSource)
        try:
            figures["read"] = bench_read(spark, cluster.urls, args.messages, args.partitions, args.rounds)
            figures["read"]["bulk_chunks"] = bulk_chunks(cluster)
            print("read", figures["read"], file=sys.stderr)
            figures["baseline"] = bench_baseline(spark, cluster.urls, args.messages)
            figures["read_vs_baseline"] = round(figures["read"]["count_rows_per_s"]
                                                / figures["baseline"]["rows_per_s"], 2)
            figures["stream"] = bench_stream(spark, cluster.urls, args.messages, args.stream_batches, root)
            figures["write"] = bench_write(spark, cluster.urls, args.write_rows, args.size)
        finally:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())
