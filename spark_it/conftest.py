"""Fixtures for the Spark tests: one local SparkSession for the whole run, and connector gating.

The session is started once (local[2], no UI, one shuffle partition, C1-only JIT — JVM start-up and
warm-up dominate these tests) and carries the Kafka connector when `spark_it.session.connector_config`
finds it; tests that need the connector take `kafka_spark` and skip with the enabling hint otherwise.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest


def _java_available() -> bool:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.path.exists(os.path.join(java_home, "bin", "java")):
        return True
    return shutil.which("java") is not None


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark", reason="pyspark is not installed")
    if not _java_available():
        pytest.skip("no JVM (java on PATH or JAVA_HOME) for pyspark")
    from pyspark.sql import SparkSession

    from spark_it.session import SparkStartError, connector_config, start_session

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("kafkacompat-spark-it")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.default.parallelism", "1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.sql.streaming.minBatchesToRetain", "2")
        # Each test has a broker of its own: close the connector's cached producers soon after their
        # test, instead of keeping them (and their reconnect attempts) for the default ten minutes.
        .config("spark.kafka.producer.cache.timeout", "5s")
        .config("spark.kafka.producer.cache.evictorThreadRunInterval", "2s")
    )
    config, _reason = connector_config()
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    try:
        session = start_session(builder)
    except SparkStartError as exc:
        # one line, once: the session fixture's failure is reused by every test that needs Spark
        pytest.fail(str(exc), pytrace=False)
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def kafka_spark(request: pytest.FixtureRequest) -> Any:
    """The session, when it has the Kafka connector; otherwise skip (before any JVM starts)."""
    from spark_it.session import connector_config

    config, reason = connector_config()
    if config is None:
        pytest.skip(reason)
    return request.getfixturevalue("spark")
