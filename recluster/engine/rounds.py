"""Recluster rounds: plan -> execute -> commit, repeated for FINAL until nothing is left or no progress.

The loop Databend keeps in its interpreter: each round re-reads the snapshot (the Delta log is the source
of truth), plans with `select_merge_tasks`, runs independent tasks concurrently on Spark, commits each
task atomically, and logs key=value lines with reason codes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, cast

from deltalake import DeltaTable

from recluster.core.blocks import LEVEL_CONSTANT, Block, WrittenFile, new_run_id
from recluster.core.depth import depth_profile
from recluster.core.keys import ClusterKey
from recluster.core.metrics import ClusteringInfo, clustering_info
from recluster.core.outcomes import CommitOutcome, OutcomeTotals
from recluster.core.selection import select_merge_tasks
from recluster.core.selection.plan import MergeTask, Policy, ReclusterPlan
from recluster.delta.commit import LIQUID_PROVIDER, commit_task
from recluster.delta.log_state import SnapshotLog
from recluster.delta.row_tracking import RowTracking, materialized_columns, row_tracking_for
from recluster.delta.snapshot import TableSnapshot, load_snapshot, open_table
from recluster.delta.storage import require_safe_commits, require_writable
from recluster.engine.api import open_checked_table, selection_bounds
from recluster.engine.ranges import prepare_range_bounds
from recluster.merge.curve_column import CurveSpec
from recluster.merge.kernel import output_spec
from recluster.merge.placement import merge_task, needs_spark
from recluster.settings import Settings

log = logging.getLogger(__name__)

BlockFilter = Callable[[Block], bool]
Progress = Callable[[str, dict[str, Any]], None]


class StopReason(StrEnum):
    """Why a `recluster run` stopped: the reason code of its logs and of `run --json`."""

    WITHIN_THRESHOLD = "within_threshold"
    ROUND_DONE = "round_done"
    DRY_RUN = "dry_run"
    FILE_LIMIT = "file_limit"
    NO_PROGRESS = "no_progress"
    MAX_ROUNDS = "max_rounds"


@dataclass(frozen=True, slots=True)
class ReclusterResult:
    """What a `recluster run` did: counts, before/after clustering, the plans, why it stopped."""

    table: str
    rounds: int
    totals: OutcomeTotals
    stop_reason: StopReason
    before: ClusteringInfo
    after: ClusteringInfo
    plans: tuple[ReclusterPlan, ...] = field(default=())
    seconds: float = 0.0
    policy: str = Policy.LEVELS
    """The selection policy that planned the rounds."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "rounds": self.rounds,
            **self.totals.to_dict(),
            "stop_reason": str(self.stop_reason),
            "policy": self.policy,
            "seconds": self.seconds,
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
            "plans": [str(plan) for plan in self.plans],
        }


def final_pool_depth(blocks: Sequence[Block]) -> tuple[int, int]:
    """(total block depth, unclustered files) over what FINAL works on: both fall while it progresses."""
    pool = [b for b in blocks if b.level != LEVEL_CONSTANT]
    clustered = [b for b in pool if b.clustered]
    if not clustered:
        return 0, len(pool)
    profile = depth_profile([b.min_key for b in clustered], [b.max_key for b in clustered])  # type: ignore[misc]
    return int(profile.block_depth.sum()), len(pool) - len(clustered)


def write_task(
    spark: Any, task: MergeTask, snapshot: TableSnapshot, *, settings: Settings, run_id: str
) -> list[WrittenFile]:
    """Merge one task where `placement_of` says: its outputs are written into the table location, not yet
    committed."""
    spec = output_spec(
        task,
        table_root=snapshot.uri,
        data_schema=snapshot.data_schema,
        properties=snapshot.properties,
        key=snapshot.key.names,
        fingerprint=snapshot.key.fingerprint,
        run_id=run_id,
        target_rows=settings.clustering.target_rows,
        target_file_bytes=settings.clustering.target_file_bytes,
        storage_options=snapshot.storage_options,
        parquet=settings.merge.parquet,
        curve=CurveSpec.of(snapshot.key),
        row_tracking=task_row_tracking(task, snapshot),
    )
    return merge_task(spark, task, spec, settings)


