"""`watch`: the long-running streaming job, its tables, its HTTP endpoints and its graceful stop."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from recluster.cli.common import UsageError, check_kafka, print_json, settings_of, updated_section
from recluster.core.errors import TableError
from recluster.core.keys import parse_columns
from recluster.engine.k8s import prepare_event_log_dir, with_kubernetes
from recluster.settings import (
    Settings,
    TableSettings,
)

if TYPE_CHECKING:
    from jobs.batch_timings import BatchLog
    from jobs.health import HealthServer


def parse_table_spec(spec: str) -> TableSettings:
    """`URI[:col1,col2]`; a colon followed by a path (s3://...) belongs to the URI."""
    uri, sep, columns = spec.rpartition(":")
    if sep and uri and "/" not in columns and columns:
        return TableSettings(uri=uri, cluster_by=parse_columns(columns))
    return TableSettings(uri=spec)


def merge_tables(configured: Sequence[TableSettings], given: Sequence[TableSettings]) -> list[TableSettings]:
    """The config file's tables plus `--table` ones; a `--table` naming a configured table keeps that table's
    storage options and sets only its key (when given)."""
    from recluster.delta.storage import normalize_uri

    merged = {normalize_uri(t.uri): t for t in configured}
    for table in given:
        known = merged.get(normalize_uri(table.uri))
        if known is not None and table.cluster_by is None:
            continue
        update = {"cluster_by": table.cluster_by}
        merged[normalize_uri(table.uri)] = known.model_copy(update=update) if known is not None else table
    return list(merged.values())


def stream_settings(args: argparse.Namespace) -> Settings:
    settings = settings_of(args)
    stream = {
        name: value
        for name, value in (
            ("checkpoint_location", args.checkpoint),
            ("trigger_interval_seconds", args.trigger_seconds),
            ("starting_version", args.starting_version),
        )
        if value is not None
    }
    if args.source is not None:
        stream["source"] = args.source
    kafka = {
        name: value
        for name, value in (
            ("bootstrap_servers", args.bootstrap_servers),
            ("commits_topic", args.commits_topic),
            ("metrics_topic", args.metrics_topic),
        )
        if value is not None
    }
    http = {"port": args.http_port} if args.http_port is not None else {}
    tables = merge_tables(settings.tables, [parse_table_spec(t) for t in args.table or []])
    return with_kubernetes(
        settings.model_copy(
            update={
                "stream": updated_section(settings.stream, stream),
                "kafka": updated_section(settings.kafka, kafka),
                "http": updated_section(settings.http, http),
                "tables": tables,
            }
        )
    )


class StopRequest:
    """SIGTERM or SIGINT, caught from before Spark starts until the job has stopped: a signal that lands while the
    job starts stops it gracefully once its query runs (a pod deleted during its start leaves as cleanly as a
    running one). A second SIGINT interrupts at once."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reason = "time"

    def catch(self) -> dict[int, Any]:
        """Make this request the handler of SIGTERM and SIGINT; returns the handlers it replaced. Called again once
        Spark runs: pyspark's SparkContext installs a SIGINT handler of its own, which raises KeyboardInterrupt."""
        return {sig: signal.signal(sig, self.on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}

    def on_signal(self, signum: int, _frame: object) -> None:
        if signum == signal.SIGINT and self.event.is_set():
            raise KeyboardInterrupt
        self.reason = signal.Signals(signum).name
        self.event.set()


@contextmanager
def stop_signals() -> Iterator[StopRequest]:
    """Catch SIGTERM and SIGINT into a StopRequest for the block; the handlers before are put back after it."""
    request = StopRequest()
    previous = request.catch()
    try:
        yield request
    finally:
        for sig, handler_before in previous.items():
            signal.signal(sig, handler_before)


def run_until_signal(
    query: Any,
    handler: Any,
    seconds: float | None,
    tick: Callable[[], None],
    stop: StopRequest,
    batches: BatchLog | None = None,
) -> str:
    """Serve until `stop` is requested (or `seconds`), then stop gracefully; returns why it stopped. Each finished
    micro-batch's timings are logged once (into `batches`, which `/status` shows, when given)."""
    from jobs.autorecluster import stop_gracefully
    from jobs.batch_timings import BatchLog

    batches = batches if batches is not None else BatchLog()
    deadline = None if seconds is None else time.monotonic() + seconds
    while query.isActive and not stop.event.is_set():
        query.awaitTermination(0.5)
        tick()
        batches.poll(query, handler.last_batch_time)
        if deadline is not None and time.monotonic() >= deadline:
            break
    if not query.isActive:
        error = query.exception()
        raise TableError(f"streaming query stopped: {error}" if error else "streaming query stopped")
    stop_gracefully(query, handler)
    return stop.reason


def start_http(settings: Settings) -> HealthServer | None:
    """The /healthz, /readyz, /metrics and /status server when `http.port` is set; bound before Spark starts
    so a taken port fails fast."""
    if settings.http.port is None:
        return None
    from jobs.health import HealthServer

    try:
        return HealthServer(settings.http).start()
    except OSError as error:
        raise UsageError(f"cannot serve HTTP on {settings.http.host}:{settings.http.port}: {error.strerror}") from None


def cmd_watch(args: argparse.Namespace) -> int:
    from jobs.autorecluster import check_checkpoint_location, start_job
    from recluster.engine.table_names import resolve_configured_tables
    from recluster.spark.session import spark_session

    settings = stream_settings(args)
    if not settings.tables and settings.stream.source != "kafka" and not settings.discovery.enabled:
        raise UsageError(
            "no tables to watch: pass --table URI[:col1,col2], list tables in --config or configure discovery"
        )
    if settings.stream.source == "kafka" or settings.kafka.metrics_topic:
        check_kafka(settings.kafka)  # a wrong password or an untrusted certificate: one line, nothing started
    check_checkpoint_location(settings.stream.checkpoint_location)  # before Spark starts: one clear line
    with stop_signals() as stop:
        server = start_http(settings)
        try:
            prepare_event_log_dir(settings)
            spark = spark_session(settings.spark, settings.self_optimizing.groups)
            stop.catch()
            settings = resolve_configured_tables(spark, settings)  # tables named db.table: at their location
            query, handler = start_job(spark, settings, settings.tables)
            if server is not None:
                server.attach(query, handler)
            where = f"; http on port {server.port}" if server is not None else ""
            found = " and the tables discovery finds" if settings.discovery.enabled else ""
            checkpoint = settings.stream.checkpoint_location
            print(f"watching {len(settings.tables)} table(s){found}; checkpoint {checkpoint}{where}", file=sys.stderr)
            batches = server.probe.batches if server is not None else None
            reason = run_until_signal(query, handler, args.seconds, handler.tick, stop, batches)
        finally:
            if server is not None:
                server.stop()
    print(f"stopped ({reason}); the checkpoint holds the position for a restart", file=sys.stderr)
    if args.json:
        print_json({uri: str(status) for uri, status in handler.status.items()})
    return 0
