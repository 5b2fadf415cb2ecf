"""Running self-optimizing processes and reporting on them (docs/operations.md#self-optimizing): the engine behind
`recluster optimize`, `recluster status` and the job's scheduled optimizing.

A process reads the snapshot, decides (or is told) its type, plans with recluster/core/optimizing.py, runs the
merges in its group's FAIR pool with the group's concurrency bound, commits each task atomically like a
recluster merge, and appends a start row and an end row to the history table.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from recluster.core.blocks import new_run_id
from recluster.core.estimate.projection import EstimateVsActual
from recluster.core.metrics import clustering_info
from recluster.core.optimizing import (
    OptimizingConfig,
    PendingWork,
    TableHealth,
    optimizing_config,
    pending_optimizing,
    table_health,
)
from recluster.core.outcomes import CommitOutcome, OutcomeTotals
from recluster.core.scheduling import ProcessRecord, ProcessStatus, ProcessType, TableHistory, TableState, table_history
from recluster.core.selection.plan import ReclusterPlan
from recluster.core.target_lag import LagSummary, replayed_lag
from recluster.delta.history import STALE_PROCESS_SECONDS, HistoryStore, new_process_id
from recluster.delta.log import PRODUCER, read_commits
from recluster.delta.snapshot import TableSnapshot
from recluster.delta.storage import require_safe_commits
from recluster.engine.estimate_record import estimate_vs_actual
from recluster.engine.planning import PlannedProcess, plan_process, recluster_plan
from recluster.engine.rounds import SnapshotLoader, execute_plan, recluster_table
from recluster.merge.placement import needs_spark
from recluster.settings import Settings, history_location

log = logging.getLogger(__name__)

OPTIMIZING_TARGET_ROWS = 1 << 40
"""Optimizing outputs are sized by bytes alone."""


@dataclass(frozen=True, slots=True)
class OptimizeResult:
    """What one optimizing process did (or would do, with --dry-run)."""

    table: str
    type: ProcessType | None
    reason: str
    outcome: str
    """done, nothing_due, disabled or dry_run."""
    plan: ReclusterPlan | None
    totals: OutcomeTotals
    before: TableHealth
    after: TableHealth
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "type": None if self.type is None else str(self.type),
            "reason": self.reason,
            "outcome": self.outcome,
            "plan": None if self.plan is None else str(self.plan),
            **self.totals.to_dict(),
            "seconds": round(self.seconds, 3),
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
        }


def history_store(settings: Settings, *, deferred: bool = False) -> HistoryStore:
    return HistoryStore(
        history_location(settings),
        dict(settings.storage_options),
        window_seconds=settings.self_optimizing.quota_window_seconds,
        deferred=deferred,
    )


def history_of(store: HistoryStore | None, table: str, settings: Settings, now: float) -> TableHistory:
    if store is None:
        return TableHistory()
    return table_history(
        store.records_of(table),
        table,
        now=now,
        window_seconds=settings.self_optimizing.quota_window_seconds,
        stale_seconds=STALE_PROCESS_SECONDS,
    )


def _optimizing_settings(settings: Settings, config: OptimizingConfig) -> Settings:
    """Merges of an optimizing process cut their outputs at the table's target size (bytes only: a row
    target would cut narrow rows into fragments again)."""
    clustering = settings.clustering.model_copy(
        update={"target_file_bytes": config.target_size, "target_rows": OPTIMIZING_TARGET_ROWS}
    )
    return settings.model_copy(update={"clustering": clustering})


def _oversized_partitions(plan: ReclusterPlan) -> set[Any]:
    """Partitions a full plan had to split into several tasks (their outputs would overlap)."""
    seen: dict[Any, int] = {}
    for task in plan.tasks:
        seen[task.partition] = seen.get(task.partition, 0) + 1
    return {partition for partition, count in seen.items() if count > 1}


def run_process(
    planned: PlannedProcess,
    loader: Callable[[], TableSnapshot],
    *,
    settings: Settings,
    config: OptimizingConfig,
    spark_factory: Callable[[], Any],
    history: HistoryStore | None,
) -> tuple[list[CommitOutcome], OutcomeTotals]:
    """Run one planned optimizing or recluster process exactly as planned and record it in the history.

    `full` rewrites each partition as one task; a partition too big for one bounded task gets FINAL
    recluster rounds instead (the same end state, written in bounded, committed steps).
    """
    kind, snapshot, plan = planned.kind, planned.snapshot, planned.plan
    group = settings.self_optimizing.groups[config.group]
    # a keyless table has no sorted run to keep whole: its bounded tasks are the compaction
    oversized = _oversized_partitions(plan) if kind is ProcessType.FULL and not snapshot.key.keyless else set()
    if oversized:
        plan = ReclusterPlan(
            plan.table,
            plan.read_version,
            plan.final,
            tuple(t for t in plan.tasks if t.partition not in oversized),
            plan.skipped,
        )
    started = time.time()
    record = ProcessRecord(
        new_process_id(),
        snapshot.uri,
        kind,
        config.group,
        started,
        files_in=sum(len(t.files) for t in plan.tasks),
        bytes_in=sum(t.bytes for t in plan.tasks),
        depth=clustering_info(snapshot.blocks).table.average_depth,
    )
    if history is not None and kind is not ProcessType.RECLUSTER:  # reclusters are short: their end row only
        history.append(record)
    totals = OutcomeTotals()
    status, error = ProcessStatus.SUCCESS, None
    outcomes: list[CommitOutcome] = []
    try:
        if plan.tasks:
            outcomes = execute_plan(
                spark_factory() if needs_spark(plan.tasks, settings) else None,
                plan,
                snapshot,
                settings=settings if kind is ProcessType.RECLUSTER else _optimizing_settings(settings, config),
                run_id=new_run_id(),
                pool=config.group,
                max_concurrent=group.max_concurrent_tasks,
            )
        for outcome in outcomes:
            totals = totals.plus(outcome)
            log.info("optimize type=%s table=%s %s %s", kind, snapshot.uri, outcome, outcome.task)
        if oversized:
            result = recluster_table(
                snapshot.uri,
                loader,
                settings=settings,
                spark_factory=spark_factory,
                final=True,
                block_filter=lambda block: block.partition in oversized,
            )
            totals = totals + result.totals
        if totals.failures:
            status, error = ProcessStatus.FAILED, f"{totals.failures} task(s) failed"
    except Exception as failure:
        status, error = ProcessStatus.FAILED, str(failure).splitlines()[0] if str(failure) else repr(failure)
        raise
    finally:
        if history is not None:
            history.append(
                record.finished(
                    time.time(),
                    status,
                    files_out=totals.files_added,
                    bytes_out=totals.bytes_written,
                    rows=totals.rows_rewritten,
                    error=error,
                )
            )
    return outcomes, totals


def optimize_table(
    loader: SnapshotLoader,
    *,
    settings: Settings,
    spark_factory: Callable[[], Any],
    kind: ProcessType | None = None,
    dry_run: bool = False,
    history: HistoryStore | None = None,
) -> OptimizeResult:
    """`recluster optimize`: the given type, or whatever is due by the table's triggers."""
    started = time.monotonic()
    snapshot = loader()
    config = optimizing_config(snapshot.properties, settings.self_optimizing)
    before = table_health(snapshot.blocks, config)
    if not config.enabled:
        return OptimizeResult(
            snapshot.uri, kind, "self-optimizing.enabled=false", "disabled", None, OutcomeTotals(), before, before
        )
    pending = (
        PendingWork(kind, "requested")
        if kind is not None
        else pending_optimizing(
            before, config, history_of(history, snapshot.uri, settings, time.time()), now=time.time()
        )
    )
    if pending.type is None:
        return OptimizeResult(snapshot.uri, None, pending.reason, "nothing_due", None, OutcomeTotals(), before, before)
    if not dry_run:  # before the range bounds are published
        require_safe_commits(snapshot.uri, snapshot.storage_options, settings.commit.allow_unsafe_single_writer)
    planned = plan_process(pending.type, snapshot, loader, settings=settings, config=config, dry_run=dry_run)
    if dry_run:
        return OptimizeResult(
            snapshot.uri, pending.type, pending.reason, "dry_run", planned.plan, OutcomeTotals(), before, before
        )
    _, totals = run_process(
        planned, loader, settings=settings, config=config, spark_factory=spark_factory, history=history
    )
    after = table_health(loader().blocks, config)
    return OptimizeResult(
        snapshot.uri,
        pending.type,
        pending.reason,
        "done",
        planned.plan,
        totals,
        before,
        after,
        time.monotonic() - started,
    )


