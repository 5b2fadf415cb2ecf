"""Running a scheduling pass's work and reporting every table it touched (docs/architecture.md#the-flow-of-a-batch):
each table's work run (job_work), its status and snapshot published for readers (job_status), its metrics record
sent, and a failure kept to its table. The handler owns the lock; everything here runs under it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from recluster.core.errors import ErrorKind
from recluster.core.metrics import clustering_info
from recluster.core.optimizing import OptimizingConfig, optimizing_config
from recluster.delta.history import HistoryStore
from recluster.engine.backoff import FailureBook
from recluster.engine.failures import failed_record, failed_status
from recluster.engine.job_schedule import DueWork, schedule_pass
from recluster.engine.job_state import TableStatus, TrackedTable
from recluster.engine.job_status import StatusBoard
from recluster.engine.job_work import TableReport, run_work
from recluster.engine.publish import BufferedPublisher, MetricsRecord, with_estimate
from recluster.settings import Settings, SettingsError, resolve_selection

log = logging.getLogger("recluster.job")


class JobReports:
    """The job's scheduled work and what it reports, over the handler's tracked tables."""

    def __init__(
        self,
        settings: Settings,
        tracked: dict[str, TrackedTable],
        board: StatusBoard,
        history: HistoryStore,
        failures: FailureBook,
        spark: Callable[[], Any],
        stopping: threading.Event,
        may_work: Callable[[], bool],
    ) -> None:
        """`may_work`: False while the job's leases may have lapsed (docs/discovery.md#several-jobs)."""
        self.settings = settings
        self.tracked = tracked
        self.board = board
        self.history = history
        self.failures = failures
        self.spark = spark
        self.stopping = stopping
        kafka = settings.kafka
        self.metrics = BufferedPublisher(kafka, kafka.metrics_topic) if kafka.metrics_topic else None
        self.skipped_events = 0
        """Malformed commit events of the current micro-batch (Kafka), carried by its metrics records."""
        self.may_work = may_work

    def run_scheduled(self, touched: Mapping[str, bool]) -> list[TableReport]:
        """One scheduling pass (job_schedule), its work run in the policy's order, every table with new commits
        reported. `touched` maps tables with new commits in this batch to whether a commit was not ours."""
        reports = []
        decided: dict[str, TableReport] = {}
        if not self.stopping.is_set() and self.may_work():
            scheduled = schedule_pass(
                self.tracked,
                touched,
                self.config,
                settings=self.settings,
                history=self.history,
                failures=self.failures,
            )
            for uri, error in scheduled.failed:
                self.fail(uri, error)
            failed = {uri for uri, _ in scheduled.failed}
            decided = self.publish_decisions(
                [u for u in touched if u not in failed], [*scheduled.run, *scheduled.waiting]
            )
            for work in scheduled.run:
                if self.stopping.is_set():
                    break
                try:
                    reports.append(self.report(self.tracked[work.table], work))
                except Exception as error:  # tasks that committed before it failed are kept (they are in the log)
                    self.fail(work.table, error)
            for work in scheduled.waiting:
                self.tracked[work.table].pending = True
                log.info("recluster table=%s reason=over_quota %s", work.table, work)
                waiting = DueWork(work.table, work.config, None, "over_quota")
                reports.append(self.report(self.tracked[work.table], waiting))
        reported = {r.status.table for r in reports}
        for uri in touched:
            if uri in decided and uri not in reported:  # nothing due: its decision is its report
                log.info("%s", decided[uri].status)
                reports.append(decided[uri])
            elif uri not in reported and uri in self.tracked:
                config = self.config(self.tracked[uri])
                if config is not None:
                    reason = str(self.tracked[uri].paused or "within_threshold")
                    reports.append(self.report(self.tracked[uri], DueWork(uri, config, None, reason)))
        return reports

    def publish_decisions(self, touched: Sequence[str], due: Sequence[DueWork]) -> dict[str, TableReport]:
        """Publish the status of every table with new commits at its new version before any merge of the pass runs
        (docs/streaming.md#decisions-before-merges): a commit's decision never waits behind other tables' merges.
        A table with work due shows it pending; the report after its work replaces this one. Statuses only: the
        metrics record and the log line come with the pass's reports. Returns the decisions of the tables with
        nothing due (their reports)."""
        reasons = {work.table: work.reason for work in due}
        decided: dict[str, TableReport] = {}
        for uri in touched:
            tracked = self.tracked.get(uri)
            config = self.config(tracked) if tracked is not None else None
            if tracked is None or config is None:
                continue
            if uri in reasons:
                tracked.pending = True  # its work runs in this pass; the report after it says what is left
            reason = reasons.get(uri) or str(tracked.paused or "within_threshold")
            decided[uri] = self.run(tracked, DueWork(uri, config, None, reason))
        if decided:
            self.board.publish([r.status for r in decided.values()], [r.snapshot for r in decided.values()])
        return {uri: report for uri, report in decided.items() if uri not in reasons}

    def run(self, tracked: TrackedTable, work: DueWork) -> TableReport:
        """Run a table's work (`work.kind` None: none) and make its report."""
        return run_work(
            tracked,
            work,
            settings=self.settings,
            spark_factory=self.spark,
            history=self.history,
            failures=self.failures,
            skipped_events=self.skipped_events,
        )

    def report(self, tracked: TrackedTable, work: DueWork) -> TableReport:
        report = self.run(tracked, work)
        log.info("%s", report.status)
        return report

    def config(self, tracked: TrackedTable) -> OptimizingConfig | None:
        """The table's self-optimizing config from its properties; a malformed property is reported and
        the table is left alone until it is fixed (a property change reloads the table)."""
        try:
            resolve_selection(self.settings.selection, tracked.properties)  # a bad recluster.policy, too
            return optimizing_config(tracked.properties, self.settings.self_optimizing)
        except SettingsError as error:
            self.board.publish([TableStatus(tracked.uri, tracked.version, (), 1.0, error=str(error))])
            log.error("recluster table=%s reason=bad_property error=%s", tracked.uri, error)
            return None

    def publish(self, reports: Sequence[TableReport]) -> None:
        """One new view for readers with these tables' statuses and snapshots, and their metrics records."""
        if reports:
            self.board.publish([r.status for r in reports], [r.snapshot for r in reports])
            self.publish_records([r.record for r in reports])

    def publish_records(self, records: Sequence[MetricsRecord]) -> None:
        if self.metrics is not None and records:
            self.metrics.publish((r.table, with_estimate(r, self.history.records()).model_dump_json()) for r in records)

    def fail(self, uri: str, error: BaseException) -> None:
        """Keep a table's failure to that table: classified, logged, shown with it, retried after a backoff."""
        failure = self.failures.failed(uri, error, time.time())
        log.error("%s", failure, exc_info=error if failure.kind is ErrorKind.UNKNOWN else None)
        status = failed_status(failure, self.board.view.statuses.get(uri))
        tracked = self.tracked.get(uri)
        if tracked is not None:
            tracked.pending = True  # its work is tried again once the backoff has passed
            record = failed_record(failure, tracked.version, tracked.state.info(tracked.key))
            self.board.publish([status], [tracked.snapshot()])
        else:
            record = failed_record(failure, -1, clustering_info([]))
            self.board.publish([status], dropped=[uri])
        self.publish_records([record])
