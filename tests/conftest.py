"""Shared fixtures: one session-scoped local Spark session, Kafka broker, Delta Spark referee and S3 server, the
triggers the streaming queries complete; real Delta tables under tmp_path. Every test that needs a JVM or a service
is marked `needs_services` here, and `--quick` (`./dev test --quick`, docs/getting-started.md) runs the others with
no JVM or service program available to them."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.suite_environment import SUITE_SETTINGS

for name, value in SUITE_SETTINGS.items():  # before any module below builds a Settings
    os.environ.setdefault(name, value)

# Every Python process of the run (pytest's workers, the `recluster` subprocesses, PySpark's Python workers: about
# 450) reads the project's modules from cached bytecode, compiled once, even where the environment says not to write
# it (PYTHONDONTWRITEBYTECODE, set on the machine these figures come from); pytest's rewritten test modules too
# (docs/getting-started.md#test-time).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

from tests.delta_spark_tables import FeatureTables  # noqa: E402
from tests.driver_jvm import start_drivers_fast  # noqa: E402
from tests.helpers import QUICK_LOG  # noqa: E402
from tests.hive_metastore import Metastore, metastore_missing  # noqa: E402
from tests.kafka_broker import Broker, kafka_missing, spark_kafka_jars  # noqa: E402
from tests.referee import Referee, referee_missing  # noqa: E402
from tests.s3_server import S3Server, moto_server  # noqa: E402

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

SERVICE_FIXTURES = frozenset({"spark", "referee", "sources", "broker", "s3", "cluster", "azurite", "gcs", "metastore"})
"""Fixtures that start a JVM (Spark, the referee, Kafka, a standalone cluster) or a service (moto, azurite, fake GCS):
a test using one, directly or through another fixture, is marked `needs_services`."""

SERVICE_PROGRAMS = ("java", "chromium", "chromium-browser", "node", "azurite-blob", "kubectl", "kind", "docker")
"""What the quick run replaces on PATH (and JAVA_HOME) by a stub that records the attempt and fails."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", help="tests/reliability: the long soak mode (not for CI)")
    parser.addoption(
        "--quick",
        action="store_true",
        help="only the tests that need no JVM and no service (not marked needs_services); one that starts one fails",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--quick"):
        _stub_service_programs(Path(tempfile.mkdtemp(prefix="recluster-quick-")))
    elif not hasattr(config, "workerinput"):  # xdist's workers inherit the controller's environment
        start_drivers_fast()


def _stub_service_programs(root: Path) -> None:
    """Put stubs of SERVICE_PROGRAMS first on PATH and JAVA_HOME at them, for this process and its children: Spark
    (pyspark's spark-submit runs $JAVA_HOME/bin/java), the referee, Kafka and a browser cannot start."""
    stubs = root / "bin"
    stubs.mkdir()
    log = root / "started.log"
    log.touch()
    for program in SERVICE_PROGRAMS:
        stub = stubs / program
        stub.write_text(
            f'#!/bin/sh\necho "$(basename "$0") $*" >> "{log}"\n'
            'echo "recluster quick run: $(basename "$0") is not available (mark the test needs_services)" >&2\n'
            "exit 127\n"
        )
        stub.chmod(0o755)
    os.environ["PATH"] = f"{stubs}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ["JAVA_HOME"] = str(root)
    os.environ[QUICK_LOG] = str(log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that uses a SERVICE_FIXTURES fixture (or carries the `spark` marker) `needs_services`; put
    the longest scopes first (SCOPE_SECONDS); with --quick, deselect the tests so marked (here or by hand)."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & SERVICE_FIXTURES or item.get_closest_marker("spark"):
            item.add_marker(pytest.mark.needs_services)
        _check_worker_scope(item, fixtures)
    items.sort(key=lambda item: _scope_order(_worker_scope(item.nodeid)))  # stable: a file's order kept
    if config.getoption("--quick"):
        slow = [item for item in items if item.get_closest_marker("needs_services")]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if not item.get_closest_marker("needs_services")]


SHARED_SCOPE_FILES = {
    "tests/test_kafka.py": "kafka-broker",
    "tests/test_kafka_groups.py": "kafka-broker",
    "tests/test_kafka_security.py": "kafka-broker",
    "tests/test_kafka_spark_source.py": "kafka-broker",
    "tests/reliability/test_kafka_faults.py": "kafka-broker",
    "tests/test_cluster.py": "spark-cluster",
    "tests/test_cluster_demo.py": "spark-cluster",
    "tests/test_discovery_catalog.py": "hive-metastore",
    "tests/test_hive_metastore.py": "hive-metastore",
    "tests/test_table_names_catalog.py": "hive-metastore",
    "tests/test_delta_spark.py": "delta-spark-tables",
    "tests/test_delta_spark_writers.py": "delta-spark-tables",
    "tests/test_maintenance_delta_spark.py": "delta-spark-tables",
    "tests/test_log_state.py": "delta-spark-tables",
}
"""The files whose tests share one expensive thing between them: pytest-xdist runs each group on one worker, so the
run starts one Kafka broker, one standalone Spark cluster, and one Hive Metastore with its Delta Spark, at a time,
not one per worker (or per file); and the files of the Delta Spark feature tables (`sources`) run on one worker,
whose referee writes them all and runs every statement on them warm. Split by recipe over the workers (each
worker's referee writing and running its recipes' tables), the suite took 21 min 35 s and 22 min 25 s (the
referee's JVMs 1,004 and 1,091 CPU s) against 21 min 16 s as one group (1,000 s; 2026-11-29,
docs/getting-started.md#test-time)."""


SCOPE_SECONDS = {
    "delta-spark-tables": 1266,
    "kafka-broker": 316,
    "spark-cluster": 261,
    "tests/test_exact_stats.py": 252,
    "hive-metastore": 187,
    "tests/test_watch_cli.py": 123,
    "tests/reliability/test_storage_faults.py": 101,
    "tests/test_table_shapes.py": 98,
    "tests/test_first_look.py": 95,
    "tests/reliability/test_crashes.py": 92,
    "tests/test_fleet.py": 79,
    "tests/test_streaming_writers.py": 75,
    "tests/test_benefit_job.py": 72,
    "tests/test_advise.py": 64,
}
"""The worker seconds of the longest scopes (a full run, 2026-11-29): the scheduler hands them out first, longest
first, and the many short scopes after, so the run does not end with one worker on a long file while the other is
done (it did: 100 s of the 24 min). Only an order: a scope missing here runs among the short ones."""


def _scope_order(scope: str) -> float:
    return -SCOPE_SECONDS.get(scope, 0)


def _worker_scope(nodeid: str) -> str:
    """What runs on one worker (`./dev test` runs a worker per core, and one more): a group of SHARED_SCOPE_FILES
    together, else a file's tests together (its module-scoped fixtures are made once)."""
    path = nodeid.split("::", 1)[0]
    return SHARED_SCOPE_FILES.get(path, path)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto` in the full run: one pytest worker more than cores, since many tests wait and one worker per core
    left a core idle (measured: docs/getting-started.md#test-time). The quick run keeps one per core (it never
    waits); PYTEST_XDIST_AUTO_NUM_WORKERS still decides when set."""
    if config.getoption("--quick") or os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return len(os.sched_getaffinity(0)) + 1


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The full run's scheduler: pytest-xdist's scope scheduling on `_worker_scope` (its `--dist loadgroup` marks
    are lost on pytest 9, whose node ids it cannot suffix), the scopes in the collection's order, which
    `pytest_collection_modifyitems` makes longest first (SCOPE_SECONDS). The quick run keeps the default: test by
    test."""
    if config.getoption("--quick"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # xdist's own order: the scopes with the most tests first

    class ServiceScopes(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _worker_scope(nodeid)

    return ServiceScopes(config, log)


def _check_worker_scope(item: pytest.Item, fixtures: set[str]) -> None:
    """A test of the Kafka broker, a standalone cluster or the metastore outside SHARED_SCOPE_FILES would start a
    second one on another worker (a test of the feature tables would write them again with a cold referee there):
    refuse the run until it is listed."""
    needs = (
        "kafka-broker"
        if "broker" in fixtures
        else "spark-cluster"
        if item.get_closest_marker("spark_cluster")
        else "hive-metastore"
        if "metastore" in fixtures
        else "delta-spark-tables"
        if "sources" in fixtures
        else None
    )
    if needs is not None and _worker_scope(item.nodeid) != needs:
        raise pytest.UsageError(
            f"{item.nodeid} uses the {needs}: list its file in SHARED_SCOPE_FILES (tests/conftest.py)"
        )


@pytest.fixture(autouse=True)
def _no_service_started_in_quick_run() -> Iterator[None]:
    """In the quick run: fail a test that tried to run a JVM or a service program, even if it caught the error."""
    log = os.environ.get(QUICK_LOG)
    if log is None:
        yield
        return
    before = Path(log).stat().st_size
    yield
    with open(log, encoding="utf-8") as started:
        started.seek(before)
        attempts = started.read().strip()
    if attempts:
        pytest.fail(
            f"the quick run (--quick) has no JVM or service; this test tried to run: {attempts}. "
            "Mark it @pytest.mark.needs_services"
        )


def _service(name: str) -> None:
    """A service fixture refuses to start in the quick run (a test that needs it is deselected there)."""
    if os.environ.get(QUICK_LOG) is not None:
        pytest.fail(f"the quick run (--quick) starts no {name}: mark the test @pytest.mark.needs_services")


def _installed_service(name: str, missing: str | None) -> None:
    """`_service`, and a service whose install is `missing` fails the test in CI (a real component never skipped
    there) and skips it elsewhere."""
    _service(name)
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI: {missing}")
        pytest.skip(missing)


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """moto_server, one for the session (tests/s3_server.py)."""
    _service("S3 server")
    with moto_server(tmp_path_factory.mktemp("moto")) as server:
        yield server


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """Apache Kafka, one broker for the session (tests/test_kafka*.py, tests/reliability)."""
    _installed_service("Kafka broker", kafka_missing())
    server = Broker(tmp_path_factory.mktemp("kafka"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def metastore(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Metastore]:
    """The standalone Hive Metastore (Thrift, embedded Derby), one per worker (tests/hive_metastore)."""
    _installed_service("Hive Metastore", metastore_missing())
    server = Metastore(tmp_path_factory.mktemp("metastore"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def catalog_referee(metastore: Metastore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Referee]:
    """Delta Spark whose session catalog is the Hive Metastore: it registers the tables discovery finds."""
    _installed_service("Delta Spark referee", referee_missing())
    server = Referee(tmp_path_factory.mktemp("catalog-referee"), conf=metastore.spark_conf())
    yield server
    server.stop()


@pytest.fixture(scope="session")
def referee(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Referee]:
    """Delta Spark 4.4 in its own venv and JVM, one for the session (tests/test_delta_spark.py)."""
    _installed_service("Delta Spark referee", referee_missing())
    server = Referee(tmp_path_factory.mktemp("referee"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def sources(referee: Referee, tmp_path_factory: pytest.TempPathFactory) -> Mapping[str, Path]:
    """Every table-feature recipe's table (tests/delta_spark_tables.py), made by Delta Spark once a run as a test
    first asks for it (one worker writes each, all share them); tests copy them."""
    referee.sql("SET spark.databricks.delta.retentionDurationCheck.enabled = false")
    return FeatureTables(referee, tmp_path_factory)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The local Spark session, one for the session (two cores, two shuffle partitions)."""
    _service("Spark session")
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
