"""Policy `absorb` (overlap-aware ratio rule): runs in age order (an appended file is a run; the files an
absorb writes form one sorted run); the first run i, walking from the oldest, with rows(newer runs) >=
beta * rows(files of run i overlapping newer data) absorbs all newer runs into itself. Big absorbs are cut into
key-range slices of at most max_task_bytes, one slice per disjoint range per round, resumed from the log (see
`recover_runs`). Pure; files are indices into a `BlockTable`: a `Block` is made only for a file a task takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from recluster.core.block_table import NO_HORIZON, BlockTable
from recluster.core.blocks import Block, Partition, age_run_id
from recluster.core.depth import ranked_depth_profile
from recluster.core.metrics import table_mean_depth
from recluster.core.ranks import BoolArray, IntArray
from recluster.core.selection.late_run import LateRunChoice, decide_late_run
from recluster.core.selection.plan import (
    MergeTask,
    Reason,
    SelectionBounds,
    UpperRun,
    WatermarkDecision,
    output_level,
)
from recluster.core.selection.runs import Runs, sort_pairs, table_runs
from recluster.core.selection.watermark import decide_watermark, first_key_positions

BETA_SCALE_LIMIT = 8.0
"""The depth-target controller scales beta by at most this factor either way."""


def meeting(lo: IntArray, hi: IntArray, by_lo: IntArray, queries: slice, others: slice) -> BoolArray:
    """For each file at the positions `queries`: whether its closed key range meets the range of any file at the
    positions `others` (touching counts). `by_lo`: every position by minimum, sorted once per decision."""
    chosen = by_lo[(by_lo >= others.start) & (by_lo < others.stop)]
    query_lo, query_hi = lo[queries], hi[queries]
    result = np.zeros(len(query_lo), dtype=bool)
    if not len(chosen) or not len(query_lo):
        return result
    starts = lo[chosen]
    reach = np.maximum.accumulate(hi[chosen])
    count = np.searchsorted(starts, query_hi, side="right")
    some = count > 0
    result[some] = reach[count[some] - 1] >= query_lo[some]
    return result


def _first_column(block: Block) -> tuple[tuple[bool, Any], tuple[bool, Any]]:
    """The block's range in what outputs are cut on (the curve value, else the first key column; NULL first)."""
    low, high = block.cut_range
    return (low is not None, low), (high is not None, high)


def fixable_self_overlap(table: BlockTable, files: IntArray) -> IntArray:
    """Files of one run (by min key, path) that overlap another file of it in a way a merge removes.

    Both the key range and the first key column's range must meet: outputs are cut where the first column
    changes, so such files come out apart. A multi-column key's per-column ranges can also meet across a
    first-column boundary, or inside one heavy first-column value split by the full key; a merge cannot
    part those, and they must not trigger rewrites without end. Each file is compared with the widest file
    before it (the first with the largest maximum): only the key ranges that meet it are looked at one by one.
    """
    if len(files) < 2:
        return np.zeros(0, dtype=np.int64)
    lo, hi, _ = table.key_ranks()
    lows, highs = lo[files], hi[files]
    count = len(files)
    before = np.maximum.accumulate(highs)
    widens = np.ones(count, dtype=bool)
    widens[1:] = highs[1:] > before[:-1]
    widest = np.arange(count, dtype=np.int32)  # (positions: int32 halves a big run's arrays)
    widest[~widens] = 0
    np.maximum.accumulate(widest, out=widest)
    found: dict[int, None] = {}
    for at in (np.flatnonzero(highs[widest[:-1]] >= lows[1:]) + 1).tolist():
        other = int(widest[at - 1])
        (low, high), (widest_low, widest_high) = (
            _first_column(table[int(files[at])]),
            _first_column(table[int(files[other])]),
        )
        if widest_high >= low and high >= widest_low:
            found[at] = found[other] = None
    return files[list(found)] if found else np.zeros(0, dtype=np.int64)


def effective_beta(table: BlockTable, clustered: IntArray, bounds: SelectionBounds) -> float:
    """beta, or with a depth target beta * target / average_depth (clamped): lower while too deep."""
    if bounds.target_depth is None:
        return bounds.beta
    depth = table_mean_depth(table, clustered)
    return bounds.beta * min(max(bounds.target_depth / depth, 1 / BETA_SCALE_LIMIT), BETA_SCALE_LIMIT)


