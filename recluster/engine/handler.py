"""The `foreachBatch` handler of the streaming job (docs/streaming.md): commit entries in, bounded work out.

The handler coordinates; each job is done elsewhere: the tables and their state (job_tables), which table gets which
work (job_schedule, planning), running a pass's work and reporting the tables (job_reports, job_work), what readers
see (job_status), maintenance (job_maintenance) and the benefit from event logs (job_benefit). Micro-batches, the
job's tick and the background load run on different threads; one lock serializes them. Our own rewrites come back
through the log: they update the state but never trigger work by themselves, so the job cannot feed itself. Spark is
only a duck-typed batch here: the handler needs no pyspark import.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from deltalake import DeltaTable

from recluster.core.benefit import TableSize, modelled_read_share
from recluster.core.errors import TableError
from recluster.core.pruning import column_scan_fractions
from recluster.delta.log import CommitEntry
from recluster.engine.backoff import FailureBook
from recluster.engine.discovery import FoundTable
from recluster.engine.job_benefit import JobBenefit
from recluster.engine.job_discovery import JobDiscovery
from recluster.engine.job_maintenance import JobMaintenance
from recluster.engine.job_reports import JobReports
from recluster.engine.job_schedule import DueWork
from recluster.engine.job_state import TableStatus, TrackedTable
from recluster.engine.job_status import StatusBoard, WorkInProgress
from recluster.engine.job_tables import JobTables
from recluster.engine.optimizer import history_store
from recluster.settings import Settings, TableSettings

log = logging.getLogger("recluster.job")


class ReclusterHandler:
    """The `foreachBatch` function: commit events in, bounded recluster work out."""

    def __init__(self, settings: Settings, tables: Sequence[TableSettings], spark: Any) -> None:
        self.settings = settings
        self.spark = spark
        self.tables = JobTables(settings, tables)
        self.board = StatusBoard()
        """What readers see (pages, /status, /metrics, demo): replaced whole, read without a lock."""
        self.stopping = threading.Event()
        self.work = WorkInProgress()
        self.idle = self.work.idle
        self.history = history_store(settings, deferred=True)  # written by `tick`, outside micro-batches
        self.lock = threading.Lock()
        """Serializes micro-batches, `tick` and table loads (they run on different threads)."""
        self.last_tick = 0.0
        self.failures = FailureBook(settings.stream.table_retry_seconds, settings.stream.table_retry_max_seconds)
        self.reports = JobReports(
            settings,
            self.tracked,
            self.board,
            self.history,
            self.failures,
            lambda: self.spark,
            self.stopping,
            lambda: self.discovery is None or self.discovery.may_work(),
        )
        self.maintenance = JobMaintenance(settings, self.history, self.options, self.reports.config, self.stopping)
        self.benefit = JobBenefit.of(settings)
        self.last_batch_time: float | None = None
        """Wall-clock time (time.time()) the last micro-batch finished; None before the first one."""
        self.loaded = threading.Event()
        """Set once every configured table was loaded (or its error published) by `load_tables`."""
        self.discovery: JobDiscovery | None = None
        """The job's discovery when it has catalogs or roots to look in (docs/discovery.md)."""
        self.background: list[threading.Thread] = []
        """Threads that stop on `stopping` (the estimates, discovery, heartbeats): joined by a graceful stop, so none
        is inside a store call or a calibration while the interpreter exits."""

    @property
    def tracked(self) -> dict[str, TrackedTable]:
        """The job's own table state: for the job's threads only (readers take `board.view`)."""
        return self.tables.tracked

    @property
    def status(self) -> Mapping[str, TableStatus]:
        """Every table's last status, as readers see it now."""
        return self.board.view.statuses

    def options(self, uri: str) -> dict[str, str]:
        return self.tables.options(uri)

    def load_tables(self) -> None:
        """Load every configured table's state and publish its status (a table that cannot be loaded: its
        error), so that the page, the API and the metrics list every table from the job's start, not from its
        first commit. Runs in the background: a micro-batch loads a table it needs itself, never waiting."""
        try:
            for uri in [u for u in self.tables.configured if u not in self.tracked]:
                if self.stopping.is_set():
                    return
                self._take_up(uri)
        finally:
            self.loaded.set()

    def take_up_found(self, table: FoundTable) -> int:
        """Watch a table discovery found (docs/discovery.md); returns the version it was loaded at (-1: it failed to
        load, its error is shown and it is retried like any table)."""
        with self.lock:
            self.tables.add_found(table.settings, table.layers)
        self._take_up(table.uri, table.opened)
        tracked = self.tracked.get(table.uri)
        return tracked.version if tracked is not None else -1

    def let_go(self, uri: str) -> None:
        """Stop watching a table discovery no longer finds (dropped, moved, filtered out): no error, no status."""
        with self.lock:
            self.tables.remove_found(uri)
            self.failures.recovered(uri)  # forgotten: a table let go is not retried
            self.board.publish(removed=[uri])
        log.info("recluster table=%s reason=let_go", uri)

    def _take_up(self, uri: str, opened: DeltaTable | None = None) -> None:
        """Load a table that is not tracked (at the start, or again after it failed) and publish its state;
        `opened`: the table as discovery opened it a moment ago, brought up to date."""
        try:
            tracked = self.tables.track(uri, None, opened)
        except Exception as error:  # a failing table never stops the others (docs/operations.md#when-a-table-fails)
            with self.lock:
                self.reports.fail(uri, error)
            return
        with self.lock:
            if uri in self.tracked:  # a micro-batch loaded it meanwhile, maybe at a newer version
                return
            tracked.pending = True  # commits it holds may not reach a micro-batch as new: plan once
            self.tracked[uri] = tracked
            self.failures.clear(uri)
            config = self.reports.config(tracked)
            reports = [self.reports.report(tracked, DueWork(uri, config, None, "loaded"))] if config is not None else []
            self.reports.publish(reports)

    def __call__(self, frame: Any, batch_id: int) -> None:
        with self.work.running():
            self._batch(frame)

    def _batch(self, frame: Any) -> None:
        try:
            rows = [r.asDict() for r in frame.collect()]
            if self.settings.stream.source == "kafka":
                read = self.tables.commits_for_events(rows)
                if self.discovery is not None:  # a table claimed and not read yet is read next
                    self.discovery.ask(read.unserved)
                commits, self.reports.skipped_events, failed = list(read.commits), read.malformed, read.failed
            else:
                commits, failed = [CommitEntry.from_row(row) for row in rows], {}
            by_table: dict[str, list[CommitEntry]] = {}
            for commit in sorted(commits, key=lambda c: (c.table, c.version)):
                if self.tables.serves(commit.table):  # not one let go meanwhile
                    by_table.setdefault(commit.table, []).append(commit)
            with self.lock:
                for uri, error in failed.items():
                    self._fail(uri, error)
                touched = {uri: foreign for uri, c in by_table.items() if (foreign := self._apply(uri, c)) is not None}
                self.reports.publish(self.reports.run_scheduled(touched))
        finally:
            self.last_batch_time = time.time()

    def _apply(self, uri: str, commits: list[CommitEntry]) -> bool | None:
        """Apply a table's new commits; True when one was not ours, None when the table failed."""
        try:
            was_tracked = uri in self.tracked
            _, foreign = self.tables.apply(uri, commits)
        except Exception as error:
            self._fail(uri, error)
            return None
        if not was_tracked:
            self.failures.clear(uri)
        return foreign

    def _fail(self, uri: str, error: Exception) -> None:
        """The table failed (under the lock): its state is dropped and its error shown, it is taken up again by its
        next commit or once its backoff has passed (docs/operations.md#when-a-table-fails)."""
        self.tracked.pop(uri, None)
        self.reports.fail(uri, error)

    def tick(self) -> None:
        """Time-based work between micro-batches (a quiet table gets no batch): interval triggers of
        minor/full optimizing and scheduled maintenance. Called from the job's main loop."""
        now = time.monotonic()
        if self.stopping.is_set() or now - self.last_tick < self.settings.self_optimizing.tick_seconds:
            return
        self.last_tick = now
        with self.work.running():
            if self.lock.acquire(blocking=False):  # else a micro-batch is running: it schedules the same work
                try:
                    self.reports.publish(self.reports.run_scheduled({}))
                finally:
                    self.lock.release()
            for uri in self.failures.due(time.time()):  # tables that failed to load: try again
                if uri not in self.tracked and not self.stopping.is_set():
                    self._take_up(uri)
            self.maintenance.run_due(self.tracked)  # outside the lock: micro-batches never wait for maintenance
            if self.benefit.due(round(time.time() * 1000)):
                self.count_benefit(round(time.time() * 1000))
            self.flush_history()

    def count_benefit(self, now_ms: int) -> None:
        """Read the new event log files and count every tracked table's benefit (outside the lock: a batch only
        reads what is assigned here), then show it: a log line per table whose figures changed, its status
        republished. A table whose pause ends is planned at the next pass."""
        if not self.lock.acquire(blocking=False):  # a micro-batch is running: the read stays due for the next tick
            return
        try:  # the files as the last batch left them (a copy); the reading and counting go on without the lock
            layouts = {uri: (t.state.blocks, t.key) for uri, t in self.tracked.items()}
        finally:
            self.lock.release()
        tables = {
            uri: TableSize(now_ms, len(blocks), sum(b.bytes for b in blocks)) for uri, (blocks, _) in layouts.items()
        }
        shares = {
            uri: modelled_read_share(column_scan_fractions(blocks, key)) for uri, (blocks, key) in layouts.items()
        }
        counted = self.benefit.count(tables, self.history, now_ms, shares)
        with self.lock:
            statuses = []
            for uri, benefit in counted.items():
                tracked = self.tracked.get(uri)
                if tracked is None:
                    continue
                if tracked.paused is not None and benefit.paused is None:
                    tracked.pending = True  # a query was seen again: reclustering resumes
                if benefit != tracked.benefit:  # a line when its figures changed, not every read
                    log.info("recluster benefit table=%s %s", uri, benefit)
                tracked.benefit = benefit
                status = self.status.get(uri)
                if status is not None and status.error is None:
                    statuses.append(replace(status, benefit=benefit, pending=tracked.pending))
            self.board.publish(statuses)

    def flush_history(self) -> None:
        """Write the history rows kept since the last flush (a failed write keeps them for the next)."""
        try:
            self.history.flush()
        except (TableError, OSError) as error:
            log.error("recluster history=%s error=%s", self.history.location, error)
