"""The long-running job: Delta commits stream in, `foreachBatch` keeps tables clustered (DESIGN §7).

Only wiring lives here: the trigger source, the per-table incremental state, and the engine's selection,
merge and commit. Each micro-batch applies every commit's adds/removes to the table's per-level state
(initialised from the snapshot just before the first commit seen, so a restart rebuilds it from the log),
plans when a level's average depth exceeds its threshold, runs a bounded budget of merges, and logs one
key=value line per table. Our own rewrites come back through the log: they update the state but never
trigger work by themselves, so the job cannot feed itself.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from recluster.api import open_checked_table
from recluster.blocks import LEVEL_CONSTANT
from recluster.commit import PRODUCER, CommitOutcome, CommitStatus, OutcomeTotals
from recluster.metrics import ClusteringState
from recluster.publish import BatchActions, BufferedPublisher, MetricsRecord, metrics_record
from recluster.rounds import execute_plan, selection_bounds
from recluster.selection import MergeTask, Policy, ReclusterPlan, level_threshold, select_merge_tasks
from recluster.settings import Settings, SettingsError, TableSettings, table_storage_options
from recluster.table import (
    ClusterKey,
    TableError,
    TableSnapshot,
    blocks_from_log_adds,
    load_snapshot,
    normalize_uri,
)
from triggers.delta_log import LOG_GAP, SCHEMA, SOURCE_NAME, CommitRange, DeltaLogSource, commit_rows
from triggers.kafka_commits import SOURCE_NAME as KAFKA_SOURCE_NAME
from triggers.kafka_commits import KafkaCommitsSource

COMMIT_COLUMNS = tuple(column.split()[0] for column in SCHEMA.split(", "))

log = logging.getLogger("recluster.job")


@dataclass(frozen=True, slots=True)
class LevelStatus:
    level: int
    blocks: int
    average_depth: float
    threshold: float


@dataclass(frozen=True, slots=True)
class TableStatus:
    """What the job has done for one table: shown by `demo`, logged once per micro-batch.

    tasks, conflicts, failures and bytes are totals since the job started; depth and levels are the state
    at `version` (a batch's own merges show up in the next batch, when their commit comes back).
    """

    table: str
    version: int
    levels: tuple[LevelStatus, ...]
    average_depth: float
    tasks: int = 0
    conflicts: int = 0
    failures: int = 0
    bytes_written: int = 0
    bytes_appended: int = 0
    pending: bool = False
    error: str | None = None
    policy: str = Policy.LEVELS
    """The selection policy serving the table (settings, or its `recluster.policy` property)."""

    def __str__(self) -> str:
        levels = " ".join(f"L{s.level}={s.blocks}/{s.average_depth:.2f}/{s.threshold:.1f}" for s in self.levels)
        text = (
            f"recluster table={self.table} version={self.version} policy={self.policy} depth={self.average_depth:.3f} "
            f"levels[blocks/avg/threshold]=({levels}) tasks={self.tasks} conflicts={self.conflicts} "
            f"written={self.bytes_written} appended={self.bytes_appended} pending={self.pending}"
        )
        return text + (f" error={self.error!r}" if self.error else "")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready status, as served by the job's /status endpoint."""
        return {
            "table": self.table,
            "version": self.version,
            "policy": self.policy,
            "average_depth": self.average_depth,
            "levels": [
                {"level": s.level, "blocks": s.blocks, "average_depth": s.average_depth, "threshold": s.threshold}
                for s in self.levels
            ],
            "totals": {
                "merges": self.tasks,
                "conflicts": self.conflicts,
                "failures": self.failures,
                "bytes_written": self.bytes_written,
                "bytes_appended": self.bytes_appended,
            },
            "pending": self.pending,
            "error": self.error,
        }


@dataclass
class TrackedTable:
    """The job's view of one table: key, layout and the incremental clustering state at `version`."""

    uri: str
    key: ClusterKey
    partition_columns: tuple[str, ...]
    properties: dict[str, str]
    state: ClusteringState
    version: int
    data_schema: pa.Schema
    storage_options: dict[str, str]
    pending: bool = False
    totals: dict[str, int] = field(default_factory=dict)
    """Since the job started: tasks, conflicts, failures, bytes written and bytes appended (kept on reload)."""

    def snapshot(self) -> TableSnapshot:
        return TableSnapshot(
            self.uri,
            self.version,
            self.key,
            self.partition_columns,
            tuple(self.state.blocks),
            self.properties,
            self.data_schema,
            self.storage_options,
        )


class ReclusterHandler:
    """The `foreachBatch` function: commit events in, bounded recluster work out."""

    def __init__(self, settings: Settings, tables: Sequence[TableSettings], spark: Any) -> None:
        self.settings = settings
        self.configured = {normalize_uri(t.uri): t for t in tables}
        self.spark = spark
        self.tracked: dict[str, TrackedTable] = {}
        self.status: dict[str, TableStatus] = {}
        self.stopping = threading.Event()
        self.idle = threading.Event()
        self.idle.set()
        self.listeners: list[Callable[[TableStatus], None]] = []
        kafka = settings.kafka
        self.metrics = BufferedPublisher(kafka, kafka.metrics_topic) if kafka.metrics_topic else None
        self.skipped_events = 0
        self.last_batch_time: float | None = None
        """Wall-clock time (time.time()) the last micro-batch finished; None before the first one."""

    def options(self, uri: str) -> dict[str, str]:
        return dict(table_storage_options(self.settings, self.configured.get(uri)))

    def _track(self, uri: str, version: int | None) -> TrackedTable:
        """State at `version` (None: latest) from the snapshot; the key comes from config or the table."""
        table, key, options = open_checked_table(uri, settings=self.settings)
        if version is not None and version >= 0:
            table.load_as_version(version)
        snapshot = load_snapshot(table, key, uri=uri, storage_options=options)
        blocks = snapshot.blocks if version is None or version >= 0 else ()
        return TrackedTable(
            uri,
            key,
            snapshot.partition_columns,
            dict(snapshot.properties),
            ClusteringState(blocks),
            snapshot.version if version is None or version >= 0 else -1,
            snapshot.data_schema,
            dict(options),
        )

    def __call__(self, frame: Any, batch_id: int) -> None:
        self.idle.clear()
        try:
            rows = [r.asDict() for r in frame.collect()]
            if self.settings.stream.source == "kafka":
                rows = self._log_commits_for_events(rows)
            by_table: dict[str, list[dict[str, Any]]] = {}
            for row in sorted(rows, key=lambda r: (r["table"], r["version"])):
                by_table.setdefault(row["table"], []).append(row)
            records = [self._handle_table(uri, events) for uri, events in by_table.items()]
            for uri, tracked in list(self.tracked.items()):  # work left over from earlier batches
                if uri not in by_table and tracked.pending and not self.stopping.is_set():
                    records.append(self._guarded(uri, tracked.version, functools.partial(self._decide, tracked, False)))
            if self.metrics is not None:
                self.metrics.publish((r.table, r.model_dump_json()) for r in records if r is not None)
        finally:
            self.last_batch_time = time.time()
            self.idle.set()

    def _log_commits_for_events(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Kafka events only name (table, version): read the real commits from the Delta log, from the
        state's version up to the newest version announced. Duplicate, late or out-of-order events are
        harmless; malformed ones are counted, logged and skipped."""
        malformed = [e for e in events if e["error"]]
        for event in malformed:
            log.warning(
                "recluster reason=malformed_event partition=%s offset=%s error=%s",
                event["kafka_partition"],
                event["kafka_offset"],
                event["error"],
            )
        self.skipped_events = len(malformed)
        newest: dict[str, tuple[int, int]] = {}
        for event in events:
            if event["error"]:
                continue
            uri = normalize_uri(event["table"])
            if self.configured and uri not in self.configured:
                continue  # a job serves its configured tables; with none configured it serves every table
            low, high = newest.get(uri, (event["version"], event["version"]))
            newest[uri] = (min(low, event["version"]), max(high, event["version"]))
        rows: list[dict[str, Any]] = []
        for uri, (low, high) in newest.items():
            tracked = self.tracked.get(uri)
            first = tracked.version + 1 if tracked else low
            if high >= first:
                options = tuple(sorted(self.options(uri).items()))
                rows.extend(
                    dict(zip(COMMIT_COLUMNS, r, strict=True))
                    for r in commit_rows(CommitRange(uri, first, high, options))
                )
        return rows

    def _guarded(self, uri: str, version: int, work: Callable[[], MetricsRecord]) -> MetricsRecord | None:
        """Run one table's work; a table problem becomes that table's error status, never the job's end."""
        try:
            return work()
        except (TableError, SettingsError) as error:
            self.tracked.pop(uri, None)
            status = TableStatus(uri, version, (), 1.0, error=str(error))
            self._publish(status)
            log.error("recluster table=%s reason=table_error error=%s", uri, error)
            return None

    def _handle_table(self, uri: str, events: list[dict[str, Any]]) -> MetricsRecord | None:
        return self._guarded(uri, events[-1]["version"], lambda: self._apply_commits(uri, events))

    def _apply_commits(self, uri: str, events: list[dict[str, Any]]) -> MetricsRecord:
        tracked = self.tracked.get(uri)
        if tracked is None:
            tracked = self.tracked[uri] = self._initial_state(uri, events[0]["version"])
        fresh = [e for e in events if e["version"] > tracked.version]  # older: replayed after a restart
        foreign = [e for e in fresh if e["producer"] != PRODUCER]
        _add(tracked.totals, appended=sum(e["bytes_added"] or 0 for e in foreign))
        for event in fresh:
            if event["operation"] == LOG_GAP or event["metadata_changed"] or event["version"] != tracked.version + 1:
                if event["operation"] == LOG_GAP:
                    log.warning("recluster table=%s reason=log_gap version=%s: reloading", uri, event["version"])
                totals = tracked.totals
                tracked = self.tracked[uri] = self._track(uri, None)
                tracked.totals = totals
                break
            added = blocks_from_log_adds(
                json.loads(event["adds"]), tracked.key, tracked.partition_columns, uri, self.options(uri)
            )
            tracked.state.apply(added, event["removes"] or [])
            tracked.version = event["version"]
        return self._decide(tracked, bool(foreign))

    def _initial_state(self, uri: str, first_version: int) -> TrackedTable:
        """State just before the first commit this job sees; the latest if that version was cleaned up."""
        try:
            return self._track(uri, first_version - 1)
        except TableError:
            raise
        except Exception as error:  # delta-rs raises several kinds when an old version is gone
            log.warning(
                "recluster table=%s reason=version_gone version=%d error=%s: starting from the latest snapshot",
                uri,
                first_version - 1,
                error,
            )
            return self._track(uri, None)

    def _budgeted(self, plan: ReclusterPlan) -> tuple[ReclusterPlan, bool]:
        """The plan cut to the per-batch budget of tasks and bytes; True when work was left out."""
        stream = self.settings.stream
        chosen: list[MergeTask] = []
        spent = 0
        for task in plan.tasks:
            if len(chosen) >= stream.max_tasks_per_batch or (
                chosen and spent + task.bytes > stream.max_bytes_per_batch
            ):
                break
            chosen.append(task)
            spent += task.bytes
        return replace(plan, tasks=tuple(chosen)), len(chosen) < len(plan.tasks)

    def _decide(self, tracked: TrackedTable, foreign: bool) -> MetricsRecord:
        snapshot = tracked.snapshot()
        bounds = selection_bounds(self.settings, snapshot, None)
        started = time.monotonic()
        outcomes: list[CommitOutcome] = []
        batch = OutcomeTotals()
        pending = False
        beta = bounds.beta if bounds.policy is Policy.ABSORB else None
        if (foreign or tracked.pending) and not self.stopping.is_set():
            plan, pending = self._budgeted(select_merge_tasks(tracked.uri, tracked.version, snapshot.blocks, bounds))
            beta = plan.beta
            for outcome in execute_plan(self.spark, plan, snapshot, settings=self.settings, run_id=_run_id()):
                log.info("recluster table=%s %s %s", tracked.uri, outcome, outcome.task)
                batch.add(outcome)
                outcomes.append(outcome)
            pending = pending or batch.conflicts > 0
        tracked.pending = pending
        _add(
            tracked.totals,
            tasks=batch.tasks,
            written=batch.bytes_written,
            conflicts=batch.conflicts,
            failures=batch.failures,
        )
        info = tracked.state.info()
        levels = tuple(
            LevelStatus(level, m.total_block_count, m.average_depth, level_threshold(m.total_block_count, bounds))
            for level, m in info.levels.items()
            if level != LEVEL_CONSTANT
        )
        status = TableStatus(
            tracked.uri,
            tracked.version,
            levels,
            info.table.average_depth,
            tasks=tracked.totals.get("tasks", 0),
            conflicts=tracked.totals.get("conflicts", 0),
            failures=tracked.totals.get("failures", 0),
            bytes_written=tracked.totals.get("written", 0),
            bytes_appended=tracked.totals.get("appended", 0),
            pending=pending,
            policy=bounds.policy,
        )
        self._publish(status)
        log.info("%s", status)
        return metrics_record(
            tracked.uri,
            tracked.version,
            info,
            {s.level: s.threshold for s in levels},
            BatchActions(**vars(batch), duration_seconds=time.monotonic() - started),
            pending=pending,
            policy=str(bounds.policy),
            beta=beta,
            reasons=[str(o.task.reason) for o in outcomes],
            errors=[f"{o.status}: {o.reason}" for o in outcomes if o.status is not CommitStatus.COMMITTED],
            skipped_events=self.skipped_events,
        )

    def _publish(self, status: TableStatus) -> None:
        self.status[status.table] = status
        for listener in self.listeners:
            listener(status)


def _add(totals: dict[str, int], **amounts: int) -> None:
    for name, amount in amounts.items():
        totals[name] = totals.get(name, 0) + int(amount)


def _run_id() -> str:
    from recluster.blocks import new_run_id

    return new_run_id()


def check_checkpoint_location(location: str) -> None:
    """Fail fast, with one clear line, when the checkpoint cannot be written."""
    if "://" in location and not location.startswith("file://"):
        return
    path = location.removeprefix("file://")
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, ".recluster-write-probe")
        with open(probe, "w", encoding="utf-8") as handle:
            handle.write("ok")
        os.remove(probe)
    except OSError as error:
        raise TableError(f"checkpoint location {location} is not writable: {error.strerror}") from None


def start_job(spark: Any, settings: Settings, tables: Sequence[TableSettings]) -> tuple[Any, ReclusterHandler]:
    """Start the streaming query; returns it with its handler (for status and graceful stops)."""
    if not tables and settings.stream.source != "kafka":
        raise TableError("no tables to watch: pass --table URI or list tables in the config file")
    stream = settings.stream
    check_checkpoint_location(stream.checkpoint_location)
    handler = ReclusterHandler(settings, tables, spark)
    if stream.source == "kafka":
        kafka = settings.kafka
        spark.dataSource.register(KafkaCommitsSource)
        reader = (
            spark.readStream.format(KAFKA_SOURCE_NAME)
            .option("bootstrapServers", kafka.bootstrap_servers)
            .option("topic", kafka.commits_topic)
            .option("startingOffsets", kafka.starting_offsets)
            .option("maxEventsPerBatch", str(kafka.max_events_per_batch))
            .option("clientOptions", json.dumps(dict(kafka.client_options)))
        )
    else:
        spark.dataSource.register(DeltaLogSource)
        reader = (
            spark.readStream.format(SOURCE_NAME)
            .option("tables", json.dumps([normalize_uri(t.uri) for t in tables]))
            .option("startingVersion", str(stream.starting_version))
            .option("maxCommitsPerBatch", str(stream.max_commits_per_batch))
            .option("storageOptions", json.dumps(dict(settings.storage_options)))
        )
    query = (
        reader.load()
        .writeStream.foreachBatch(handler)
        .option("checkpointLocation", stream.checkpoint_location)
        .trigger(processingTime=f"{stream.trigger_interval_seconds} seconds")
        .queryName("recluster")
        .start()
    )
    return query, handler


def stop_gracefully(query: Any, handler: ReclusterHandler, grace_seconds: float = 60.0) -> None:
    """No new merges; let the running batch finish its merge and commit (bounded), then stop the query."""
    handler.stopping.set()
    deadline = time.monotonic() + grace_seconds
    while not handler.idle.wait(timeout=0.2) and time.monotonic() < deadline:
        pass
    query.stop()
    if handler.metrics is not None:
        handler.metrics.close()