@dataclass(frozen=True, slots=True, eq=False)
class Absorb:
    """One absorb decided on the current runs: the run aged `target_age_ms` (its files `target`) takes in
    `indices` (table indices, in the order slices break ties by)."""

    table: BlockTable
    target_age_ms: int
    target: IntArray
    indices: IntArray
    horizon_ms: int
    reason: Reason
    split_values: tuple[Any, ...] = ()
    """Values the outputs are cut at besides the absorbing run's untouched files (the watermark)."""
    upper_run: UpperRun | None = None
    """Outputs above a value go into another run (an absorb into the late run, see `late_run`)."""

    @property
    def files(self) -> list[Block]:
        return self.table.take(self.indices)


def decide_absorb(
    runs: Runs, beta: float, target_rows: int | None = None
) -> tuple[Absorb | None, WatermarkDecision | None]:
    """An absorb in progress (resumed first, oldest first); else, on a time-like table, the watermark and
    rent-or-buy decision for the oldest run (see `watermark`); else the ratio rule walking from the oldest run.
    Runs are in age order, so "the newer runs" (up to a horizon) are always one stretch of `runs.files`."""
    table, files, bounds = runs.table, runs.files, runs.bounds
    if len(files) < 2:
        return None, None
    lo, hi, _ = table.ranks_of(files)
    by_lo = np.argsort(lo, kind="stable").astype(np.int32)  # (positions: half the memory of int64)
    newest = int(runs.ages[-1])

    def touched(index: int, newer: slice) -> BoolArray:
        """Positions of run `index`'s files that meet a file of `newer`."""
        own = slice(int(bounds[index]), int(bounds[index + 1]))
        found = np.zeros(len(files), dtype=bool)
        found[own] = meeting(lo, hi, by_lo, own, newer)
        return found

    for index in np.flatnonzero(runs.horizons != NO_HORIZON).tolist():
        taken_in = int(np.searchsorted(runs.ages, runs.horizons[index], side="right"))  # runs up to the horizon
        newer = slice(int(bounds[index + 1]), int(bounds[max(taken_in, index + 1)]))
        self_overlap = fixable_self_overlap(table, runs.members(index))
        if newer.start == newer.stop and not len(self_overlap):
            continue
        chosen = touched(index, newer)
        chosen[newer] = True
        picked = files[chosen]
        picked = np.concatenate([picked, self_overlap[~np.isin(self_overlap, picked)]])
        target = runs.members(index)
        horizon = int(runs.horizons[index])
        return Absorb(table, int(runs.ages[index]), target, picked, horizon, Reason.ABSORB_RESUME), None
    if len(runs) > 1:
        positions = first_key_positions(runs)
        head = touched(0, slice(int(bounds[1]), len(files)))
        decision = None if positions is None else decide_watermark(runs, files[head], target_rows, positions)
        if decision is not None:
            if decision.reason is not Reason.WATERMARK_ABSORB:
                return None, decision
            split = (decision.watermark,) if decision.cut else ()
            head[bounds[1] :] = True
            return Absorb(
                table, int(runs.ages[0]), runs.members(0), files[head], newest, decision.reason, split
            ), decision
        late = None if positions is None else decide_late_run(runs, target_rows, positions)
        if isinstance(late, WatermarkDecision):
            return None, late
        if isinstance(late, LateRunChoice):
            target = runs.members(late.target)
            upper = late.upper_run
            split = () if upper is None else (upper.above,)
            age = int(runs.ages[late.target])
            into_late = Absorb(table, age, target, late.taken, newest, late.decision.reason, split, upper)
            return into_late, late.decision
    run_rows = np.add.reduceat(table.rows_of(files), bounds[:-1], dtype=np.int64)
    rows_after = np.cumsum(run_rows[::-1])[::-1]  # from each run on
    for index in range(len(runs) - 1):
        newer = slice(int(bounds[index + 1]), len(files))
        members = touched(index, newer)
        if rows_after[index + 1] < beta * table.total_rows(files[members]):
            continue
        members[newer] = True
        if not any_pair_overlaps(lo, hi, by_lo[members[by_lo]]):
            return None, None  # nothing newer overlaps anything: no merge would lower the depth
        target = runs.members(index)
        return Absorb(table, int(runs.ages[index]), target, files[members], newest, Reason.ABSORB_RATIO), None
    return None, None


