"""Which blocks to merge (docs/concepts.md). Pure: blocks and bounds in, an immutable plan out, no I/O.

One entry point for every policy: `plan` holds the values, `levels` and `absorb` one module each. Adding a policy:
a module here, a `Policy` member, a branch in `select_merge_tasks`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from recluster.core.block_table import BlockTable, as_table
from recluster.core.blocks import LEVEL_CONSTANT, Block, Partition
from recluster.core.ranks import IntArray
from recluster.core.selection.absorb import absorb_tasks, decide_absorb, effective_beta
from recluster.core.selection.levels import levels_tasks
from recluster.core.selection.plan import (
    MergeTask,
    Policy,
    Reason,
    ReclusterPlan,
    SelectionBounds,
    Skipped,
    WatermarkDecision,
    chunk_unclustered,
    output_level,
)
from recluster.core.selection.runs import table_runs
from recluster.core.selection.small_tables import fits_one_file, small_table_task


def select_merge_tasks(
    table: str, read_version: int, blocks: Sequence[Block], bounds: SelectionBounds, *, final: bool = False
) -> ReclusterPlan:
    """Plan one round over a snapshot's blocks with `bounds.policy` (see the module docstring)."""
    files = as_table(blocks)
    tasks: list[MergeTask] = []
    skipped: list[Skipped] = []
    live, older = _live_files(files, bounds, final)
    if older:
        skipped.append(Skipped(Reason.OLDER_KEY, older, "not sorted by the current key; run FINAL"))
    absorb = bounds.policy is Policy.ABSORB and not final
    oversized = 0
    betas: list[float] = []
    watermarks: list[tuple[Partition, WatermarkDecision]] = []
    waiting_small = 0
    for partition, members in _by_partition(files, live):
        if not final and fits_one_file(files, members, bounds):
            small = small_table_task(partition, files, members, bounds) if len(tasks) < bounds.max_tasks else None
            if small is None:
                waiting_small += len(members)
            else:
                tasks.append(small)
            continue
        unclustered = members[~files.clustered[members]]
        oversized += int(np.count_nonzero(files.sizes_of(unclustered) > bounds.max_task_bytes))
        for group in chunk_unclustered(files, unclustered, bounds, bounds.max_tasks - len(tasks)):
            level = max(b.level for b in group)
            tasks.append(MergeTask(partition, level, output_level(level), tuple(group), Reason.UNCLUSTERED, 0))
        clustered = _clustered(files, members)
        budget = bounds.max_tasks - len(tasks)
        if len(clustered) < 2 or budget < 1:
            continue
        if absorb:
            beta = effective_beta(files, clustered, bounds)
            betas.append(beta)
            found, decision = absorb_tasks(partition, files, clustered, bounds, beta, budget)
            over = 0
            if decision is not None:
                watermarks.append((partition, decision))
        else:
            found, over = levels_tasks(partition, files, clustered, bounds, final, budget)
        tasks.extend(found)
        oversized += over
    if oversized:
        skipped.append(Skipped(Reason.OVER_SIZE_BOUND, oversized, "deep ranges whose files exceed the task bounds"))
    if waiting_small:
        skipped.append(
            Skipped(
                Reason.SMALL_TABLE,
                waiting_small,
                f"fit in one target file; compacted at {bounds.small_table_files} files",
            )
        )
    if absorb and not tasks and betas:
        skipped.append(Skipped(Reason.ABSORB_BELOW_RATIO, 0, "no run reaches the absorb ratio"))
    return ReclusterPlan(
        table,
        read_version,
        final,
        tuple(tasks[: bounds.max_tasks]),
        tuple(skipped),
        policy=Policy.ABSORB if absorb else Policy.LEVELS,
        beta=min(betas) if betas else (bounds.beta if absorb else None),
        watermarks=tuple(watermarks),
    )


def _live_files(files: BlockTable, bounds: SelectionBounds, final: bool) -> tuple[IntArray, int]:
    """The files a round may merge, and how many it leaves because they are sorted by an older key (FINAL
    takes those too)."""
    constant = files.levels == LEVEL_CONSTANT
    live = np.flatnonzero(~constant) if constant.any() else np.arange(len(files), dtype=np.int32)
    current = [i for i, f in enumerate(files.fingerprints) if f in (None, bounds.key_fingerprint)]
    if final or len(current) == len(files.fingerprints):
        return live, 0
    chosen = live[np.isin(files.fingerprint_codes[live], current)]
    return chosen, len(live) - len(chosen)


def _by_partition(files: BlockTable, indices: IntArray) -> list[tuple[Partition, IntArray]]:
    """The files of each partition (ascending), partitions in the order of their text."""
    if len(files.partitions) == 1:
        return [(files.partitions[0], indices)] if len(indices) else []
    codes = files.partition_codes[indices]
    order = np.argsort(codes, kind="stable")
    groups = np.split(indices[order], np.flatnonzero(np.diff(codes[order])) + 1) if len(indices) else []
    found = [(files.partitions[int(files.partition_codes[g[0]])], g) for g in groups]
    return sorted(found, key=lambda item: str(item[0]))


def _clustered(files: BlockTable, members: IntArray) -> IntArray:
    """The clustered ones of some files (the same array when all are)."""
    wanted = files.clustered[members]
    return members if wanted.all() else members[wanted]


def time_like_decisions(
    blocks: Sequence[Block], bounds: SelectionBounds
) -> tuple[tuple[Partition, WatermarkDecision], ...]:
    """The watermark decision of each time-like partition, as an `absorb` round takes it, without building the
    round's tasks (what `info` shows: on a big table slicing the absorb would cost more than deciding it). Only
    `absorb` makes them: none under `levels`."""
    if bounds.policy is not Policy.ABSORB:
        return ()
    files = as_table(blocks)
    live, _ = _live_files(files, bounds, final=False)
    decisions = []
    for partition, members in _by_partition(files, live):
        clustered = _clustered(files, members)
        if len(clustered) >= 2:
            beta = effective_beta(files, clustered, bounds)
            _, decision = decide_absorb(table_runs(files, clustered), beta, bounds.target_rows)
            if decision is not None:
                decisions.append((partition, decision))
    return tuple(decisions)
