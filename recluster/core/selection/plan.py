"""What a round plans (docs/concepts.md#selection-policies): the values every selection policy returns. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from recluster.core.block_table import BlockTable
from recluster.core.blocks import MAX_LEVEL, Block, Partition
from recluster.core.ranks import IntArray


class Policy(StrEnum):
    """The selection policies (docs/concepts.md#selection-policies); FINAL rounds are the same for both."""

    LEVELS = "levels"
    ABSORB = "absorb"


class Reason(StrEnum):
    """Why a task exists or why blocks were left alone (reason codes for logs and the plan)."""

    DEPTH_ABOVE_THRESHOLD = "depth_above_threshold"
    UNCLUSTERED = "unclustered"
    FINAL = "final"
    OLDER_KEY = "older_key_fingerprint"
    OVER_SIZE_BOUND = "over_size_bound"
    ABSORB_RATIO = "absorb_ratio"
    """absorb: rows(newer runs) >= beta * rows(files of the run that overlap newer data)."""
    ABSORB_RESUME = "absorb_resume"
    """absorb: the next slice of an absorb in progress (runs it takes in remain, or its run overlaps itself)."""
    ABSORB_BELOW_RATIO = "absorb_below_ratio"
    """absorb: no run reaches the ratio; nothing to do."""
    WATERMARK_ABSORB = "watermark_absorb"
    """absorb on a time-like table: the extra depth paid reached its share of the head's rewrite (rent or buy)."""
    WATERMARK_RENT = "watermark_rent"
    """absorb on a time-like table: the depth paid so far is below that share; the appends wait."""
    LATE_RUN_ABSORB = "late_run_absorb"
    """absorb with late rows from anywhere: the appends go into the late run, rows above the main run extend it."""
    LATE_RUN_REWRITE = "late_run_rewrite"
    """absorb with late rows from anywhere: the late run's rent since it began (its depth and its rewrites) reached
    a rewrite of everything; the late run merges into the main run."""
    LATE_RUN_RENT = "late_run_rent"
    """absorb with late rows from anywhere: the waiting appends' depth is below its share; they wait."""
    SMALL_TABLE = "small_table"
    """A partition whose files fit in one target file: its key ranges are not worth separating; its files wait."""
    SMALL_TABLE_COMPACTION = "small_table_compaction"
    """A partition whose files fit in one target file gathered `small_table_files` of them: one file out."""
    MINOR = "minor_optimizing"
    MAJOR = "major_optimizing"
    FULL = "full_optimizing"


@dataclass(frozen=True, slots=True)
class SelectionBounds:
    """Immutable inputs of one selection (settings resolved for this table)."""

    depth_ratio: float
    max_depth_threshold: float
    max_task_bytes: int
    max_task_files: int
    max_tasks: int
    key_fingerprint: str
    policy: Policy = Policy.LEVELS
    beta: float = 1.0
    """absorb: a run absorbs the newer runs once they hold beta times the rows of its files they overlap."""
    target_depth: float | None = None
    """absorb: when set, beta is scaled by target_depth / average_depth (lower while the table is deeper)."""
    target_rows: int | None = None
    """Rows per output file: the watermark cut waits until it closes at least half a file."""
    target_bytes: int | None = None
    """Bytes per output file at most (with `target_rows`: what one target file holds)."""
    small_table_files: int = 0
    """A partition whose files fit in one target file is compacted once it holds this many files, never
    reclustered before (docs/concepts.md#small-tables); 0: off, it is planned like any other."""


@dataclass(frozen=True, slots=True)
class UpperRun:
    """Outputs whose first key column starts above `above` belong to this run instead of the task's: an absorb
    into the late run extends the main run with the rows above its top (see `selection.late_run`)."""

    above: Any
    run_id: str
    horizon_ms: int


@dataclass(frozen=True, slots=True)
class MergeTask:
    """One bounded merge: these files, sorted together, become files of `output_level`."""

    partition: Partition
    level: int
    output_level: int
    files: tuple[Block, ...]
    reason: Reason
    depth: int
    """Depth of the point range the task was built around (0 for unclustered files)."""
    output_run: str | None = None
    """Run id written into the output names (absorb: the age of the run absorbing); None: the round's run id."""
    horizon_ms: int | None = None
    """absorb: age of the newest run this absorb takes in (written into the names, so slices resume)."""
    split_values: tuple[Any, ...] = ()
    """First-key-column values the outputs are cut at (below and above each): the bounds of the absorbing
    run's files left untouched inside the merged range, so the run stays one sorted run."""
    upper_run: UpperRun | None = None
    """Outputs above a value are written into another run (the value is among `split_values`)."""

    @property
    def bytes(self) -> int:
        return sum(b.bytes for b in self.files)

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.files)

    @property
    def live_rows(self) -> int:
        """Rows not hidden by deletion vectors: what the outputs must hold."""
        return sum(b.live_rows for b in self.files)

    @property
    def key_range(self) -> tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]:
        clustered = [b for b in self.files if b.clustered]
        if not clustered:
            return None, None
        low = min(clustered, key=lambda b: b.min_key or b"")
        high = max(clustered, key=lambda b: b.max_key or b"")
        return low.min_values, high.max_values

    def __str__(self) -> str:
        part = partition_text(self.partition)
        low, high = self.key_range
        run = "" if self.output_run is None else f" run={self.output_run}"
        if self.upper_run is not None:
            run += f" above {self.upper_run.above}: run={self.upper_run.run_id}"
        return (
            f"merge L{self.level}->L{self.output_level} partition={part} files={len(self.files)} "
            f"rows={self.rows} bytes={self.bytes} depth={self.depth} range={low}..{high} reason={self.reason}{run}"
        )


