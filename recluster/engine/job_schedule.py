"""Which tables get work in one scheduling pass, and which work (docs/operations.md#self-optimizing).

Reclustering comes first (a table with new foreign commits or work left over is planned, and the plan made here is
the one that runs); then the optimizing triggers. Reclustering and optimizing share the optimizer groups: per group
the policy orders tables with due work, and a table over its quota waits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from recluster.core.optimizing import OptimizingConfig, pending_optimizing, quiet_until, table_health
from recluster.core.scheduling import Candidate, ProcessType, TableHistory, schedule
from recluster.core.target_lag import lag_deadline
from recluster.delta.history import HistoryStore
from recluster.engine.backoff import FailureBook
from recluster.engine.job_state import TrackedTable
from recluster.engine.optimizer import history_of
from recluster.engine.planning import PlannedProcess, plan_process
from recluster.engine.rounds import SnapshotLoader
from recluster.settings import Settings


@dataclass(frozen=True, slots=True)
class DueWork:
    """A table's work this pass: the process `kind` (None: nothing due) and why; a recluster carries its plan."""

    table: str
    config: OptimizingConfig
    kind: ProcessType | None
    reason: str
    planned: PlannedProcess | None = None

    def __str__(self) -> str:
        return f"table={self.table} work={self.kind} reason={self.reason} group={self.config.group}"


@dataclass(frozen=True, slots=True)
class SchedulePass:
    """One pass: work to run now (in the policy's order), work waiting for its group's quota, and tables whose
    look at their state failed."""

    run: tuple[DueWork, ...] = ()
    waiting: tuple[DueWork, ...] = ()
    failed: tuple[tuple[str, Exception], ...] = ()


def loader_of(tracked: TrackedTable) -> SnapshotLoader:
    """Reloads a tracked table from its log (after range bounds changed under it)."""
    return SnapshotLoader(tracked.uri, tracked.key, tracked.partition_columns, tracked.storage_options)


def due_work(
    tracked: TrackedTable,
    config: OptimizingConfig,
    *,
    foreign: bool,
    past: TableHistory,
    now: float,
    settings: Settings,
) -> DueWork:
    """Reclustering first (new foreign commits or work left over), planned within the batch budget; then the
    optimizing triggers. Marks the table quiet until its next interval trigger when nothing is due. Nothing while the
    table is paused (benefit.pause_after_days)."""
    if config.recluster_enabled and tracked.version < tracked.awaiting_version:
        return DueWork(tracked.uri, config, None, "awaiting_own_commit")  # a plan now would redo our last rewrite
    if tracked.paused is not None:  # no query read it lately (docs/benefit.md#pausing-tables-no-query-reads)
        tracked.pending = tracked.pending or foreign  # planned once a query is seen again
        return DueWork(tracked.uri, config, None, str(tracked.paused))
    if config.recluster_enabled and (foreign or tracked.pending):
        stream = settings.stream
        planned = plan_process(
            ProcessType.RECLUSTER,
            tracked.snapshot(),
            loader_of(tracked),
            settings=settings,
            config=config,
            max_tasks=stream.max_tasks_per_batch,
            max_bytes=stream.max_bytes_per_batch,
        )
        if planned.plan.tasks:
            reason = str(planned.plan.tasks[0].reason)  # absorb_ratio, depth_above_..
            return DueWork(tracked.uri, config, ProcessType.RECLUSTER, reason, planned)
        tracked.pending = False
        tracked.lag.clustered(tracked.version, now)  # within its depth target: its commits so far are clustered
    health = table_health(tracked.state.blocks, config)
    pending = pending_optimizing(health, config, past, now=now)
    tracked.quiet_until = quiet_until(health, config, past) if pending.type is None else 0.0
    return DueWork(tracked.uri, config, pending.type, pending.reason)


def schedule_pass(
    tracked: Mapping[str, TrackedTable],
    touched: Mapping[str, bool],
    config_of: Callable[[TrackedTable], OptimizingConfig | None],
    *,
    settings: Settings,
    history: HistoryStore,
    failures: FailureBook,
) -> SchedulePass:
    """One pass over every tracked table. `touched` maps tables with new commits in this batch to whether a commit
    was not ours; `config_of` is a table's self-optimizing config (None: a bad property, the table is left alone)."""
    now = time.time()
    due: dict[str, DueWork] = {}
    candidates = []
    failed: list[tuple[str, Exception]] = []
    for uri, table in list(tracked.items()):
        if uri not in touched and not table.pending and now < table.quiet_until:
            continue  # idle: no commit, no work left, no interval trigger due yet
        config = config_of(table)
        if config is None or failures.waiting(uri, now):
            continue
        past = history_of(history, uri, settings, now)
        try:
            work = due_work(table, config, foreign=touched.get(uri, False), past=past, now=now, settings=settings)
        except Exception as error:
            failed.append((uri, error))
            continue
        if work.kind is None:
            continue
        due[uri] = work
        deadline = lag_deadline(table.lag, config.target_lag_seconds)
        candidates.append(
            Candidate(uri, config.group, config.quota, work.kind, past.busy_seconds, past.last_optimized, deadline)
        )
    run, waiting = schedule(
        candidates, settings.self_optimizing.groups, window_seconds=settings.self_optimizing.quota_window_seconds
    )
    for left in set(due) - {c.table for c in run} - {c.table for c in waiting}:
        tracked[left].pending = True  # its group ran others first: looked at again next pass, new commit or not
    return SchedulePass(tuple(due[c.table] for c in run), tuple(due[c.table] for c in waiting), tuple(failed))
