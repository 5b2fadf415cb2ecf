"""Where every process of the job and of `recluster optimize` is planned: range bounds made current first, then one
plan, cut to a budget when the caller has one (docs/architecture.md, "The flow of a batch").

Planning before the bounds are current would plan on the old curve and be thrown away after the first merge: the
bounds come first, and the plan made here is the one that runs (`optimizer.run_process` never plans again).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from recluster.core.optimizing import OptimizingConfig, plan_optimizing
from recluster.core.scheduling import ProcessType
from recluster.core.selection import select_merge_tasks
from recluster.core.selection.plan import MergeTask, ReclusterPlan
from recluster.delta.snapshot import TableSnapshot
from recluster.engine.api import selection_bounds
from recluster.engine.ranges import prepare_range_bounds
from recluster.settings import Settings


@dataclass(frozen=True, slots=True)
class PlannedProcess:
    """One process to run: its type, the snapshot it was planned on, the plan, and whether a budget left work out."""

    kind: ProcessType
    snapshot: TableSnapshot
    plan: ReclusterPlan
    work_left: bool = False

    def __str__(self) -> str:
        left = " work_left=true" if self.work_left else ""
        return f"{self.kind} table={self.snapshot.uri} version={self.snapshot.version} {self.plan}{left}"


def recluster_plan(snapshot: TableSnapshot, settings: Settings) -> ReclusterPlan:
    """The recluster round the table's policy would run now (empty: nothing above threshold, or no key)."""
    if snapshot.key.keyless:
        return ReclusterPlan(snapshot.uri, snapshot.version, False, ())
    return select_merge_tasks(
        snapshot.uri, snapshot.version, snapshot.blocks, selection_bounds(settings, snapshot, None)
    )


def plan_process(
    kind: ProcessType,
    snapshot: TableSnapshot,
    loader: Callable[[], TableSnapshot],
    *,
    settings: Settings,
    config: OptimizingConfig,
    max_tasks: int | None = None,
    max_bytes: int | None = None,
    dry_run: bool = False,
) -> PlannedProcess:
    """Plan one process: a curve key's range bounds made current first (the snapshot reloaded when they changed;
    a dry run publishes nothing and plans on the bounds it finds), then the recluster round or the optimizing plan,
    cut to `max_tasks` / `max_bytes` (the first task always fits)."""
    if not dry_run and prepare_range_bounds(snapshot):
        snapshot = loader()
    if kind is ProcessType.RECLUSTER:
        plan = recluster_plan(snapshot, settings)
    else:
        bounds = selection_bounds(settings, snapshot, None)
        plan = plan_optimizing(snapshot.uri, snapshot.version, snapshot.blocks, config, kind, bounds)
    chosen = budgeted(plan.tasks, max_tasks, max_bytes)
    return PlannedProcess(kind, snapshot, replace(plan, tasks=chosen), len(chosen) < len(plan.tasks))


def budgeted(tasks: tuple[MergeTask, ...], max_tasks: int | None, max_bytes: int | None) -> tuple[MergeTask, ...]:
    """The leading tasks within the budget; the first task always fits, so every plan makes progress."""
    chosen: list[MergeTask] = []
    spent = 0
    for task in tasks:
        over_tasks = max_tasks is not None and len(chosen) >= max_tasks
        over_bytes = max_bytes is not None and chosen and spent + task.bytes > max_bytes
        if over_tasks or over_bytes:
            break
        chosen.append(task)
        spent += task.bytes
    return tuple(chosen)
