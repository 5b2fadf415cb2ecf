"""Policy `levels` (Databend's): per partition, per level from 0 upward, a level whose average depth
exceeds clamp(blocks * depth_ratio, 1, max_depth_threshold) gets work: the blocks covering its deepest point range
form one merge task, bounded in bytes and files. Disjoint ranges give independent tasks. FINAL pools every level
(and files of an older key) with threshold 1, so repeated rounds end fully clustered. Pure.
"""

from __future__ import annotations

import numpy as np

from recluster.core.block_table import BlockTable
from recluster.core.blocks import Block, Partition
from recluster.core.depth import ranked_depth_profile
from recluster.core.ranks import IntArray
from recluster.core.selection.plan import MergeTask, Reason, SelectionBounds, bounded, level_threshold, output_level


def _deepest_range_tasks(
    table: BlockTable, pool: IntArray, threshold: float, bounds: SelectionBounds, budget: int
) -> tuple[list[list[Block]], list[int], int]:
    """Tasks around the deepest point ranges, deepest first, each over files no other task uses (files are
    indices into `table`: a `Block` is made only for a file that covers a range looked at).

    Returns the file groups, their depths and how many candidate groups were over the size bounds.
    """
    profile = ranked_depth_profile(*table.ranks_of(pool, dense=True))  # dense: depth runs are walked point by point
    depth = profile.point_depth
    if not len(depth) or int(depth.max()) < 2 or float(profile.block_depth.mean()) <= threshold:
        return [], [], 0
    # Maximal runs of equal depth that no gap interrupts (some block spans each step from one point to
    # the next), visited deepest first; a run's covering blocks form a candidate.
    spanning = depth - np.bincount(profile.hi, minlength=len(depth)).astype(np.int32)
    change = np.flatnonzero((np.diff(depth) != 0) | (spanning[:-1] == 0)) + 1
    starts = np.concatenate(([0], change))
    ends = np.concatenate((change - 1, [len(depth) - 1]))
    order = np.lexsort((starts, -depth[starts]))
    used = np.zeros(len(pool), dtype=bool)
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
        candidates = table.take(pool[free])
        chosen = bounded(candidates, bounds) if len(free) == len(covering) else []
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
            candidates = table.take(pool[at_point])
            chosen = bounded(candidates, bounds)
        if len(chosen) < 2:
            oversized += len(candidates) >= 2  # files to merge were there, but not within the bounds
            continue
        chosen_paths = {b.path for b in chosen}
        used[[int(i) for i in covering if table[int(pool[i])].path in chosen_paths]] = True
        groups.append(chosen)
        depths.append(run_depth)
    return groups, depths, oversized


def levels_tasks(
    partition: Partition, table: BlockTable, clustered: IntArray, bounds: SelectionBounds, final: bool, budget: int
) -> tuple[list[MergeTask], int]:
    """The `levels` policy in one partition: tasks around the deepest ranges of levels above threshold."""
    tasks: list[MergeTask] = []
    oversized = 0
    levels = table.levels[clustered]
    pools = [(clustered, 1.0)] if final else [(clustered[levels == level], 0.0) for level in np.unique(levels)]
    for pool, final_threshold in pools:
        if len(pool) < 2 or len(tasks) >= budget:
            continue
        threshold = final_threshold if final else level_threshold(len(pool), bounds)
        reason = Reason.FINAL if final else Reason.DEPTH_ABOVE_THRESHOLD
        groups, depths, over = _deepest_range_tasks(table, pool, threshold, bounds, budget - len(tasks))
        oversized += over
        tasks.extend(
            MergeTask(
                partition,
                max(b.level for b in group),
                output_level(max(b.level for b in group)),
                tuple(group),
                reason,
                depth,
            )
            for group, depth in zip(groups, depths, strict=True)
        )
    return tasks, oversized
