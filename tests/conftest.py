"""Shared fixtures: one session-scoped local Spark session and Kafka broker, the triggers its streaming queries
complete; real Delta tables under tmp_path."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.kafka_broker import Broker, kafka_missing, spark_kafka_jars
from tests.referee import Referee, referee_missing

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """Apache Kafka, one broker for the session (tests/test_kafka*.py, tests/reliability)."""
    missing = kafka_missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI: {missing}")
        pytest.skip(missing)
    server = Broker(tmp_path_factory.mktemp("kafka"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def referee(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Referee]:
    """Delta Spark 4.4 in its own venv and JVM, one for the session (tests/test_delta_spark.py)."""
    missing = referee_missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI: {missing}")
        pytest.skip(missing)
    server = Referee(tmp_path_factory.mktemp("referee"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def sources(referee: Referee, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every table-feature recipe's table (tests/delta_spark_tables.py), made once by Delta Spark; tests copy them."""
    from tests.delta_spark_tables import RECIPES, write_table

    root = tmp_path_factory.mktemp("delta-spark-tables")
    referee.sql("SET spark.databricks.delta.retentionDurationCheck.enabled = false")
    for name, recipe in RECIPES.items():
        write_table(referee, root / name, recipe)
    return {name: root / name for name in RECIPES}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", help="tests/reliability: the long soak mode (not for CI)")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from recluster.settings import SparkSettings
    from recluster.settings_optimizing import SelfOptimizingSettings
    from recluster.spark.session import spark_session

    jars = ",".join(map(str, spark_kafka_jars()))  # Spark's Kafka source, for the tests of kafka.reader: spark
    settings = SparkSettings(master="local[2]", shuffle_partitions=2, conf={"spark.jars": jars} if jars else {})
    session = spark_session(settings, SelfOptimizingSettings().groups)
    yield session
    session.stop()


@pytest.fixture
def triggers(spark: Any) -> Iterator[list[datetime]]:
    """The start times of the triggers that the streaming queries started during the test complete, appended as
    each completes: one that ran a batch (a progress event) or one that found no new data (an idle event, which
    Spark otherwise reports at most every 10 s). A test waits on it for triggers run after a moment."""
    from pyspark.sql.streaming import StreamingQueryListener

    ended: list[datetime] = []

    class Triggers(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            ended.append(datetime.fromisoformat(event.progress.timestamp))

        def onQueryIdle(self, event: Any) -> None:
            ended.append(datetime.fromisoformat(event.timestamp))

        def onQueryTerminated(self, event: Any) -> None:
            pass

    interval = "spark.sql.streaming.noDataProgressEventInterval"
    previous = spark.conf.get(interval, None)
    spark.conf.set(interval, "0")
    listener = Triggers()
    spark.streams.addListener(listener)
    try:
        yield ended
    finally:
        spark.streams.removeListener(listener)
        if previous is None:
            spark.conf.unset(interval)
        else:
            spark.conf.set(interval, previous)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI a skipped test means a real component did not run: fail the run."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter else 0
    if os.environ.get("CI") == "true" and skipped and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nCI: {skipped} test(s) skipped; a skipped real component is a failure in CI", file=sys.stderr)
