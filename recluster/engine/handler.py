"""The `foreachBatch` handler of the streaming job (docs/streaming.md): commit entries in, bounded work out.

Each micro-batch applies every commit's adds/removes to the table's per-level state (initialised from the snapshot
just before the first commit seen, so a restart rebuilds it from the log), plans when a level's average depth
exceeds its threshold, runs a bounded budget of merges, and logs one key=value line per table. Our own rewrites
come back through the log: they update the state but never trigger work by themselves, so the job cannot feed
itself. Spark is only a duck-typed batch here: the handler needs no pyspark import.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from recluster.core.blocks import LEVEL_CONSTANT, Partition
from recluster.core.errors import ErrorKind, TableError
from recluster.core.metrics import ClusteringState, clustering_info
from recluster.core.optimizing import (
    Candidate,
    OptimizingConfig,
    ProcessType,
    TableHistory,
    optimizing_config,
    pending_optimizing,
    quiet_until,
    schedule,
    table_health,
)
from recluster.core.outcomes import CommitOutcome, CommitStatus, OutcomeTotals
from recluster.core.selection import select_merge_tasks
from recluster.core.selection.plan import MergeTask, Policy, ReclusterPlan, WatermarkDecision, level_threshold
from recluster.delta.file_blocks import blocks_from_log_adds
from recluster.delta.log import PRODUCER, CommitEntry, read_commits
from recluster.delta.ranges import on_other_curve
from recluster.delta.snapshot import load_snapshot
from recluster.delta.storage import normalize_uri, require_safe_commits
from recluster.engine.api import open_checked_table, selection_bounds
from recluster.engine.failures import FailureBook, failed_record, failed_status
from recluster.engine.job_maintenance import JobMaintenance
from recluster.engine.job_state import LevelStatus, TableStatus, TrackedTable
from recluster.engine.optimizer import history_of, history_store, recluster_plan, run_process
from recluster.engine.publish import BatchActions, BufferedPublisher, MetricsRecord, metrics_record, with_estimate
from recluster.engine.rounds import SnapshotLoader
from recluster.settings import Settings, SettingsError, TableSettings, resolve_selection, table_storage_options

log = logging.getLogger("recluster.job")


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
        """Set while no micro-batch, tick or maintenance pass runs (a graceful stop waits for it)."""
        self.idle.set()
        self._busy = 0
        self._busy_lock = threading.Lock()
        self.listeners: list[Callable[[TableStatus], None]] = []
        kafka = settings.kafka
        self.metrics = BufferedPublisher(kafka, kafka.metrics_topic) if kafka.metrics_topic else None
        self.skipped_events = 0
        self.history = history_store(settings, deferred=True)  # written by `tick`, outside micro-batches
        self.lock = threading.Lock()
        """Serializes micro-batches and `tick` (they run on different threads)."""
        self.last_tick = 0.0
        self.maintenance = JobMaintenance(settings, self.history, self.options, self._config, self.stopping)
        self.last_batch_time: float | None = None
        """Wall-clock time (time.time()) the last micro-batch finished; None before the first one."""
        self.loaded = threading.Event()
        """Set once every configured table was loaded (or its error published) by `load_tables`."""
        self.failures = FailureBook(settings.stream.table_retry_seconds, settings.stream.table_retry_max_seconds)

    def options(self, uri: str) -> dict[str, str]:
        return dict(table_storage_options(self.settings, self.configured.get(uri)))

    def load_tables(self) -> None:
        """Load every configured table's state and publish its status (a table that cannot be loaded: its
        error), so that the page, the API and the metrics list every table from the job's start, not from its
        first commit. Runs in the background: a micro-batch loads a table it needs itself, never waiting."""
        try:
            for uri in [u for u in self.configured if u not in self.tracked]:
                if self.stopping.is_set():
                    return
                self._take_up(uri)
        finally:
            self.loaded.set()

    def _take_up(self, uri: str) -> None:
        """Load a table that is not tracked (at the start, or again after it failed) and publish its state."""
        try:
            tracked = self._track(uri, None)
        except Exception as error:  # a failing table never stops the others (docs/operations.md#when-a-table-fails)
            with self.lock:
                self._fail(uri, error)
            return
        with self.lock:
            if uri in self.tracked:  # a micro-batch loaded it meanwhile, maybe at a newer version
                return
            tracked.pending = True  # commits it holds may not reach a micro-batch as new: plan once
            self.tracked[uri] = tracked
            self._recovered(uri)
            config = self._config(tracked)
            records = [self._decide(tracked, config, None, "loaded")] if config is not None else []
        self._publish_records(records)

    def _recovered(self, uri: str) -> None:
        failure = self.failures.recovered(uri)
        if failure is not None:
            log.info("recluster table=%s reason=table_recovered after=%d failures", uri, failure.attempts)

    def _fail(self, uri: str, error: BaseException) -> None:
        """Keep a table's failure to that table: classified, logged, shown with it, retried after a backoff."""
        failure = self.failures.failed(uri, error, time.time())
        log.error("%s", failure, exc_info=error if failure.kind is ErrorKind.UNKNOWN else None)
        self._publish(failed_status(failure, self.status.get(uri)))
        tracked = self.tracked.get(uri)
        if tracked is not None:
            tracked.pending = True  # its work is tried again once the backoff has passed
            record = failed_record(failure, tracked.version, tracked.state.info(tracked.key))
        else:
            record = failed_record(failure, -1, clustering_info([]))
        self._publish_records([record])

    def _track(self, uri: str, version: int | None) -> TrackedTable:
        """State at `version` (None: latest) from the snapshot; the key comes from config or the table."""
        table, key, options = open_checked_table(uri, settings=self.settings)
        require_safe_commits(uri, options, self.settings.commit.allow_unsafe_single_writer)
        if version is not None and version >= 0:
            table.load_as_version(version)
        snapshot = load_snapshot(table, key, uri=uri, storage_options=options)
        blocks = snapshot.blocks if version is None or version >= 0 else ()
        return TrackedTable(
            uri,
            snapshot.key,  # with a curve key's range bounds as of the snapshot
            snapshot.partition_columns,
            dict(snapshot.properties),
            ClusteringState(blocks),
            snapshot.version if version is None or version >= 0 else -1,
            snapshot.data_schema,
            dict(options),
        )

    @contextlib.contextmanager
    def _working(self) -> Iterator[None]:
        """Marks work in progress on this thread; `idle` is set again when the last one ends."""
        with self._busy_lock:
            self._busy += 1
            self.idle.clear()
        try:
            yield
        finally:
            with self._busy_lock:
                self._busy -= 1
                if not self._busy:
                    self.idle.set()

    def __call__(self, frame: Any, batch_id: int) -> None:
        with self._working():
            self._batch(frame)

    def _batch(self, frame: Any) -> None:
        try:
            rows = [r.asDict() for r in frame.collect()]
            if self.settings.stream.source == "kafka":
                commits = self._log_commits_for_events(rows)
            else:
                commits = [CommitEntry.from_row(row) for row in rows]
            by_table: dict[str, list[CommitEntry]] = {}
            for commit in sorted(commits, key=lambda c: (c.table, c.version)):
                by_table.setdefault(commit.table, []).append(commit)
            with self.lock:
                touched = {uri: self._apply(uri, events) for uri, events in by_table.items()}
                self._publish_records(self._run_scheduled({u: f for u, f in touched.items() if f is not None}))
        finally:
            self.last_batch_time = time.time()

    def tick(self) -> None:
        """Time-based work between micro-batches (a quiet table gets no batch): interval triggers of
        minor/full optimizing and scheduled maintenance. Called from the job's main loop."""
        now = time.monotonic()
        if self.stopping.is_set() or now - self.last_tick < self.settings.self_optimizing.tick_seconds:
            return
        self.last_tick = now
        with self._working():
            if self.lock.acquire(blocking=False):  # else a micro-batch is running: it schedules the same work
                try:
                    records = self._run_scheduled({})
                finally:
                    self.lock.release()
                self._publish_records(records)
            for uri in self.failures.due(time.time()):  # tables that failed to load: try again
                if uri not in self.tracked and not self.stopping.is_set():
                    self._take_up(uri)
            self.maintenance.run_due(self.tracked)  # outside the lock: micro-batches never wait for maintenance
            self.flush_history()

    def flush_history(self) -> None:
        """Write the history rows kept since the last flush (a failed write keeps them for the next)."""
        try:
            self.history.flush()
        except (TableError, OSError) as error:
            log.error("recluster history=%s error=%s", self.history.location, error)

    def _publish_records(self, records: Sequence[MetricsRecord]) -> None:
        if self.metrics is not None and records:
            self.metrics.publish((r.table, with_estimate(r, self.history.records()).model_dump_json()) for r in records)

    def _run_scheduled(self, touched: Mapping[str, bool]) -> list[MetricsRecord]:
        """One scheduling pass over every tracked table (docs/operations.md): reclustering and optimizing share the
        optimizer groups; per group the policy orders tables with due work, a table over its quota waits.
        `touched` maps tables with new commits in this batch to whether a commit was not ours."""
        now = time.time()
        due: dict[str, tuple[TrackedTable, OptimizingConfig, ProcessType, str, ReclusterPlan | None]] = {}
        candidates = []
        for uri, tracked in list(self.tracked.items()):
            if uri not in touched and not tracked.pending and now < tracked.quiet_until:
                continue  # idle: no commit, no work left, no interval trigger due yet (issue 23)
            config = self._config(tracked)
            if config is None or self.failures.waiting(uri, now):
                continue
            past = history_of(self.history, uri, self.settings, now)
            try:
                kind, reason, plan = self._due(tracked, config, touched.get(uri, False), past, now)
            except Exception as error:
                self._fail(uri, error)
                continue
            if kind is None:
                continue
            due[uri] = (tracked, config, kind, reason, plan)
            candidates.append(Candidate(uri, config.group, config.quota, kind, past.busy_seconds, past.last_optimized))
        run, waiting = schedule(
            candidates,
            self.settings.self_optimizing.groups,
            window_seconds=self.settings.self_optimizing.quota_window_seconds,
        )
        records = []
        for candidate in run:
            if self.stopping.is_set():
                break
            tracked, config, kind, reason, plan = due[candidate.table]
            try:
                records.append(self._decide(tracked, config, kind, reason, plan))
            except Exception as error:  # tasks that committed before it failed are kept (they are in the log)
                self._fail(candidate.table, error)
        for candidate in waiting:
            tracked, config, kind, _, _ = due[candidate.table]
            tracked.pending = True
            log.info("recluster table=%s reason=over_quota work=%s group=%s", candidate.table, kind, config.group)
            records.append(self._decide(tracked, config, None, "over_quota"))
        decided = {c.table for c in run} | {c.table for c in waiting}
        for uri in touched:
            if uri not in decided and uri in self.tracked:
                config = self._config(self.tracked[uri])
                records.append(self._decide(self.tracked[uri], config, None, "within_threshold"))
        return records

    def _config(self, tracked: TrackedTable) -> OptimizingConfig | None:
        """The table's self-optimizing config from its properties; a malformed property is reported and
        the table is left alone until it is fixed (a property change reloads the table)."""
        try:
            resolve_selection(self.settings.selection, tracked.properties)  # a bad recluster.policy, too
            return optimizing_config(tracked.properties, self.settings.self_optimizing)
        except SettingsError as error:
            self._publish(TableStatus(tracked.uri, tracked.version, (), 1.0, error=str(error)))
            log.error("recluster table=%s reason=bad_property error=%s", tracked.uri, error)
            return None

    def _due(
        self, tracked: TrackedTable, config: OptimizingConfig, foreign: bool, past: TableHistory, now: float
    ) -> tuple[ProcessType | None, str, ReclusterPlan | None]:
        """Reclustering first (new foreign commits or work left over; its plan is returned to be run as is),
        then the optimizing triggers."""
        if self.stopping.is_set():
            return None, "stopping", None
        if config.recluster_enabled and tracked.version < tracked.awaiting_version:
            return None, "awaiting_own_commit", None  # a plan on this state would redo our last rewrite
        if config.recluster_enabled and (foreign or tracked.pending):
            snapshot = tracked.snapshot()
            plan = recluster_plan(snapshot, self.settings)
            if not plan.empty:
                return ProcessType.RECLUSTER, str(plan.tasks[0].reason), plan  # absorb_ratio, depth_above_..
            tracked.pending = False
        health = table_health(tracked.state.blocks, config)
        pending = pending_optimizing(health, config, past, now=now)
        tracked.quiet_until = quiet_until(health, config, past) if pending.type is None else 0.0
        return pending.type, pending.reason, None

    def _log_commits_for_events(self, events: list[dict[str, Any]]) -> list[CommitEntry]:
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
        commits: list[CommitEntry] = []
        for uri, (low, high) in newest.items():
            tracked = self.tracked.get(uri)
            first = tracked.version + 1 if tracked else low
            if high >= first:
                commits.extend(read_commits(uri, first, high, self.options(uri)))
        return commits

    def _apply(self, uri: str, events: list[CommitEntry]) -> bool | None:
        """Apply a table's new commits to its state; True when one of them was not ours, None on error."""
        try:
            tracked = self.tracked.get(uri)
            if tracked is None:
                tracked = self.tracked[uri] = self._initial_state(uri, events[0].version)
                self._recovered(uri)
            fresh = [e for e in events if e.version > tracked.version]  # older: replayed after a restart
            foreign = [e for e in fresh if e.producer != PRODUCER]
            tracked.bytes_appended += sum(e.bytes_added for e in foreign)
            for event in fresh:
                changed = event.metadata_changed or on_other_curve(event, tracked.key)  # new bounds: no metaData
                if event.is_gap or changed or event.version != tracked.version + 1:
                    if event.is_gap:
                        log.warning("recluster table=%s reason=log_gap version=%s: reloading", uri, event.version)
                    totals, appended = tracked.totals, tracked.bytes_appended
                    tracked = self.tracked[uri] = self._track(uri, None)
                    tracked.totals, tracked.bytes_appended = totals, appended
                    break
                added = blocks_from_log_adds(event.adds, tracked.key, tracked.partition_columns, uri, self.options(uri))
                tracked.state.apply(added, event.removes)
                tracked.version = event.version
            return bool(foreign)
        except Exception as error:  # reloaded by its next commit, or by `tick` once the backoff has passed
            self.tracked.pop(uri, None)
            self._fail(uri, error)
            return None

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

    def _decide(
        self,
        tracked: TrackedTable,
        config: OptimizingConfig | None,
        kind: ProcessType | None,
        reason: str,
        recluster: ReclusterPlan | None = None,
    ) -> MetricsRecord:
        """Run the scheduled process `kind` (None: nothing this time; a recluster runs the plan `_due` made)
        and report the table's state."""
        snapshot = tracked.snapshot()
        bounds = selection_bounds(self.settings, snapshot, None)
        started = time.monotonic()
        outcomes: list[CommitOutcome] = []
        batch = OutcomeTotals()
        pending = tracked.pending if kind is None else False
        beta = bounds.beta if bounds.policy is Policy.ABSORB else None
        time_like: tuple[tuple[Partition, WatermarkDecision], ...] = ()
        if kind is not None and config is not None and not self.stopping.is_set():
            plan = None
            if kind is ProcessType.RECLUSTER:
                planned = recluster or select_merge_tasks(tracked.uri, tracked.version, snapshot.blocks, bounds)
                plan, pending = self._budgeted(planned)
                beta, time_like = plan.beta, plan.watermarks
            loader = SnapshotLoader(tracked.uri, tracked.key, tracked.partition_columns, tracked.storage_options)
            _, outcomes, batch = run_process(
                kind,
                snapshot,
                loader,
                settings=self.settings,
                config=config,
                spark_factory=lambda: self.spark,
                history=self.history,
                plan=plan,
            )
            # A sliced absorb resumes in the next batch without waiting for a new commit.
            resume = bounds.policy is Policy.ABSORB and batch.tasks > 0
            pending = pending or resume or batch.conflicts > 0 or kind is not ProcessType.RECLUSTER
        tracked.pending = pending
        if kind is not None:  # its work ran through
            self._recovered(tracked.uri)
        failure = self.failures.get(tracked.uri)
        committed = [o.version for o in outcomes if o.status is CommitStatus.COMMITTED and o.version is not None]
        tracked.awaiting_version = max([tracked.awaiting_version, *committed])
        tracked.totals = tracked.totals + batch
        info = tracked.state.info(tracked.key)
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
            tasks=tracked.totals.tasks,
            conflicts=tracked.totals.conflicts,
            failures=tracked.totals.failures,
            bytes_written=tracked.totals.bytes_written,
            bytes_appended=tracked.bytes_appended,
            pending=pending,
            error=failure.message if failure else None,
            error_kind=str(failure.kind) if failure else None,
            policy=bounds.policy,
        )
        self._publish(status)
        log.info("%s", status)
        return metrics_record(
            tracked.uri,
            tracked.version,
            info,
            {s.level: s.threshold for s in levels},
            BatchActions(**batch.to_dict(), duration_seconds=time.monotonic() - started),
            pending=pending,
            policy=str(bounds.policy),
            beta=beta,
            reasons=[str(o.task.reason) for o in outcomes] or [reason],
            errors=[f"{o.status}: {o.reason}" for o in outcomes if o.status is not CommitStatus.COMMITTED],
            skipped_events=self.skipped_events,
            deletions=(
                sum(b.has_deletion_vector for b in tracked.state.blocks),
                sum(b.deleted_rows for b in tracked.state.blocks),
            ),
            time_like=time_like,
        )

    def _publish(self, status: TableStatus) -> None:
        self.status[status.table] = status
        for listener in self.listeners:
            listener(status)
