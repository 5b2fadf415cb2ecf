"""Where one merge task runs: the one decision between the three placements of the same kernel.

Small tasks merge whole in this process; bigger ones are range-partitioned, in this process (spilling ranges to
disk) or over Spark tasks, as `merge.placement` says. Every placement writes the same files for the same task
(docs/guarantees.md, "Merge").
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from recluster.core.blocks import WrittenFile
from recluster.core.selection.plan import MergeTask
from recluster.merge.in_process import merge_in_process, merge_range_partitioned
from recluster.merge.kernel import OutputSpec
from recluster.merge.spark_tasks import execute_task
from recluster.settings import Settings


class Placement(StrEnum):
    """Where a merge task runs."""

    PROCESS = "process"
    """Whole, in this process: tasks of at most merge.in_process_max_bytes."""
    PROCESS_RANGES = "process_ranges"
    """Range-partitioned in this process, ranges spilled to merge.spill_dir."""
    SPARK_TASKS = "spark_tasks"
    """Range-partitioned over Spark tasks, Arrow pieces shuffled."""


def placement_of(task: MergeTask, settings: Settings) -> Placement:
    """The placement of `task`: whole in process up to merge.in_process_max_bytes; above it, Spark tasks when
    merge.placement is `spark`, or `auto` with a Spark master that is a cluster (not `local`)."""
    merge = settings.merge
    if task.bytes <= merge.in_process_max_bytes:
        return Placement.PROCESS
    if merge.placement == "spark" or (merge.placement == "auto" and not settings.spark.master.startswith("local")):
        return Placement.SPARK_TASKS
    return Placement.PROCESS_RANGES


def needs_spark(tasks: list[MergeTask] | tuple[MergeTask, ...], settings: Settings) -> bool:
    """Whether any of `tasks` runs in Spark tasks (a Spark session must then exist)."""
    return any(placement_of(task, settings) is Placement.SPARK_TASKS for task in tasks)


def merge_task(spark: Any, task: MergeTask, spec: OutputSpec, settings: Settings) -> list[WrittenFile]:
    """Merge `task` where `placement_of` says; its outputs are written into the table, not committed."""
    merge = settings.merge
    placement = placement_of(task, settings)
    if placement is Placement.PROCESS:
        return merge_in_process(task, spec, threads=merge.resolved_threads)
    if placement is Placement.PROCESS_RANGES:
        return merge_range_partitioned(task, spec, threads=merge.resolved_threads, spill_dir=merge.spill_dir)
    return execute_task(spark, task, spec)