def task_row_tracking(task: MergeTask, snapshot: TableSnapshot) -> RowTracking | None:
    """The row ids a merge of `task` keeps (None: the table tracks none), from the log at the snapshot's version
    (replayed once for all the snapshot's tasks)."""
    if materialized_columns(snapshot.properties) is None:
        return None
    return row_tracking_for(snapshot.properties, [block.path for block in task.files], snapshot.log_state().row_ids)


def run_task(
    spark: Any,
    task: MergeTask,
    snapshot: TableSnapshot,
    *,
    settings: Settings,
    run_id: str,
    task_id: str,
    pool: str | None = None,
) -> CommitOutcome:
    """Merge one task on Spark (in the FAIR scheduler `pool` when given) and commit it (or clean up)."""
    if pool is not None and spark is not None:
        from recluster.spark.session import use_scheduler_pool

        use_scheduler_pool(spark, pool)
    return commit_task(
        task,
        write_task(spark, task, snapshot, settings=settings, run_id=run_id),
        table_uri=snapshot.uri,
        storage_options=snapshot.storage_options,
        read_version=snapshot.version,
        run_id=run_id,
        task_id=task_id,
        settings=settings.commit,
        clustering_provider=LIQUID_PROVIDER if snapshot.key.liquid else None,
        log=snapshot.log,
    )


def execute_plan(
    spark: Any,
    plan: ReclusterPlan,
    snapshot: TableSnapshot,
    *,
    settings: Settings,
    run_id: str,
    pool: str | None = None,
    max_concurrent: int | None = None,
) -> list[CommitOutcome]:
    """Run a plan's independent tasks concurrently (Spark schedules their jobs side by side), at most
    `max_concurrent` (default: clustering.max_tasks_per_round) at once, in the scheduler `pool`."""
    if not plan.tasks:
        return []
    workers = min(len(plan.tasks), max_concurrent or settings.clustering.max_tasks_per_round)
    with ThreadPoolExecutor(max_workers=workers) as executor:
        futures = [
            executor.submit(
                run_task,
                spark,
                task,
                snapshot,
                settings=settings,
                run_id=run_id,
                task_id=f"{run_id}-v{plan.read_version}-t{i}",
                pool=pool,
            )
            for i, task in enumerate(plan.tasks)
        ]
        return [future.result() for future in futures]


