#!/usr/bin/env python3
"""The pipeline's Structured Streaming job: orders in, totals per 10-second window and shop out, exactly once.

    python scripts/pipeline/job.py --servers nats://127.0.0.1:4222,... --checkpoint DIR

Reads stream ORDERS with the `jsraft` source (offsets are stream sequences, 500 orders per micro-batch),
parses each order (`{"order_id", "shop", "amount", "ts"}`, `ts` in seconds), groups by a 10-second
event-time window and shop (watermark 0: a window is final once a later order was seen), and appends
one message per closed window and shop to stream TOTALS (subject `totals.<shop>`, JSON data) with the
`jsraft` sink, whose message ids make a replayed micro-batch store nothing twice. Runs until killed;
`run.py` kills it mid-way and starts it again on the same checkpoint.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ["TZ"] = "UTC"
time.tzset()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--max-records", type=int, default=500)
    args = parser.parse_args()
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from jsraft.spark import JsraftDataSource

    spark = (SparkSession.builder.master("local[2]").appName("jsraft-pipeline")
             .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(JsraftDataSource)
    orders = (spark.readStream.format("jsraft").option("servers", args.servers).option("stream", "ORDERS")
              .option("maxRecordsPerTrigger", str(args.max_records)).load())
    order = F.from_json(F.col("data").cast("string"), "order_id BIGINT, shop STRING, amount BIGINT, ts DOUBLE")
    totals = (orders.select(order.alias("o")).select("o.*")
              .withColumn("event_time", F.timestamp_seconds("ts"))
              .withWatermark("event_time", "0 seconds")
              .groupBy(F.window("event_time", "10 seconds"), "shop")
              .agg(F.count("*").alias("orders"), F.sum("amount").alias("amount")))
    out = totals.select(
        F.concat(F.lit("totals."), F.col("shop")).alias("subject"),
        F.to_json(F.struct(F.col("window.start").cast("long").alias("window_start"), "shop", "orders",
                           "amount")).alias("data"))
    query = (out.writeStream.format("jsraft").option("servers", args.servers).option("stream", "TOTALS")
             .option("checkpointLocation", args.checkpoint).outputMode("append")
             .trigger(processingTime="1 second").start())
    print(f"job: query {query.id} running", flush=True)
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