def any_pair_overlaps(lo: IntArray, hi: IntArray, by_lo: IntArray) -> bool:
    """Whether two of the files at positions `by_lo` (sorted by minimum) overlap."""
    if len(by_lo) < 2:
        return False
    reach = np.maximum.accumulate(hi[by_lo])
    return bool(np.any(lo[by_lo][1:] <= reach[:-1]))


def absorb_slices(table: BlockTable, files: IntArray, bounds: SelectionBounds, budget: int) -> list[IntArray]:
    """Key-range slices of an absorb for this round.

    A slice is the longest prefix, in key order of the files' minimums, within max_task_bytes and
    max_task_files, but at least two files (one file alone would stall the absorb: an absorb is never
    skipped, docs/concepts.md); later slices of the same round start above every earlier slice's range, so their
    outputs never meet. Files wider than a slice (appended files spanning the domain) come first in that
    order: the first slice sorts them, and their rows beyond its range become narrow files of the absorbing
    run that later slices merge. What is left is resumed next round from the log (`decide_absorb`).
    """
    count = len(files)
    lo, hi, points = table.ranks_of(files)
    # by min, then max; ties keep the given order (deterministic: runs by age, each by min key and path)
    index = sort_pairs(lo, hi, points)
    order, mins, maxes = files[index], lo[index], hi[index]
    del index
    slices: list[IntArray] = []
    start = 0
    while start < count and len(slices) < budget:
        sizes = np.cumsum(table.sizes_of(order[start : start + bounds.max_task_files]))  # a slice holds no more
        fitting = int(np.searchsorted(sizes, bounds.max_task_bytes, side="right"))
        end = start + min(max(2, fitting), count - start)
        slices.append(order[start:end])
        start = max(end, int(np.searchsorted(mins, maxes[start:end].max(), side="right")))  # above this slice
    return slices


def absorb_tasks(
    partition: Partition, table: BlockTable, clustered: IntArray, bounds: SelectionBounds, beta: float, budget: int
) -> tuple[list[MergeTask], WatermarkDecision | None]:
    """The `absorb` policy in one partition: the slices of at most one absorb for this round, and the time-like
    decision when the partition is time-like."""
    absorb, decision = decide_absorb(table_runs(table, clustered), beta, bounds.target_rows)
    if absorb is None:
        return [], decision
    lo, hi, _ = table.key_ranks()
    target = absorb.target  # by min key (`table_runs`): files starting above a slice are a suffix
    tasks = []
    slices = absorb_slices(table, absorb.indices, bounds, budget)
    upper_run, split_values = absorb.upper_run, set(absorb.split_values)
    if upper_run is not None and (len(slices) > 1 or len(slices[0]) < len(absorb.indices)):
        # only a whole absorb may write into two runs: a slice resumed from the log writes into one
        upper_run, split_values = None, set()
    for files in slices:
        if len(files) == 1 and np.isin(files, target).all():
            continue  # one file of the absorbing run alone: rewriting it would change nothing
        low, high = lo[files].min(), hi[files].max()
        starting_below = target[: int(np.searchsorted(lo[target], high, side="right"))]
        inside = starting_below[~np.isin(starting_below, files) & (hi[starting_below] >= low)]
        splits = sorted(
            {value for i in inside.tolist() for value in table[i].cut_range if value is not None} | split_values
        )
        blocks = table.take(files)
        level = max(b.level for b in blocks)
        depth = int(ranked_depth_profile(*table.ranks_of(files)).block_depth.max())
        tasks.append(
            MergeTask(
                partition,
                level,
                output_level(level),
                tuple(blocks),
                absorb.reason,
                depth,
                output_run=age_run_id(absorb.target_age_ms),
                horizon_ms=absorb.horizon_ms,
                split_values=tuple(splits),
                upper_run=upper_run,
            )
        )
    return tasks, decision
