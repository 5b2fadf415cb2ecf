"""The long-running job: Delta commits stream in, `foreachBatch` keeps tables clustered (docs/streaming.md).

Only wiring lives here: the trigger source (the Delta log, or Kafka commit events read by recluster's Python source
or by Spark's own) started as a Structured Streaming query whose batches go to the engine's `ReclusterHandler`, and
its graceful stop.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any

from recluster.core.errors import TableError, first_line
from recluster.core.optimizing import optimizing_config
from recluster.delta.storage import normalize_uri, require_writable
from recluster.engine.estimate import record_estimate
from recluster.engine.handler import ReclusterHandler
from recluster.engine.job_discovery import JobDiscovery
from recluster.engine.leases import JobLeases
from recluster.settings import Settings, SettingsError, TableSettings
from triggers.delta_log import SOURCE_NAME, DeltaLogSource, table_version, with_storage_retries
from triggers.kafka_commits import SOURCE_NAME as KAFKA_SOURCE_NAME
from triggers.kafka_commits import KafkaCommitsSource
from triggers.spark_kafka import commit_events

log = logging.getLogger("recluster.job")

SOURCES_UP_SECONDS = 120.0
"""The longest the job's start and its first discovery pass wait for the stream's source to be up."""
START_ATTEMPTS = 5
"""How many times the job starts a query whose source worker missed Spark's connect-back (a busy host's transient)."""
START_PAUSE_SECONDS = 5.0
"""The pause before the n-th new start is n times this: a load spike has time to pass."""
WORKER_CONNECT_FAILED = "Python worker failed to connect back"
"""Spark's error when a Python source's worker did not connect back in time (`PythonWorkerFactory`)."""
INITIALIZING = frozenset({"Initializing StreamExecution", "Initializing sources"})
"""A query's status messages before its sources are up: the first until its thread runs, the second while the
sources start (Spark's StreamExecution). `start()` can return before the thread moved to the second."""


def initializing(query: Any) -> bool:
    """Whether the query is still starting its sources (docs/streaming.md#starting)."""
    return bool(query.isActive and query.status.get("message") in INITIALIZING)


def check_checkpoint_location(location: str) -> None:
    """Fail fast, with one clear line, when the checkpoint cannot be written."""
    require_writable(location, "checkpoint location", create=True)


def starting_versions(tables: Sequence[TableSettings], settings: Settings) -> dict[str, str | int]:
    """Per table, the version the Delta-log source starts after when the checkpoint has none: `latest` is pinned
    here, as the job starts (the source would otherwise fix it at its first trigger, seconds later, and a commit
    made in between would wait for the next one)."""
    starting = str(settings.stream.starting_version)
    pinned: dict[str, str | int] = {}
    for table in tables:
        uri = normalize_uri(table.uri)
        options = {**settings.storage_options, **table.storage_options}
        current = with_storage_retries(uri, "version", partial(table_version, uri, options))
        pinned[uri] = current if starting == "latest" and current is not None else starting
    return pinned


def record_estimates(handler: ReclusterHandler, tables: Sequence[TableSettings]) -> None:
    """Estimate each watched table once, in the background, after the tables' first load : the status
    shows the projection against what happens since."""
    while not handler.loaded.wait(0.5):
        if handler.stopping.is_set():
            return
    for table in tables:
        if handler.stopping.is_set():
            return
        uri = normalize_uri(table.uri)
        snapshot = handler.board.view.snapshots.get(uri)
        if snapshot is None or not reclusters(snapshot.properties, handler.settings):
            continue  # not taken up: not loaded, or `recluster.enabled` false (a disabled table is left alone)
        record_estimate(uri, settings=handler.settings, store=handler.history)


def reclusters(properties: Mapping[str, str], settings: Settings) -> bool:
    """Whether the job reclusters a table with these properties (a malformed property: not until it is fixed)."""
    try:
        return optimizing_config(properties, settings.self_optimizing).recluster_enabled
    except SettingsError:
        return False


def commit_source(
    spark: Any, settings: Settings, tables: Sequence[TableSettings], tables_file: str | None = None
) -> Any:
    """The streaming DataFrame of the job's trigger: the watched tables' Delta logs, or the commit events on Kafka
    read by recluster's Python source or by Spark's own (`kafka.reader`); nothing is read before the query starts."""
    stream, kafka = settings.stream, settings.kafka
    if stream.source == "kafka" and kafka.reader == "spark":
        return commit_events(spark, kafka)
    if stream.source == "kafka":
        spark.dataSource.register(KafkaCommitsSource)
        return (
            spark.readStream.format(KAFKA_SOURCE_NAME)
            .option("bootstrapServers", kafka.bootstrap_servers)
            .option("topic", kafka.commits_topic)
            .option("startingOffsets", kafka.starting_offsets)
            .option("maxEventsPerBatch", str(kafka.max_events_per_batch))
            .option("clientOptions", json.dumps(dict(kafka.client_options)))
            .load()
        )
    spark.dataSource.register(DeltaLogSource)
    reader = spark.readStream.format(SOURCE_NAME)
    if tables_file is not None:
        reader = reader.option("tablesFile", tables_file)
    return (
        reader.option("tables", json.dumps([normalize_uri(t.uri) for t in tables]))
        .option("startingVersion", json.dumps(starting_versions(tables, settings)))
        .option("maxCommitsPerBatch", str(stream.max_commits_per_batch))
        .option("storageOptions", json.dumps(dict(settings.storage_options)))
        .option("tableStorageOptions", json.dumps({normalize_uri(t.uri): t.storage_options for t in tables}))
        .load()
    )


def start_job(spark: Any, settings: Settings, tables: Sequence[TableSettings]) -> tuple[Any, ReclusterHandler]:
    """Start the streaming query; returns it with its handler (for status and graceful stops)."""
    if not tables and settings.stream.source != "kafka" and not settings.discovery.enabled:
        raise TableError("no tables to watch: pass --table URI or list tables in the config file")
    stream = settings.stream
    polled = settings.discovery.enabled and stream.source != "kafka"  # the Delta-log source polls the found tables
    tables_file = found_tables_file() if polled else None
    events = commit_source(spark, settings, tables, tables_file)  # Spark's Kafka source missing: fails here
    check_checkpoint_location(stream.checkpoint_location)
    handler = ReclusterHandler(settings, tables, spark)
    threading.Thread(target=handler.load_tables, name="recluster-load", daemon=True).start()
    estimating = threading.Thread(
        target=record_estimates, args=(handler, tables), name="recluster-estimate", daemon=True
    )
    handler.background.append(estimating)  # joined by a graceful stop: its calibration leaves no temporary directory
    estimating.start()
    start = (
        events.writeStream.foreachBatch(handler)
        .option("checkpointLocation", stream.checkpoint_location)
        .trigger(processingTime=f"{stream.trigger_interval_seconds} seconds")
        .queryName("recluster")
        .start
    )
    query = started_query(start)
    reader = source_module(settings)
    if reader is not None:
        threading.Thread(target=warm_python_worker, args=(spark, reader), name="recluster-warm", daemon=True).start()
    if settings.discovery.enabled:
        discovery = JobDiscovery(
            settings, spark, handler.tables.listed, handler.take_up_found, handler.let_go, tables_file
        )
        handler.discovery = discovery
        threads = [threading.Thread(target=discover, args=(handler, discovery, query), name="recluster-discovery")]
        if discovery.leases is not None:
            discovery.leases.beat()  # a lease root that cannot be written fails the start, in one line
            leases = discovery.leases
            threads.append(threading.Thread(target=beat, args=(handler, leases), name="recluster-leases"))
        for thread in threads:
            thread.daemon = True
            thread.start()
        handler.background.extend(threads)
    return query, handler


def source_module(settings: Settings) -> str | None:
    """The module whose reader the query's micro-batches run in Spark's Python workers; None: Spark's own source."""
    if settings.stream.source == "kafka":
        return "triggers.kafka_commits" if settings.kafka.reader == "python" else None
    return "triggers.delta_log"


def warm_python_worker(spark: Any, module: str) -> None:
    """Start a Python worker with the source's reader imported as the job starts: the first micro-batch with commits
    reuses it instead of starting one, 7-11 s on a busy host in the fleet bench (3 s with it) while the commits of those
    seconds waited (docs/streaming.md#starting). An RDD task's worker is not the kind the source's reads reuse: that
    warm-up changed nothing. Best effort: a failure is one line."""

    def imported(batches: Iterator[Any]) -> Iterator[Any]:  # in the worker: the reader's module, as its reads run
        importlib.import_module(module)
        yield from batches

    try:  # an Arrow map over a row, as the source's reads are: the same kind of worker, kept by Spark
        spark.range(1).mapInArrow(imported, "id long").collect()
    except Exception as error:  # the job goes on; its first batch starts the worker itself
        log.warning("recluster reason=warm_up_failed module=%s error=%s", module, first_line(error))


def started_query(start: Callable[[], Any]) -> Any:
    """The query once its sources are up (bounded by SOURCES_UP_SECONDS), started again when one failed to start for
    want of time only: Spark gives a Python source's worker process a fixed 10 s to connect back, which a busy
    driver's host can miss (seen at a load of 8 on 2 cores). No batch ran, so starting again from the checkpoint is
    what a restart of the job would do (docs/streaming.md#starting)."""
    attempt, query = 1, start()
    deadline = time.monotonic() + SOURCES_UP_SECONDS
    while True:
        while initializing(query):
            if time.monotonic() > deadline:
                return query
            time.sleep(0.2)
        error = None if query.isActive else query.exception()
        if error is None or WORKER_CONNECT_FAILED not in str(error) or attempt == START_ATTEMPTS:
            return query
        log.warning(
            "recluster reason=source_start_failed attempt=%d error=%s: starting the query again",
            attempt,
            first_line(error),
        )
        time.sleep(START_PAUSE_SECONDS * attempt)
        attempt, query = attempt + 1, start()


def found_tables_file() -> str:
    """Where the job tells its Delta-log source which tables discovery found (a local file: the source runs in a
    Python process of this driver)."""
    return os.path.join(tempfile.mkdtemp(prefix="recluster-discovery-"), "tables.json")


def discover(handler: ReclusterHandler, discovery: JobDiscovery, query: Any) -> None:
    """Discovery passes every `discovery.interval_seconds` until the job stops (docs/discovery.md). The first waits
    for the stream's source to be up (bounded): a catalog client starting at the same moment (Hive's loads thousands
    of classes) delayed the source's Python worker past Spark's connect-back timeout on a busy machine."""
    deadline = time.monotonic() + SOURCES_UP_SECONDS
    while not handler.stopping.is_set() and time.monotonic() < deadline:
        if not initializing(query):
            break
        handler.stopping.wait(0.5)
    while not handler.stopping.is_set():
        try:
            discovery.run_pass()
        except Exception:  # a storage outage or a defect of ours: logged, the next pass tries again
            log.exception("recluster discovery pass failed")
        handler.stopping.wait(discovery.period())


def beat(handler: ReclusterHandler, leases: JobLeases) -> None:
    """This job's heartbeat every `renew_seconds` until it stops, on its own thread (docs/discovery.md#several-jobs)."""
    while not handler.stopping.wait(leases.settings.renew_seconds):
        try:
            leases.beat()
        except Exception as error:  # the store is down: the job stops starting work once its heartbeat is stale
            log.error("recluster job=%s reason=heartbeat_failed error=%s", leases.job, first_line(error))


STOP_POLL_SECONDS = 0.05
"""How often a graceful stop looks for a moment between two triggers."""


def between_triggers(query: Any) -> bool:
    """Whether the query is between two triggers (or no longer runs): the moment to stop it."""
    try:
        return not query.status["isTriggerActive"]
    except Exception:  # the query failed or stopped: nothing to wait for
        return True


def stop_gracefully(query: Any, handler: ReclusterHandler, grace_seconds: float = 60.0) -> None:
    """No new merges; let the running batch finish its merge and commit (bounded), then stop the query between two
    triggers: stopped while Spark had started a batch, the batch's first Spark call was interrupted and Py4J logged its
    traceback (harmless: the batch was not committed and runs again after a restart). Last, a job sharing tables hands
    them back to the others."""
    handler.stopping.set()
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline and not (handler.idle.wait(timeout=0.2) and between_triggers(query)):
        time.sleep(STOP_POLL_SECONDS)
    query.stop()
    for thread in handler.background:
        thread.join(timeout=max(deadline - time.monotonic(), 5.0))
    handler.flush_history()
    leases = handler.discovery.leases if handler.discovery is not None else None
    if leases is not None:
        try:  # its tables to the other jobs at their next lease pass, not after its heartbeat's expiry
            leases.hand_back()
        except Exception as error:  # they wait for the expiry, as after a kill
            log.error("recluster job=%s reason=hand_back_failed error=%s", leases.job, first_line(error))
    if handler.reports.metrics is not None:
        handler.reports.metrics.close()