def recluster_table(
    uri: str,
    snapshot_loader: Callable[[], TableSnapshot],
    *,
    settings: Settings,
    spark_factory: Callable[[], Any],
    final: bool = False,
    block_filter: BlockFilter | None = None,
    file_limit: int | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    policy: str | None = None,
    beta: float | None = None,
) -> ReclusterResult:
    """One round, or FINAL rounds until within threshold, no progress, the file limit or max rounds.

    `policy`/`beta` override the settings and the table property for this run."""
    started = time.monotonic()
    run_id = new_run_id()
    snapshot = snapshot_loader()
    if not dry_run:
        require_safe_commits(snapshot.uri, snapshot.storage_options, settings.commit.allow_unsafe_single_writer)
        if prepare_range_bounds(snapshot):
            snapshot = snapshot_loader()
    before = clustering_info(snapshot.blocks, snapshot.key)
    totals = OutcomeTotals()
    plans: list[ReclusterPlan] = []
    rounds = 0
    spark = None
    stop_reason = StopReason.WITHIN_THRESHOLD
    while True:
        files_left = None if file_limit is None else file_limit - totals.files_removed
        if files_left is not None and files_left < 1:
            stop_reason = StopReason.FILE_LIMIT
            break
        candidates = snapshot.blocks if block_filter is None else [b for b in snapshot.blocks if block_filter(b)]
        bounds = selection_bounds(settings, snapshot, files_left, policy=policy, beta=beta)
        plan = select_merge_tasks(uri, snapshot.version, candidates, bounds, final=final)
        plans.append(plan)
        log.info("recluster plan table=%s round=%d tasks=%d", uri, rounds + 1, len(plan.tasks))
        if plan.empty:
            stop_reason = StopReason.WITHIN_THRESHOLD if rounds == 0 or final else StopReason.ROUND_DONE
            break
        if dry_run:
            stop_reason = StopReason.DRY_RUN
            break
        if rounds == 0:
            require_writable(snapshot.uri, "table location")
        if spark is None and needs_spark(plan.tasks, settings):
            spark = spark_factory()
        rounds += 1
        if progress:
            progress(
                "round",
                {"round": rounds, "tasks": len(plan.tasks), "bytes": sum(t.bytes for t in plan.tasks)},
            )
        depth_before, unclustered_before = final_pool_depth(candidates)
        conflicts_before = totals.conflicts
        for outcome in execute_plan(spark, plan, snapshot, settings=settings, run_id=run_id):
            totals = totals.plus(outcome)
            log.info("recluster %s table=%s %s", outcome, uri, outcome.task)
            if progress:
                progress("task", {"status": str(outcome.status), "bytes": outcome.task.bytes})
        snapshot = snapshot_loader()
        if not final:
            stop_reason = StopReason.ROUND_DONE
            break
        after_candidates = [b for b in snapshot.blocks if block_filter is None or block_filter(b)]
        # Progress: less depth or fewer unclustered files (merging those adds their depth to the total); a round
        # that lost a commit to a concurrent change re-plans on the new snapshot (bounded by max_rounds)
        depth_after, unclustered_after = final_pool_depth(after_candidates)
        stalled = depth_after >= depth_before and unclustered_after >= unclustered_before
        if stalled and totals.conflicts == conflicts_before:
            stop_reason = StopReason.NO_PROGRESS
            log.warning("recluster final loop stop reason=no_progress table=%s round=%d", uri, rounds)
            break
        if rounds >= settings.clustering.max_final_rounds:
            stop_reason = StopReason.MAX_ROUNDS
            break
    return ReclusterResult(
        table=uri,
        rounds=rounds,
        stop_reason=stop_reason,
        before=before,
        after=clustering_info(snapshot.blocks, snapshot.key) if rounds else before,
        plans=tuple(plans),
        seconds=time.monotonic() - started,
        policy=plans[-1].policy if plans else Policy.LEVELS,
        totals=totals,
    )


@dataclass(frozen=True, slots=True)
class SnapshotLoader:
    """Re-reads a table's latest snapshot; the key is resolved and the table checked once, up front."""

    uri: str
    key: ClusterKey
    partition_columns: tuple[str, ...]
    storage_options: Mapping[str, str] = field(repr=False)
    opened: list[DeltaTable] = field(default_factory=list, repr=False, compare=False)
    """The table as opened to check it, read by the first call (opening a million-file table costs what listing
    it does); later calls open it anew."""
    logs: list[SnapshotLog] = field(default_factory=list, repr=False, compare=False)
    """The log of the last snapshot: a reload at the same version (nothing committed) shares its replay."""

    def __call__(self) -> TableSnapshot:
        table = self.opened.pop() if self.opened else open_table(self.uri, self.storage_options)
        last = self.logs.pop() if self.logs else None
        snapshot = load_snapshot(table, self.key, uri=self.uri, storage_options=self.storage_options, log=last)
        self.logs.append(cast(SnapshotLog, snapshot.log))
        return snapshot


def snapshot_loader(
    uri: str, settings: Settings, key_names: Sequence[str] | None, *, keyless: bool = False
) -> SnapshotLoader:
    """Loads the table's current snapshot on each call; `keyless` accepts a table without a cluster key
    (optimizing compacts it; reclustering needs a key)."""
    table, key, options = open_checked_table(uri, settings=settings, cluster_by=key_names, keyless=keyless)
    return SnapshotLoader(uri, key, tuple(table.metadata().partition_columns), dict(options), [table])