@dataclass(frozen=True, slots=True)
class TableStatusReport:
    """`recluster status` for one table."""

    table: str
    version: int
    state: TableState
    pending: PendingWork
    recluster_pending: bool
    config: OptimizingConfig
    occupation: float
    history: TableHistory
    health: TableHealth
    average_depth: float
    notes: tuple[str, ...] = field(default=())
    estimate: EstimateVsActual | None = None
    """What `estimate` projected when the job took the table up, and what happened since (None: no projection)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "version": self.version,
            "state": str(self.state),
            "pending": None if self.pending.type is None else str(self.pending.type),
            "pending_reason": self.pending.reason,
            "recluster_pending": self.recluster_pending,
            "self_optimizing_enabled": self.config.enabled,
            "recluster_enabled": self.config.recluster_enabled,
            "group": self.config.group,
            "quota": self.config.quota,
            "quota_occupation": self.occupation,
            "last": {str(kind): _iso(t) for kind, t in sorted(self.history.last.items())},
            "running": None if self.history.running is None else str(self.history.running),
            "health": self.health.to_dict(),
            "average_depth": self.average_depth,
            "estimate": None if self.estimate is None else self.estimate.to_dict(),
        }


def _iso(seconds: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="seconds")


def table_state(config: OptimizingConfig, history: TableHistory, pending: PendingWork, recluster: bool) -> TableState:
    if not config.enabled and not config.recluster_enabled:
        return TableState.DISABLED
    if history.running is not None:
        return TableState(str(history.running))
    if pending.type is not None or (recluster and config.recluster_enabled):
        return TableState.PENDING
    return TableState.IDLE


def table_status(
    snapshot: TableSnapshot, *, settings: Settings, history: HistoryStore | None, now: float | None = None
) -> TableStatusReport:
    now = time.time() if now is None else now
    config = optimizing_config(snapshot.properties, settings.self_optimizing)
    health = table_health(snapshot.blocks, config)
    past = history_of(history, snapshot.uri, settings, now)
    pending = pending_optimizing(health, config, past, now=now)
    recluster = not recluster_plan(snapshot, settings).empty
    window = settings.self_optimizing.quota_window_seconds
    depth = clustering_info(snapshot.blocks).table.average_depth
    return TableStatusReport(
        snapshot.uri,
        snapshot.version,
        table_state(config, past, pending, recluster),
        pending,
        recluster,
        config,
        past.busy_seconds / (window * config.quota),
        past,
        health,
        depth,
        estimate=None if history is None else estimate_vs_actual(snapshot, history.records(), depth, now),
    )


STATUS_LAG_COMMITS = 100
"""The newest commits `recluster status` reads to replay a table's time-to-clustered (one log file read each)."""


def replayed_table_lag(snapshot: TableSnapshot, *, target_seconds: float | None, within_target: bool) -> LagSummary:
    """`recluster status`: a table's lag replayed from its newest `STATUS_LAG_COMMITS` commits (core/target_lag.py
    `replayed_lag`; commits cleaned up behind a checkpoint are left out)."""
    first = max(0, snapshot.version - STATUS_LAG_COMMITS + 1)
    commits = read_commits(snapshot.uri, first, snapshot.version, snapshot.storage_options)
    data = [(c.version, c.timestamp / 1000, c.producer == PRODUCER) for c in commits if c.adds and c.timestamp]
    return replayed_lag(data, within_target, time.time(), target_seconds)
