"""Which blocks to merge (DESIGN §5). Pure: blocks and bounds in, an immutable plan out, no I/O.

Policy `levels` (Databend's): per partition, per level from 0 upward, a level whose average depth exceeds
clamp(blocks * depth_ratio, 1, max_depth_threshold) gets work: the blocks covering its deepest point
range form one merge task, bounded in bytes and files. Disjoint ranges give independent tasks. FINAL
pools every level (and files of an older key) with threshold 1, so repeated rounds end fully clustered.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from recluster.blocks import LEVEL_CONSTANT, MAX_LEVEL, Block, Partition
from recluster.metrics import depth_profile


class Reason(StrEnum):
    """Why a task exists or why blocks were left alone (reason codes for logs and the plan)."""

    DEPTH_ABOVE_THRESHOLD = "depth_above_threshold"
    UNCLUSTERED = "unclustered"
    FINAL = "final"
    OLDER_KEY = "older_key_fingerprint"
    DELETION_VECTOR = "deletion_vector"
    OVER_SIZE_BOUND = "over_size_bound"
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

    @property
    def bytes(self) -> int:
        return sum(b.bytes for b in self.files)

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.files)

    @property
    def key_range(self) -> tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]:
        clustered = [b for b in self.files if b.clustered]
        if not clustered:
            return None, None
        low = min(clustered, key=lambda b: b.min_key or b"")
        high = max(clustered, key=lambda b: b.max_key or b"")
        return low.min_values, high.max_values

    def __str__(self) -> str:
        part = ",".join(f"{k}={v}" for k, v in self.partition) or "-"
        low, high = self.key_range
        return (
            f"merge L{self.level}->L{self.output_level} partition={part} files={len(self.files)} "
            f"rows={self.rows} bytes={self.bytes} depth={self.depth} range={low}..{high} reason={self.reason}"
        )


@dataclass(frozen=True, slots=True)
class Skipped:
    reason: Reason
    files: int
    detail: str = ""


@dataclass(frozen=True, slots=True)
class ReclusterPlan:
    """One round's plan for one table, anchored to the version it was read at."""

    table: str
    read_version: int
    final: bool
    tasks: tuple[MergeTask, ...]
    skipped: tuple[Skipped, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.tasks

    def __str__(self) -> str:
        lines = [f"plan table={self.table} read_version={self.read_version} tasks={len(self.tasks)}"]
        lines += [f"  {task}" for task in self.tasks]
        lines += [f"  skip reason={s.reason} files={s.files} {s.detail}".rstrip() for s in self.skipped]
        return "\n".join(lines)


def level_threshold(blocks_in_level: int, bounds: SelectionBounds) -> float:
    return min(max(blocks_in_level * bounds.depth_ratio, 1.0), bounds.max_depth_threshold)


def _bounded(candidates: Sequence[Block], bounds: SelectionBounds) -> list[Block]:
    """Smallest files first while within the byte and file bounds: most depth removed per byte."""
    chosen: list[Block] = []
    total = 0
    for block in sorted(candidates, key=lambda b: (b.bytes, b.path)):
        if len(chosen) >= bounds.max_task_files or total + block.bytes > bounds.max_task_bytes:
            break
        chosen.append(block)
        total += block.bytes
    return chosen


def _deepest_range_tasks(
    blocks: Sequence[Block], threshold: float, bounds: SelectionBounds, reason: Reason, budget: int
) -> tuple[list[list[Block]], list[int], int]:
    """Tasks around the deepest point ranges, deepest first, each over files no other task uses.

    Returns the file groups, their depths and how many candidate groups were over the size bounds.
    """
    profile = depth_profile([b.min_key for b in blocks], [b.max_key for b in blocks])  # type: ignore[misc]
    depth = profile.point_depth
    if not len(depth) or int(depth.max()) < 2 or float(profile.block_depth.mean()) <= threshold:
        return [], [], 0
    # Maximal runs of equal depth that no gap interrupts (some block spans each step from one point to
    # the next), visited deepest first; a run's covering blocks form a candidate.
    spanning = np.cumsum(np.bincount(profile.lo, minlength=len(depth))) - np.cumsum(
        np.bincount(profile.hi, minlength=len(depth))
    )
    change = np.flatnonzero((np.diff(depth) != 0) | (spanning[:-1] == 0)) + 1
    starts = np.concatenate(([0], change))
    ends = np.concatenate((change - 1, [len(depth) - 1]))
    order = np.lexsort((starts, -depth[starts]))
    used = np.zeros(len(blocks), dtype=bool)
    groups: list[list[Block]] = []
    depths: list[int] = []
    oversized = 0
    for run in order:
        run_depth = int(depth[starts[run]])
        if run_depth < 2 or len(groups) >= budget:
            break
        covering = np.flatnonzero((profile.lo <= ends[run]) & (profile.hi >= starts[run]))
        free = covering[~used[covering]]
        if len(free) < 2:
            continue
        candidates = [blocks[int(i)] for i in free]
        chosen = _bounded(candidates, bounds) if len(free) == len(covering) else []
        if len(chosen) < len(covering):
            # Cut by the bounds, or part of the run's files went to an earlier task (what is left may not
            # overlap): keep the free files meeting at the run's point where most of them meet, so the
            # files merged overlap each other and the merge really removes depth there.
            first, length = int(starts[run]), int(ends[run] - starts[run] + 1)
            low = np.clip(profile.lo[free] - first, 0, length)
            high = np.clip(profile.hi[free] - first + 1, 0, length)
            meeting = np.cumsum(np.bincount(low, minlength=length + 1) - np.bincount(high, minlength=length + 1))
            point = first + int(np.argmax(meeting[:length]))
            at_point = free[(profile.lo[free] <= point) & (profile.hi[free] >= point)]
            candidates = [blocks[int(i)] for i in at_point]
            chosen = _bounded(candidates, bounds)
        if len(chosen) < 2:
            oversized += len(candidates) >= 2  # files to merge were there, but not within the bounds
            continue
        chosen_paths = {b.path for b in chosen}
        used[[int(i) for i in covering if blocks[int(i)].path in chosen_paths]] = True
        groups.append(chosen)
        depths.append(run_depth)
    return groups, depths, oversized


def _partitions(blocks: Iterable[Block]) -> dict[Partition, list[Block]]:
    grouped: dict[Partition, list[Block]] = {}
    for block in blocks:
        grouped.setdefault(block.partition, []).append(block)
    return grouped


def _output_level(level: int) -> int:
    return min(level + 1, MAX_LEVEL)


def select_merge_tasks(
    table: str, read_version: int, blocks: Sequence[Block], bounds: SelectionBounds, *, final: bool = False
) -> ReclusterPlan:
    """Plan one round over a snapshot's blocks (see the module docstring for the policy)."""
    tasks: list[MergeTask] = []
    skipped: list[Skipped] = []
    deletion_vectors = [b for b in blocks if b.has_deletion_vector]
    if deletion_vectors:
        skipped.append(
            Skipped(Reason.DELETION_VECTOR, len(deletion_vectors), "rows hidden by deletion vectors stay deleted")
        )
    live = [b for b in blocks if not b.has_deletion_vector and b.level != LEVEL_CONSTANT]
    older = [b for b in live if b.key_fingerprint not in (None, bounds.key_fingerprint)]
    if older and not final:
        skipped.append(Skipped(Reason.OLDER_KEY, len(older), "not sorted by the current key; run FINAL"))
        live = [b for b in live if b.key_fingerprint in (None, bounds.key_fingerprint)]
    oversized = 0
    for partition, members in sorted(_partitions(live).items(), key=lambda item: str(item[0])):
        unclustered = [b for b in members if not b.clustered]
        oversized += sum(b.bytes > bounds.max_task_bytes for b in unclustered)
        for group in _chunks(unclustered, bounds):
            level = max(b.level for b in group)
            tasks.append(MergeTask(partition, level, _output_level(level), tuple(group), Reason.UNCLUSTERED, 0))
        clustered = [b for b in members if b.clustered]
        pools = (
            [(max((b.level for b in clustered), default=0), clustered, 1.0)]
            if final
            else [
                (level, [b for b in clustered if b.level == level], 0.0)
                for level in sorted({b.level for b in clustered})
            ]
        )
        for _level, pool, final_threshold in pools:
            if len(pool) < 2 or len(tasks) >= bounds.max_tasks:
                continue
            threshold = final_threshold if final else level_threshold(len(pool), bounds)
            reason = Reason.FINAL if final else Reason.DEPTH_ABOVE_THRESHOLD
            groups, depths, over = _deepest_range_tasks(pool, threshold, bounds, reason, bounds.max_tasks - len(tasks))
            oversized += over
            tasks.extend(
                MergeTask(
                    partition,
                    max(b.level for b in group),
                    _output_level(max(b.level for b in group)),
                    tuple(group),
                    reason,
                    depth,
                )
                for group, depth in zip(groups, depths, strict=True)
            )
    if oversized:
        skipped.append(Skipped(Reason.OVER_SIZE_BOUND, oversized, "deep ranges whose files exceed the task bounds"))
    return ReclusterPlan(table, read_version, final, tuple(tasks[: bounds.max_tasks]), tuple(skipped))


def _chunks(blocks: Sequence[Block], bounds: SelectionBounds) -> list[list[Block]]:
    """Unclustered files in bounded groups (a single file is a valid group: it gains stats and a level); a file
    alone over the byte bound is left out (reported as over the size bound): no task exceeds its budget."""
    groups: list[list[Block]] = []
    remaining = sorted((b for b in blocks if b.bytes <= bounds.max_task_bytes), key=lambda b: (b.bytes, b.path))
    while remaining:
        group = _bounded(remaining, bounds) or remaining[:1]
        groups.append(group)
        taken = {b.path for b in group}
        remaining = [b for b in remaining if b.path not in taken]
    return groups
