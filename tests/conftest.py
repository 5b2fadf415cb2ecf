"""Shared fixtures: one session-scoped local Spark session and Kafka broker; real Delta tables under tmp_path."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.kafka_broker import Broker

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """One broker for the session (tests/test_kafka.py, tests/reliability)."""
    server = Broker(tmp_path_factory.mktemp("kafka") / "tansu.log")
    server.start()
    yield server
    server.stop()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", help="tests/reliability: the long soak mode (not for CI)")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from recluster.settings import SelfOptimizingSettings, SparkSettings
    from recluster.spark.session import spark_session

    session = spark_session(SparkSettings(master="local[2]", shuffle_partitions=2), SelfOptimizingSettings().groups)
    yield session
    session.stop()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI a skipped test means a real component did not run: fail the run."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter else 0
    if os.environ.get("CI") == "true" and skipped and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nCI: {skipped} test(s) skipped; a skipped real component is a failure in CI", file=sys.stderr)
