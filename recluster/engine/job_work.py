"""Running one table's scheduled work in the job and reporting the table: the process runs as planned, then the
table's status and its metrics record are made from the state it leaves (docs/streaming.md).

A table that gets no work this time (nothing due, over quota, stopping) is reported the same way, with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from recluster.core.blocks import Partition
from recluster.core.outcomes import CommitOutcome, CommitStatus, OutcomeTotals
from recluster.core.scheduling import ProcessType
from recluster.core.selection.plan import Policy, WatermarkDecision
from recluster.delta.history import HistoryStore
from recluster.delta.snapshot import TableSnapshot
from recluster.engine.api import selection_bounds
from recluster.engine.backoff import FailureBook
from recluster.engine.job_schedule import DueWork, loader_of
from recluster.engine.job_state import TableStatus, TrackedTable
from recluster.engine.job_status import table_status
from recluster.engine.optimizer import run_process
from recluster.engine.planning import plan_process
from recluster.engine.publish import BatchActions, MetricsRecord, metrics_record
from recluster.settings import Settings


@dataclass(frozen=True, slots=True)
class TableReport:
    """What one table's turn produced: the status shown for it, the snapshot it was decided on (what readers see of
    the table: our own commits come back later) and the record published to the metrics topic."""

    status: TableStatus
    snapshot: TableSnapshot
    record: MetricsRecord

    def __str__(self) -> str:
        return str(self.status)


def run_work(
    tracked: TrackedTable,
    work: DueWork,
    *,
    settings: Settings,
    spark_factory: Callable[[], Any],
    history: HistoryStore,
    failures: FailureBook,
    skipped_events: int,
) -> TableReport:
    """Run `work` (its `kind` None: nothing to run) on the table and report it. A recluster runs the plan the
    scheduling pass made; an optimizing process is planned here, by the same planner."""
    started = time.monotonic()
    outcomes: list[CommitOutcome] = []
    batch = OutcomeTotals()
    pending = tracked.pending if work.kind is None else False
    snapshot = tracked.snapshot()
    bounds = selection_bounds(settings, snapshot, None)
    beta = bounds.beta if bounds.policy is Policy.ABSORB else None
    time_like: tuple[tuple[Partition, WatermarkDecision], ...] = ()
    if work.kind is not None:
        planned = work.planned or plan_process(
            work.kind, snapshot, loader_of(tracked), settings=settings, config=work.config
        )
        if work.kind is ProcessType.RECLUSTER:
            pending, beta, time_like = planned.work_left, planned.plan.beta, planned.plan.watermarks
        outcomes, batch = run_process(
            planned,
            loader_of(tracked),
            settings=settings,
            config=work.config,
            spark_factory=spark_factory,
            history=history,
        )
        # A sliced absorb resumes in the next batch without waiting for a new commit.
        resume = bounds.policy is Policy.ABSORB and batch.tasks > 0
        pending = pending or resume or batch.conflicts > 0 or work.kind is not ProcessType.RECLUSTER
        if not pending and batch.failures == 0:  # every planned task committed: the depth target is met there
            tracked.lag.clustered(snapshot.version, time.time())
        failures.clear(tracked.uri)  # its work ran through
    tracked.pending = pending
    committed = [o.version for o in outcomes if o.status is CommitStatus.COMMITTED and o.version is not None]
    tracked.awaiting_version = max([tracked.awaiting_version, *committed])
    tracked.totals = tracked.totals + batch
    info = tracked.state.info(tracked.key)
    status = table_status(
        tracked,
        info,
        bounds,
        pending=pending,
        failure=failures.get(tracked.uri),
        target_lag_seconds=work.config.target_lag_seconds,
    )
    record = metrics_record(
        tracked.uri,
        tracked.version,
        info,
        {s.level: s.threshold for s in status.levels},
        BatchActions(**batch.to_dict(), duration_seconds=time.monotonic() - started),
        pending=pending,
        policy=str(bounds.policy),
        beta=beta,
        reasons=[str(o.task.reason) for o in outcomes] or [work.reason],
        errors=[f"{o.status}: {o.reason}" for o in outcomes if o.status is not CommitStatus.COMMITTED],
        skipped_events=skipped_events,
        deletions=(
            sum(b.has_deletion_vector for b in tracked.state.blocks),
            sum(b.deleted_rows for b in tracked.state.blocks),
        ),
        time_like=time_like,
        benefit=status.benefit.to_dict() if status.benefit else None,
    )
    return TableReport(status, snapshot, record)
