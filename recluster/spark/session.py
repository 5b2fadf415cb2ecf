"""The Spark session merges run in: workers run this interpreter, optimizer groups get FAIR pools, Hive's client
retries are bounded."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from recluster.settings import SparkSettings
from recluster.settings_optimizing import OptimizerGroup

log = logging.getLogger("recluster.spark")

LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
"""Shipped with the package: Spark's JVMs log through it instead of Spark's default profile."""


def fair_scheduler_pools(groups: Mapping[str, OptimizerGroup]) -> str:
    """A FAIR scheduler allocation file: one pool per optimizer group, guaranteed its cores (minShare) and
    weighted by them, so one group's big table cannot starve another group (docs/operations.md#self-optimizing)."""
    pools = "".join(
        f'  <pool name="{escape(name)}"><schedulingMode>FAIR</schedulingMode>'
        f"<weight>{group.cores}</weight><minShare>{group.cores}</minShare></pool>\n"
        for name, group in sorted(groups.items())
    )
    handle, path = tempfile.mkstemp(prefix="recluster-pools-", suffix=".xml")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(f'<?xml version="1.0"?>\n<allocations>\n{pools}</allocations>\n')
    return path


def use_scheduler_pool(spark: Any, pool: str | None) -> None:
    """Jobs started from the calling thread run in `pool` (Spark local properties are per thread)."""
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", pool)


HIVE_CLIENT_DEFAULTS = {
    "spark.hadoop.hive.metastore.connect.retries": "1",
    "spark.hadoop.hive.metastore.failure.retries": "1",
    "spark.hadoop.hive.metastore.client.connect.retry.delay": "1s",
    "spark.hadoop.hive.metastore.client.socket.timeout": "20s",
}
"""Spark's built-in Hive client: one connection attempt and one retry of a failed call, 20 s to answer, instead of
Hive's three attempts and 600 s (docs/discovery.md#a-bad-catalog-address: the timeout is for a metastore that accepts
and never answers; a refused connection failed as fast with Hive's values in the test). `spark.conf` overrides them."""

DELTA_SQL = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
"""Delta's SQL extension and session catalog, set when Delta Spark's jars are on the driver's classpath (the
`recluster[delta]` extra, docs/discovery.md#delta-spark); `spark.conf` overrides them."""

PYTHON_DAEMON_MODULE = "recluster.spark.python_daemon"
"""PySpark's worker daemon, with pyspark's cached bytecode instead of its zip (recluster/spark/python_daemon.py):
a task's Python worker imports pyspark in 0.29x the CPU (docs/operations.md#python-workers)."""

DRIVER_THREAD_STACK = "16m"
"""Default stack size of the driver JVM's threads (the JVM's default is 1 MB on Linux x86-64)."""


def delta_on_classpath(gateway: Any) -> bool:
    """Whether the driver JVM can load Delta's SQL extension (`spark.jars`, `spark.jars.packages` or Spark's own
    jars folder put it there)."""
    jvm = gateway.jvm
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    try:
        jvm.java.lang.Class.forName(DELTA_SQL["spark.sql.extensions"], False, loader)
    except Exception:  # py4j's error for the JVM's ClassNotFoundException
        return False
    return True


def spark_session(settings: SparkSettings, pools: Mapping[str, OptimizerGroup] | None = None) -> Any:
    """The Spark session for merges; workers run this interpreter (a venv otherwise breaks them).

    The driver JVM is launched in its own session: a SIGTERM/SIGINT sent to our process group then reaches
    only Python, which stops the query gracefully; the JVM still exits when Python does (its stdin closes).
    With `pools`, each optimizer group gets a FAIR scheduler pool of its name.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    conf = {
        "spark.master": settings.master,
        "spark.app.name": settings.app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.log.level": settings.log_level,
        # -Xss: on a cluster master the streaming query's thread died with a StackOverflowError deep in
        # java.util.regex during the first micro-batch (tests/test_cluster.py); threads get a bigger default stack.
        "spark.driver.extraJavaOptions": f"-Dlog4j.configurationFile={LOG4J_CONFIG} -Xss{DRIVER_THREAD_STACK}",
        "spark.executor.extraJavaOptions": f"-Dlog4j.configurationFile={LOG4J_CONFIG}",
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
        "spark.pyspark.python": os.environ["PYSPARK_PYTHON"],
        # the tasks' Python workers import pyspark from its installed package, not from Spark's zip
        "spark.python.daemon.module": PYTHON_DAEMON_MODULE,
        "spark.scheduler.mode": "FAIR",
        **HIVE_CLIENT_DEFAULTS,
        **settings.conf,
    }
    pools_file = fair_scheduler_pools(pools) if pools else None
    if pools_file is not None:
        conf["spark.scheduler.allocation.file"] = pools_file
    try:
        if SparkContext._gateway is None:
            spark_conf = SparkConf(loadDefaults=False).setAll(list(conf.items()))
            popen = {"start_new_session": True}
            gateway = launch_gateway(spark_conf, popen_kwargs=popen)  # type: ignore[no-untyped-call]
            SparkContext._ensure_initialized(gateway=gateway)
        if delta_on_classpath(SparkContext._gateway):
            conf = {**DELTA_SQL, **conf}
            log.info("Delta Spark on the classpath: %s", ", ".join(f"{k}={conf[k]}" for k in DELTA_SQL))
        builder = SparkSession.builder
        for name, value in conf.items():
            builder = builder.config(name, value)
        session = builder.getOrCreate()
    finally:
        if pools_file is not None:  # read once, when the SparkContext starts: nothing left in the temp dir
            Path(pools_file).unlink(missing_ok=True)
    session.sparkContext.setLogLevel(settings.log_level)
    return session
