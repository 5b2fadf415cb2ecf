"""The `recluster` command line. Bad input is one clear line on stderr and a non-zero exit."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.table import Table

from recluster.core.errors import TableError
from recluster.core.keys import parse_columns
from recluster.core.metrics import ClusteringMetrics
from recluster.core.sql import SqlError
from recluster.engine.api import TableInfo, table_info
from recluster.engine.k8s import prepare_event_log_dir, with_kubernetes
from recluster.engine.rounds import ReclusterResult
from recluster.settings import (
    CLUSTER_BY_PROPERTY,
    Settings,
    SettingsError,
    TableSettings,
    describe_validation_error,
    load_settings,
)

if TYPE_CHECKING:
    from jobs.health import HealthServer

SectionT = TypeVar("SectionT", bound=BaseModel)

EXIT_ERROR = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """Bad command-line input that argparse itself cannot catch."""


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse whose errors are one line, like every other error of the command line."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"recluster: error: {message} (see {self.prog} --help)\n")


def _parse_partition(values: Sequence[str] | None) -> dict[str, str]:
    partition = {}
    for item in values or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--partition {item!r} is not of the form column=value")
        partition[name] = value
    return partition


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(args.config, args.set or [])


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _metrics_row(name: str, m: ClusteringMetrics) -> list[str]:
    return [
        name,
        f"{m.total_block_count:,}",
        f"{m.total_rows:,}",
        f"{m.total_bytes / 1e6:,.1f}",
        f"{m.average_depth:.3f}",
        str(m.p95_depth),
        str(m.p99_depth),
        f"{m.average_overlaps:.2f}",
        str(m.constant_block_count),
        str(m.unclustered_block_count),
    ]


def render_info(result: TableInfo, console: Console) -> None:
    snapshot, info = result.snapshot, result.info
    console.print(
        f"[bold]{snapshot.uri}[/bold]  version {snapshot.version}  key ({snapshot.key})  "
        f"fingerprint {snapshot.key.fingerprint}"
    )
    grid = Table(show_edge=False)
    for header in ("", "blocks", "rows", "MB", "depth", "p95", "p99", "overlaps", "const", "unclust"):
        grid.add_column(header, justify="left" if not header else "right", no_wrap=True)
    grid.add_row(*_metrics_row("table", info.table), style="bold")
    for level, metrics in info.levels.items():
        grid.add_row(*_metrics_row(f"level {level}", metrics))
    console.print(grid)
    histogram = info.table.block_depth_histogram
    if histogram:
        console.print("depth histogram (blocks per depth bucket)")
        widest = max(histogram.values())
        for bucket, count in histogram.items():
            bar = "█" * max(1, round(40 * count / widest))
            console.print(f"  {bucket} {bar} {count}")


def cmd_info(args: argparse.Namespace) -> int:
    result = table_info(
        args.table,
        settings=_settings(args),
        cluster_by=parse_columns(args.cluster_by) if args.cluster_by else None,
        partition=_parse_partition(args.partition),
    )
    if args.json:
        print_json(result.to_dict())
    else:
        render_info(result, Console())
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    return _recluster(
        args.table,
        settings=_settings(args),
        cluster_by=parse_columns(args.cluster_by) if args.cluster_by else None,
        final=args.final,
        where=args.where,
        limit=args.limit,
        dry_run=args.dry_run,
        as_json=args.json,
        policy=args.policy,
        beta=args.beta,
    )


def _recluster(
    uri: str,
    *,
    settings: Settings,
    cluster_by: list[str] | None,
    final: bool,
    where: str | None,
    limit: int | None,
    dry_run: bool,
    as_json: bool,
    where_offset: int = 0,
    policy: str | None = None,
    beta: float | None = None,
) -> int:
    from recluster.core.sql import parse_predicate
    from recluster.engine.rounds import recluster_table, snapshot_loader
    from recluster.spark.session import spark_session

    if limit is not None and limit < 1:
        raise UsageError("--limit must be a positive number of files")
    if beta is not None and not beta > 0:
        raise UsageError(f"--beta must be a positive number (got {beta:g})")
    loader = snapshot_loader(uri, settings, cluster_by)
    block_filter = None
    if where:
        block_filter = parse_predicate(where, loader.key, loader.partition_columns, where_offset).may_match
    console = Console(stderr=True)
    with console.status("reclustering", spinner="dots") as status:

        def progress(event: str, fields: dict[str, Any]) -> None:
            status.update(f"reclustering: {event} " + " ".join(f"{k}={v}" for k, v in fields.items()))

        result = recluster_table(
            uri,
            loader,
            settings=settings,
            spark_factory=lambda: spark_session(settings.spark),
            final=final,
            block_filter=block_filter,
            file_limit=limit,
            dry_run=dry_run,
            progress=progress if console.is_terminal else None,
            policy=policy,
            beta=beta,
        )
    if as_json:
        print_json(result.to_dict())
    else:
        render_result(result, Console())
    return 0 if result.failures == 0 else EXIT_ERROR


def render_result(result: ReclusterResult, out: Console) -> None:
    if result.stop_reason == "dry_run" or not result.rounds:
        for plan in result.plans:
            out.print(str(plan), markup=False, highlight=False)
    out.print(
        f"rounds={result.rounds} tasks={result.tasks} files -{result.files_removed} +{result.files_added} "
        f"read={result.bytes_read / 1e6:.1f}MB written={result.bytes_written / 1e6:.1f}MB "
        f"rows={result.rows_rewritten:,} conflicts={result.conflicts} policy={result.policy} "
        f"stop={result.stop_reason} "
        f"({result.seconds:.1f}s)",
        markup=False,
        highlight=False,
    )
    out.print(
        f"average_depth {result.before.table.average_depth:.3f} -> {result.after.table.average_depth:.3f}, "
        f"p99_depth {result.before.table.p99_depth} -> {result.after.table.p99_depth}",
        highlight=False,
    )


def cmd_sql(args: argparse.Namespace) -> int:
    from recluster.core.keys import format_columns
    from recluster.core.sql import ClusterByStatement, parse_statement
    from recluster.delta.commit import set_table_properties
    from recluster.delta.snapshot import open_table, resolve_cluster_key
    from recluster.delta.storage import require_safe_commits
    from recluster.engine.api import storage_options_for

    statement = parse_statement(args.statement)
    settings = _settings(args)
    options = storage_options_for(settings, statement.table)
    try:
        table = open_table(statement.table, options)
    except TableError:
        if statement.if_exists:
            print(f"table {statement.table} does not exist; nothing to do (IF EXISTS)", file=sys.stderr)
            return 0
        raise
    if isinstance(statement, ClusterByStatement):
        key = resolve_cluster_key(table, statement.columns, statement.table)
        require_safe_commits(statement.table, options, settings.commit.allow_unsafe_single_writer)
        set_table_properties(statement.table, {CLUSTER_BY_PROPERTY: format_columns(key.names)}, options)
        summary = {"table": statement.table, "cluster_by": list(key.names), "fingerprint": key.fingerprint}
        if args.json:
            print_json(summary)
        else:
            print(
                f"cluster key of {statement.table} is now ({key}), fingerprint {key.fingerprint}; files sorted "
                f"by an older key are left alone until `recluster run --final`"
            )
        return 0
    return _recluster(
        statement.table,
        settings=settings,
        cluster_by=None,
        final=statement.final,
        where=statement.where,
        limit=statement.limit,
        dry_run=args.dry_run,
        as_json=args.json,
        where_offset=statement.where_offset,
    )


def parse_table_spec(spec: str) -> TableSettings:
    """`URI[:col1,col2]`; a colon followed by a path (s3://...) belongs to the URI."""
    uri, sep, columns = spec.rpartition(":")
    if sep and uri and "/" not in columns and columns:
        return TableSettings(uri=uri, cluster_by=parse_columns(columns))
    return TableSettings(uri=spec)


def _merge_tables(configured: Sequence[TableSettings], given: Sequence[TableSettings]) -> list[TableSettings]:
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


def _stream_settings(args: argparse.Namespace) -> Settings:
    settings = _settings(args)
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
    tables = _merge_tables(settings.tables, [parse_table_spec(t) for t in args.table or []])
    return with_kubernetes(
        settings.model_copy(
            update={
                "stream": _updated(settings.stream, stream),
                "kafka": _updated(settings.kafka, kafka),
                "http": _updated(settings.http, http),
                "tables": tables,
            }
        )
    )


def _updated(section: SectionT, values: Mapping[str, Any]) -> SectionT:
    """A settings section with command-line values, validated like every other source."""
    try:
        return type(section).model_validate({**section.model_dump(), **values})
    except ValidationError as error:
        raise SettingsError(describe_validation_error(error)) from None


def _run_until_signal(query: Any, handler: Any, seconds: float | None, tick: Callable[[], None]) -> str:
    """Serve until SIGTERM/SIGINT (or `seconds`), then stop gracefully; returns why it stopped."""
    import signal
    import threading
    import time

    from jobs.autorecluster import stop_gracefully

    stop = threading.Event()
    reason = ["time"]

    def on_signal(signum: int, _frame: object) -> None:
        reason[0] = signal.Signals(signum).name
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    deadline = None if seconds is None else time.monotonic() + seconds
    try:
        while query.isActive and not stop.is_set():
            query.awaitTermination(0.5)
            tick()
            if deadline is not None and time.monotonic() >= deadline:
                break
        if not query.isActive:
            error = query.exception()
            raise TableError(f"streaming query stopped: {error}" if error else "streaming query stopped")
        stop_gracefully(query, handler)
    finally:
        for sig, handler_before in previous.items():
            signal.signal(sig, handler_before)
    return reason[0]


def _start_http(settings: Settings) -> HealthServer | None:
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
    from recluster.spark.session import spark_session

    settings = _stream_settings(args)
    if not settings.tables and settings.stream.source != "kafka":
        raise UsageError("no tables to watch: pass --table URI[:col1,col2] or list tables in --config")
    check_checkpoint_location(settings.stream.checkpoint_location)  # before Spark starts: one clear line
    server = _start_http(settings)
    try:
        prepare_event_log_dir(settings)
        spark = spark_session(settings.spark, settings.self_optimizing.groups)
        query, handler = start_job(spark, settings, settings.tables)
        if server is not None:
            server.attach(query, handler)
        where = f"; http on port {server.port}" if server is not None else ""
        print(
            f"watching {len(settings.tables)} table(s); checkpoint {settings.stream.checkpoint_location}{where}",
            file=sys.stderr,
        )
        reason = _run_until_signal(query, handler, args.seconds, tick=handler.tick)
    finally:
        if server is not None:
            server.stop()
    print(f"stopped ({reason}); the checkpoint holds the position for a restart", file=sys.stderr)
    if args.json:
        print_json({uri: str(status) for uri, status in handler.status.items()})
    return 0


def cmd_publish_commits(args: argparse.Namespace) -> int:
    """Tail Delta logs and publish one commit event per new version, for writers that cannot."""
    import threading

    from recluster.delta.log import read_commits
    from recluster.delta.storage import normalize_uri
    from recluster.engine.api import storage_options_for
    from recluster.engine.publish import BufferedPublisher, commit_event_json
    from triggers.delta_log import newest_version, table_version

    settings = _settings(args)
    kafka = _updated(settings.kafka, {"bootstrap_servers": args.bootstrap_servers} if args.bootstrap_servers else {})
    topic = args.topic or kafka.commits_topic
    tables = [normalize_uri(t) for t in args.table]
    options = {t: dict(storage_options_for(settings, t)) for t in tables}
    start = {t: table_version(t, options[t]) for t in tables}
    positions = {t: -1 if args.from_version == "earliest" or v is None else v for t, v in start.items()}
    publisher = BufferedPublisher(kafka, topic)
    stop = threading.Event()
    published = [0]

    def tick() -> None:
        for table in tables:
            newest = newest_version(table, positions[table], 1000, options[table])
            if newest <= positions[table]:
                continue
            commits = read_commits(table, positions[table] + 1, newest, options[table])
            events = [(table, commit_event_json(table, c.version, c.operation, c.timestamp)) for c in commits]
            publisher.publish(events)
            published[0] += len(events)
            positions[table] = newest
            logging.getLogger("recluster.engine.publish").info("published table=%s versions<=%d", table, newest)

    _serve(stop, args.seconds, args.interval, tick)
    publisher.close()
    result = {"published": published[0], "buffered": len(publisher.buffer), "dropped": publisher.dropped}
    if args.json:
        print_json(result)
    else:
        print(
            f"published {result['published']} commit events to {topic}; {result['buffered']} buffered", file=sys.stderr
        )
    return 0


def _serve(stop: Any, seconds: float | None, interval: float, tick: Callable[[], None]) -> None:
    """Call `tick` every `interval` seconds until SIGTERM/SIGINT or `seconds` elapse."""
    import signal
    import time

    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    deadline = None if seconds is None else time.monotonic() + seconds
    try:
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            tick()
            stop.wait(interval)
    finally:
        for sig, before in previous.items():
            signal.signal(sig, before)


def cmd_metrics_tail(args: argparse.Namespace) -> int:
    """Print the metrics topic: one JSON line per record with --json, else a live table per table."""
    import contextlib
    import threading

    from kafka import TopicPartition
    from rich.live import Live

    from recluster.engine.publish import MetricsRecord
    from triggers.kafka_commits import consumer

    settings = _settings(args)
    topic = args.topic or settings.kafka.metrics_topic
    if not topic:
        raise UsageError("no metrics topic: pass --topic or set kafka.metrics_topic")
    client = consumer(args.bootstrap_servers or settings.kafka.bootstrap_servers, settings.kafka.client_options)
    partitions = [TopicPartition(topic, p) for p in sorted(client.partitions_for_topic(topic) or [])]
    if not partitions:
        client.close()
        raise UsageError(f"topic {topic} does not exist (yet)")
    client.assign(partitions)
    if args.from_beginning:
        client.seek_to_beginning(*partitions)
    else:
        client.seek_to_end(*partitions)
    latest: dict[str, MetricsRecord] = {}
    live = None if args.json else Live(console=Console(), auto_refresh=False)

    def tick() -> None:
        for records in client.poll(timeout_ms=500).values():
            for record in records:
                if args.json:
                    print(record.value.decode("utf-8"), flush=True)
                else:
                    parsed = MetricsRecord.model_validate_json(record.value)
                    latest[parsed.table] = parsed
        if live is not None:
            live.update(render_metrics(latest), refresh=True)

    with live if live is not None else contextlib.nullcontext():
        _serve(threading.Event(), args.seconds, 0.0, tick)
    client.close()
    return 0


def render_metrics(latest: Mapping[str, Any]) -> Table:
    grid = Table(title="recluster metrics", show_edge=False)
    for header in (
        "table",
        "version",
        "depth",
        "p99",
        "levels blocks/depth/threshold",
        "tasks",
        "written MB",
        "errors",
    ):
        grid.add_column(header, no_wrap=True)
    for table, record in sorted(latest.items()):
        levels = " ".join(
            f"L{lv.level}={lv.metrics.total_block_count}/{lv.metrics.average_depth:.2f}/{lv.threshold:.1f}"
            for lv in record.levels
        )
        grid.add_row(
            table,
            str(record.version),
            f"{record.table_metrics.average_depth:.3f}",
            str(record.table_metrics.p99_depth),
            levels,
            str(record.actions.tasks),
            f"{record.actions.bytes_written / 1e6:.1f}",
            str(len(record.errors) + record.skipped_events),
        )
    return grid


def cmd_clean(args: argparse.Namespace) -> int:
    """Delete the outputs of rewrites that never committed (see recluster/delta/maintenance.py for the rules)."""
    from recluster.delta.maintenance import clean_orphans
    from recluster.engine.api import storage_options_for

    if args.safety_age_hours < 0:
        raise UsageError("--safety-age-hours must not be negative")
    settings = _settings(args)
    result = clean_orphans(
        args.table,
        safety_age_seconds=args.safety_age_hours * 3600,
        storage_options=storage_options_for(settings, args.table),
        dry_run=args.dry_run,
    )
    if args.json:
        print_json(result.to_dict())
        return 0
    verb = "deleted" if result.deleted else "would delete"
    for orphan in result.orphans:
        print(f"{verb} {orphan.path} ({orphan.bytes:,} bytes, {orphan.age_seconds / 3600:.1f} h old)")
    total = sum(o.bytes for o in result.orphans)
    print(
        f"{verb} {len(result.orphans)} orphan file(s), {total:,} bytes; {result.referenced} files referenced by "
        f"versions {result.oldest_version}..{result.latest_version} kept"
    )
    return 0


def cmd_optimize(args: argparse.Namespace) -> int:
    """Self-optimize a table now: the given type, or whatever its triggers say is due."""
    from recluster.core.optimizing import ProcessType
    from recluster.engine.optimizer import history_store, optimize_table
    from recluster.engine.rounds import snapshot_loader
    from recluster.spark.session import spark_session

    settings = _settings(args)
    loader = snapshot_loader(args.table, settings, parse_columns(args.cluster_by) if args.cluster_by else None)
    with Console(stderr=True).status("optimizing", spinner="dots"):
        result = optimize_table(
            loader,
            settings=settings,
            spark_factory=lambda: spark_session(settings.spark, settings.self_optimizing.groups),
            kind=ProcessType(args.type) if args.type else None,
            dry_run=args.dry_run,
            history=None if args.dry_run else history_store(settings),
        )
    if args.json:
        print_json(result.to_dict())
        return 0 if result.totals.failures == 0 else EXIT_ERROR
    if result.plan is not None and (args.dry_run or result.totals.tasks == 0):
        print(result.plan)
    kind = result.type or "nothing"
    print(
        f"{result.outcome}: {kind} ({result.reason}); tasks={result.totals.tasks} "
        f"files {result.totals.files_removed} -> {result.totals.files_added}, "
        f"bytes read {result.totals.bytes_read:,} written {result.totals.bytes_written:,}, "
        f"conflicts={result.totals.conflicts} failures={result.totals.failures}; "
        f"fragments {result.before.fragments} -> {result.after.fragments}"
    )
    return 0 if result.totals.failures == 0 else EXIT_ERROR


def cmd_status(args: argparse.Namespace) -> int:
    """Per table: state, pending work, group, quota and occupation, last process times, health."""
    from recluster.engine.api import read_snapshot
    from recluster.engine.optimizer import history_store, table_status

    settings = _settings(args)
    uris = args.table or [t.uri for t in settings.tables]
    if not uris:
        raise UsageError("no tables: pass TABLE_URI arguments or list tables in --config")
    history = history_store(settings)
    reports = [table_status(read_snapshot(uri, settings=settings), settings=settings, history=history) for uri in uris]
    if args.json:
        print_json([r.to_dict() for r in reports])
        return 0
    table = Table(
        "table",
        "state",
        "pending",
        "group",
        "quota",
        "occupation",
        "last minor/major/full/recluster",
        "fragments",
        "small-file",
        "depth",
    )
    for report in reports:
        data = report.to_dict()
        last = "/".join(
            str(data["last"].get(k, "-"))[5:16].replace("T", " ") or "-"
            for k in ("minor", "major", "full", "recluster")
        )
        pending = data["pending"] or ("recluster" if data["recluster_pending"] else "-")
        table.add_row(
            report.table,
            str(report.state),
            pending,
            report.config.group,
            f"{report.config.quota:g}",
            f"{report.occupation:.0%}",
            last,
            str(report.health.fragments),
            f"{report.health.small_file_pressure:.0%}",
            f"{report.average_depth:.2f}",
        )
    Console().print(table)
    return 0


def cmd_maintain(args: argparse.Namespace) -> int:
    """Vacuum, checkpoint, log cleanup and orphan cleanup of one table now (the job does it on a schedule)."""
    from recluster.delta.maintenance import maintain_table
    from recluster.engine.api import storage_options_for

    settings = _settings(args)
    result = maintain_table(
        args.table,
        settings.self_optimizing.maintenance,
        storage_options=storage_options_for(settings, args.table),
        dry_run=args.dry_run,
    )
    if args.json:
        print_json(result.to_dict())
        return 0
    verb = "would delete" if result.dry_run else "deleted"
    checkpoint = "not needed" if result.checkpoint_version is None else f"version {result.checkpoint_version}"
    print(
        f"{verb} {len(result.vacuumed)} expired file(s) (retention {result.retention_hours:g} h) and "
        f"{len(result.orphans.orphans)} orphan(s); checkpoint: {checkpoint}; "
        f"log cleanup: {'done' if result.log_cleaned else 'skipped'}"
    )
    return 0


def cmd_metrics_schema(args: argparse.Namespace) -> int:
    from recluster.engine.publish import MetricsRecord

    print_json(MetricsRecord.model_json_schema())
    return 0


def render_status(status: Any, batches: int, seconds: float) -> Table:
    grid = Table(title=f"recluster demo  {seconds:5.0f}s  appends={batches}", show_edge=False)
    for header in ("level", "blocks", "avg depth", "threshold"):
        grid.add_column(header, justify="right")
    if status is None:
        grid.add_row("-", "waiting for the first micro-batch", "", "")
        return grid
    for level in status.levels:
        grid.add_row(str(level.level), str(level.blocks), f"{level.average_depth:.2f}", f"{level.threshold:.1f}")
    grid.caption = (
        f"table depth {status.average_depth:.2f}  merges {status.tasks}  "
        f"written {status.bytes_written / 1e6:.1f} MB / appended {status.bytes_appended / 1e6:.1f} MB"
        + (f"  error: {status.error}" if status.error else "")
    )
    return grid


def cmd_demo(args: argparse.Namespace) -> int:
    import shutil
    import threading
    import time

    import numpy as np
    from rich.live import Live

    from jobs.autorecluster import start_job
    from recluster.engine.demo import append_demo_batch
    from recluster.spark.session import spark_session

    if args.rows < 1 or args.target_rows < 1 or args.seconds <= 0 or args.interval <= 0:
        raise UsageError("--rows and --target-rows must be positive numbers, --seconds and --interval above 0")
    root = Path(args.path)
    table, checkpoint = root / "events", root / "checkpoint"
    shutil.rmtree(root, ignore_errors=True)
    rng = np.random.default_rng(args.seed)
    append_demo_batch(table, rng, args.rows, 0)
    base = _settings(args)
    settings = base.model_copy(
        update={
            "clustering": base.clustering.model_copy(update={"target_rows": args.target_rows}),
            "stream": base.stream.model_copy(
                update={"checkpoint_location": str(checkpoint), "starting_version": "earliest"}
            ),
            "tables": [TableSettings(uri=str(table))],
        }
    )
    console = Console(stderr=True)
    console.print(f"demo table {table}: appending {args.rows:,} random-key rows every {args.interval}s")
    spark = spark_session(settings.spark)
    query, handler = start_job(spark, settings, settings.tables)
    appended = [1]
    stop_writer = threading.Event()

    def writer() -> None:
        while not stop_writer.wait(args.interval):
            append_demo_batch(table, rng, args.rows, appended[0])
            appended[0] += 1

    thread = threading.Thread(target=writer, name="demo-writer", daemon=True)
    started = time.monotonic()
    thread.start()
    with Live(console=console, auto_refresh=False, transient=not console.is_terminal) as live:

        def tick() -> None:
            status = handler.status.get(str(table))
            live.update(render_status(status, appended[0], time.monotonic() - started), refresh=True)

        try:
            _run_until_signal(query, handler, args.seconds, tick)
        finally:
            stop_writer.set()
            thread.join()
    result = table_info(str(table), settings=settings)
    status = handler.status.get(str(table))
    summary: dict[str, Any] = {
        "appends": appended[0],
        "rows": result.info.table.total_rows,
        "merges": status.tasks if status else 0,
        "bytes_appended": status.bytes_appended if status else 0,
        "bytes_written": status.bytes_written if status else 0,
        "info": result.to_dict(),
    }
    if args.json:
        print_json(summary)
    else:
        render_info(result, Console())
        appended_bytes = max(summary["bytes_appended"], 1)
        Console().print(
            f"{summary['appends']} appends, {summary['merges']} merges, write amplification "
            f"{summary['bytes_written'] / appended_bytes:.2f} (bytes rewritten / bytes appended)"
        )
    return 0


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="YAML settings file")
    parser.add_argument(
        "--set",
        action="append",
        metavar="SECTION.FIELD=VALUE",
        help="override one setting, e.g. --set clustering.depth_ratio=0.2 (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object for scripts")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="recluster",
        description="Keep Delta Lake tables clustered by a key while they keep receiving writes.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    info = commands.add_parser(
        "info",
        help="how well a table is clustered (depth, overlaps, histogram; per level)",
        description="Clustering information of a Delta table by its cluster key (DESIGN §4 metrics).",
    )
    info.add_argument("table", metavar="TABLE_URI", help="table path, file:// or object-store URI")
    info.add_argument("--cluster-by", metavar="COL1,COL2", help="key columns (default: table property)")
    info.add_argument("--partition", action="append", metavar="COLUMN=VALUE", help="only this partition (repeatable)")
    _common(info)
    info.set_defaults(handler=cmd_info)

    run = commands.add_parser(
        "run",
        help="recluster a table now: one round, or --final until fully clustered",
        description="Plan, merge (Spark) and commit recluster rounds on a Delta table.",
    )
    run.add_argument("table", metavar="TABLE_URI")
    run.add_argument("--cluster-by", metavar="COL1,COL2", help="key columns (default: table property)")
    run.add_argument("--final", action="store_true", help="repeat rounds until the table is fully clustered")
    run.add_argument("--where", metavar="EXPR", help="only files whose key/partition stats may match EXPR")
    run.add_argument("--limit", type=int, metavar="N", help="rewrite at most N files in this run")
    run.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    run.add_argument(
        "--policy",
        choices=["levels", "absorb"],
        help="selection policy for this run (default: table property recluster.policy, else selection.policy)",
    )
    run.add_argument(
        "--beta",
        type=float,
        metavar="B",
        help="absorb: a run absorbs the newer runs once they hold B x its overlapped rows (selection.beta)",
    )
    _common(run)
    run.set_defaults(handler=cmd_run)

    sql = commands.add_parser(
        "sql",
        help="run a statement: ALTER TABLE t RECLUSTER [FINAL] [WHERE c] [LIMIT n] | CLUSTER BY (a, b)",
        description=(
            "Statements: ALTER TABLE [IF EXISTS] t RECLUSTER [FINAL] [WHERE cond] [LIMIT n]; "
            "OPTIMIZE TABLE t RECLUSTER (a FINAL recluster); ALTER TABLE t CLUSTER BY (a, b). "
            "t is delta.`URI` or a quoted path. WHERE chooses candidate files by their key/partition stats."
        ),
    )
    sql.add_argument("statement", metavar="STATEMENT")
    sql.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    _common(sql)
    sql.set_defaults(handler=cmd_sql)

    watch = commands.add_parser(
        "watch",
        help="run the streaming job: react to commits and keep tables clustered until SIGTERM/Ctrl-C",
        description="Structured Streaming over the tables' Delta logs; foreachBatch plans and runs bounded merges.",
    )
    watch.add_argument(
        "--table", action="append", metavar="URI[:COL1,COL2]", help="table to watch, optionally with its key"
    )
    watch.add_argument("--checkpoint", metavar="DIR", help="checkpoint location (stream.checkpoint_location)")
    watch.add_argument("--trigger-seconds", type=float, help="micro-batch interval (stream.trigger_interval_seconds)")
    watch.add_argument("--starting-version", help="latest, earliest or a version number (first start only)")
    watch.add_argument("--seconds", type=float, help="stop after this many seconds (default: run until a signal)")
    watch.add_argument("--source", choices=["delta-log", "kafka"], help="commit trigger (stream.source)")
    watch.add_argument("--bootstrap-servers", metavar="HOST:PORT", help="Kafka brokers (kafka.bootstrap_servers)")
    watch.add_argument("--commits-topic", metavar="TOPIC", help="commit events topic (kafka.commits_topic)")
    watch.add_argument("--metrics-topic", metavar="TOPIC", help="publish metrics records here (kafka.metrics_topic)")
    watch.add_argument(
        "--http-port",
        type=int,
        metavar="PORT",
        help="serve /healthz, /readyz, /metrics and /status on this port (http.port; 0: any free port)",
    )
    _common(watch)
    watch.set_defaults(handler=cmd_watch)

    publish = commands.add_parser(
        "publish-commits",
        help="tail Delta logs and publish commit events to Kafka (for writers that cannot publish)",
        description="Publishes {table, version, operation, timestamp} for every new version of the tables.",
    )
    publish.add_argument("--table", action="append", required=True, metavar="URI", help="table to tail (repeatable)")
    publish.add_argument("--bootstrap-servers", metavar="HOST:PORT", help="Kafka brokers (kafka.bootstrap_servers)")
    publish.add_argument("--topic", help="commit events topic (default: kafka.commits_topic)")
    publish.add_argument("--from-version", choices=["latest", "earliest"], default="latest")
    publish.add_argument("--interval", type=float, default=1.0, help="seconds between polls of the logs")
    publish.add_argument("--seconds", type=float, help="stop after this many seconds (default: until a signal)")
    _common(publish)
    publish.set_defaults(handler=cmd_publish_commits)

    metrics = commands.add_parser("metrics", help="read the metrics topic").add_subparsers(
        dest="metrics_command", required=True, metavar="COMMAND"
    )
    tail = metrics.add_parser("tail", help="print metrics records as a live table (or JSON lines with --json)")
    tail.add_argument("--bootstrap-servers", metavar="HOST:PORT")
    tail.add_argument("--topic", help="default: kafka.metrics_topic")
    tail.add_argument("--from-beginning", action="store_true")
    tail.add_argument("--seconds", type=float, help="stop after this many seconds (default: until a signal)")
    _common(tail)
    tail.set_defaults(handler=cmd_metrics_tail)

    clean = commands.add_parser(
        "clean",
        help="delete outputs of rewrites that never committed (orphans); never a reachable file",
        description=(
            "Deletes only files named as recluster writes them, older than --safety-age-hours, and referenced by "
            "no version still in the Delta log (time travel keeps working)."
        ),
    )
    clean.add_argument("table", metavar="TABLE_URI")
    clean.add_argument("--safety-age-hours", type=float, default=24.0, help="only files older than this (default 24)")
    clean.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    _common(clean)
    clean.set_defaults(handler=cmd_clean)

    optimize = commands.add_parser(
        "optimize",
        help="self-optimize a table now: minor (compact fragments), major (undersized segments) or full",
        description=(
            "Without --type runs whatever the table's self-optimizing.* triggers say is due. Outputs are sorted "
            "by the cluster key; every task commits atomically and is recorded in the history table."
        ),
    )
    optimize.add_argument("table", metavar="TABLE_URI")
    optimize.add_argument("--type", choices=["minor", "major", "full"], help="the process to run (default: due one)")
    optimize.add_argument("--cluster-by", metavar="COL1,COL2", help="key columns (default: table property)")
    optimize.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    _common(optimize)
    optimize.set_defaults(handler=cmd_optimize)

    status = commands.add_parser(
        "status",
        help="per table: state, pending work, group, quota occupation, last optimize times, health",
        description="Reads the tables' snapshots and the history table (self_optimizing.history_location).",
    )
    status.add_argument("table", nargs="*", metavar="TABLE_URI", help="tables (default: the configured tables)")
    _common(status)
    status.set_defaults(handler=cmd_status)

    maintain = commands.add_parser(
        "maintain",
        help="vacuum expired files, checkpoint, clean the log and orphans of a table now",
        description=(
            "Vacuum never uses a retention below the table's delta.deletedFileRetentionDuration; orphan cleanup "
            "follows the rules of `recluster clean`. Settings: self_optimizing.maintenance.*"
        ),
    )
    maintain.add_argument("table", metavar="TABLE_URI")
    maintain.add_argument("--dry-run", action="store_true", help="list what would be deleted, change nothing")
    _common(maintain)
    maintain.set_defaults(handler=cmd_maintain)

    schema = commands.add_parser("metrics-schema", help="print the JSON Schema of a metrics record")
    schema.set_defaults(handler=cmd_metrics_schema, verbose=False)

    demo = commands.add_parser(
        "demo",
        help="live demo: a local table receives random-key appends while the job keeps it clustered",
        description=(
            "Creates a demo table, appends a batch of random keys every --interval seconds, runs the streaming "
            "job on it and shows the levels live; stops after --seconds or Ctrl-C with a summary."
        ),
    )
    demo.add_argument("--path", default="recluster-demo", help="folder for the demo table and checkpoint")
    demo.add_argument("--seconds", type=float, default=60, help="how long to run")
    demo.add_argument("--interval", type=float, default=1.0, help="seconds between appends")
    demo.add_argument("--rows", type=int, default=20_000, help="rows per append")
    demo.add_argument("--target-rows", type=int, default=100_000, help="rows per reclustered file")
    demo.add_argument("--seed", type=int, default=7)
    _common(demo)
    demo.set_defaults(handler=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.handler(args))
    except (SettingsError, UsageError, SqlError) as error:
        print(f"recluster: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except TableError as error:
        print(f"recluster: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("recluster: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
