"""The Spark tests' shared setup: the environment Spark needs on this machine, set before the JVM starts,
and one SparkSession for the whole run.

Method: `SPARK_LOCAL_IP=127.0.0.1` (loopback only), `PYSPARK_PYTHON=sys.executable` (Spark's Python
workers run this venv's Python, so they import this worktree's jsraft), `TZ=UTC` (timestamps); one
session-scoped `local[2]` SparkSession with the UI off and two shuffle partitions, `JsraftDataSource`
registered once. `.ci/run` installs the `spark` extra and Java and sets `CI=true`, under which a missing
piece fails the module instead of skipping it (test_spark_source.py's guard).
"""

from __future__ import annotations

import os
import sys
import time

import pytest


@pytest.fixture(scope="session")
def spark():
    # Set here, before the JVM starts (getOrCreate below), and only when a Spark test runs.
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["TZ"] = "UTC"
    time.tzset()
    from pyspark.sql import SparkSession

    from jsraft.spark import JsraftDataSource

    session = (SparkSession.builder.master("local[2]").appName("jsraft-tests")
               .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", "2").config("spark.driver.host", "127.0.0.1")
               .config("spark.sql.streaming.stopActiveRunOnRestart", "true").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(JsraftDataSource)
    yield session
    session.stop()