@dataclass(frozen=True, slots=True)
class Skipped:
    reason: Reason
    files: int
    detail: str = ""


@dataclass(frozen=True, slots=True)
class WatermarkDecision:
    """What the time-like absorb saw and decided for one partition (printed in plans, `info` and metrics)."""

    lag: Any
    watermark: Any
    accumulator: float
    threshold: float
    reason: Reason
    cut: bool
    """Whether the outputs are cut at the watermark (false while it would close less than half a file)."""

    def __str__(self) -> str:
        cut = "cut" if self.cut else "no cut"
        return (
            f"watermark={self.watermark} lag={self.lag} accumulator={self.accumulator:.3g}/{self.threshold:.3g} "
            f"({cut}) reason={self.reason}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "lag": str(self.lag),
            "watermark": str(self.watermark),
            "accumulator": self.accumulator,
            "threshold": self.threshold,
            "reason": str(self.reason),
            "cut": self.cut,
        }


@dataclass(frozen=True, slots=True)
class ReclusterPlan:
    """One round's plan for one table, anchored to the version it was read at."""

    table: str
    read_version: int
    final: bool
    tasks: tuple[MergeTask, ...]
    skipped: tuple[Skipped, ...] = ()
    policy: Policy = Policy.LEVELS
    beta: float | None = None
    """absorb: the beta this plan used (after the depth-target controller); None for levels."""
    watermarks: tuple[tuple[Partition, WatermarkDecision], ...] = ()
    """absorb: the time-like decision of each time-like partition (see `selection.watermark`)."""

    @property
    def empty(self) -> bool:
        return not self.tasks

    def __str__(self) -> str:
        beta = "" if self.beta is None else f" beta={self.beta:.3g}"
        lines = [
            f"plan table={self.table} read_version={self.read_version} policy={self.policy}{beta} "
            f"tasks={len(self.tasks)}"
        ]
        lines += [f"  {task}" for task in self.tasks]
        lines += [f"  skip reason={s.reason} files={s.files} {s.detail}".rstrip() for s in self.skipped]
        lines += [f"  time-like partition={partition_text(p)} {w}" for p, w in self.watermarks]
        return "\n".join(lines)


def partition_text(partition: Partition) -> str:
    return ",".join(f"{k}={v}" for k, v in partition) or "-"


def level_threshold(blocks_in_level: int, bounds: SelectionBounds) -> float:
    return min(max(blocks_in_level * bounds.depth_ratio, 1.0), bounds.max_depth_threshold)


def output_level(level: int) -> int:
    return min(level + 1, MAX_LEVEL)


def chunk_unclustered(files: BlockTable, indices: IntArray, bounds: SelectionBounds, limit: int) -> list[list[Block]]:
    """Unclustered files in bounded groups, smallest first (a single file is a valid group: it gains stats and a
    level), at most `limit` groups: only those are made into `Block`s (a table backfilled in one commit has a
    million such files). A file alone over the byte bound is left out (reported as over the size bound)."""
    fitting = indices[files.sizes_of(indices) <= bounds.max_task_bytes]
    if limit < 1 or not len(fitting):
        return []
    ordered = files.smallest_first(fitting)
    ends = np.cumsum(files.sizes_of(ordered))
    groups: list[list[Block]] = []
    start = 0
    while start < len(ordered) and len(groups) < limit:
        spent = int(ends[start - 1]) if start else 0
        stop = min(start + bounds.max_task_files, int(np.searchsorted(ends, spent + bounds.max_task_bytes, "right")))
        stop = max(stop, start + 1)
        groups.append(files.take(ordered[start:stop]))
        start = stop
    return groups


def bounded(candidates: Sequence[Block], bounds: SelectionBounds) -> list[Block]:
    """Smallest files first while within the byte and file bounds: most depth removed per byte."""
    chosen: list[Block] = []
    total = 0
    for block in sorted(candidates, key=lambda b: (b.bytes, b.path)):
        if len(chosen) >= bounds.max_task_files or total + block.bytes > bounds.max_task_bytes:
            break
        chosen.append(block)
        total += block.bytes
    return chosen
