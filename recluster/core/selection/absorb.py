"""Policy `absorb` (overlap-aware ratio rule): runs in age order (an appended file is a run; the files an
absorb writes form one sorted run); the first run i, walking from the oldest, with rows(newer runs) >=
beta * rows(files of run i overlapping newer data) absorbs all newer runs into itself. Big absorbs are cut into
key-range slices of at most max_task_bytes, one slice per disjoint range per round, resumed from the log (see
`recover_runs`). Pure.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from recluster.core.blocks import Block, Partition, age_run_id, parse_data_file_name
from recluster.core.metrics import IntArray, depth_profile, mean_block_depth, rank_keys
from recluster.core.selection.plan import MergeTask, Reason, SelectionBounds, WatermarkDecision, output_level
from recluster.core.selection.watermark import decide_watermark

BETA_SCALE_LIMIT = 8.0
"""The depth-target controller scales beta by at most this factor either way."""


@dataclass(frozen=True, slots=True)
class Run:
    """One sorted run (DESIGN §5), recovered from the log alone: the files sharing an age.

    The age of a file written by `absorb` is its run id (the age of the run that absorbed); of any other
    file its modificationTime, so an appended file is its own run and a `levels` merge output one run.
    """

    age_ms: int
    files: tuple[Block, ...]
    horizon_ms: int | None = None
    """Largest horizon among its absorb-written files: an absorb takes in the runs up to this age."""

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.files)


def file_age(block: Block) -> tuple[int, int | None]:
    """(age in ms, absorb horizon or None) of one file, from its name and its add action."""
    written = parse_data_file_name(block.path)
    if written is not None and written.horizon_ms is not None:
        return int(written.run_id, 16), written.horizon_ms
    return block.modified_ms, None


def recover_runs(blocks: Iterable[Block]) -> list[Run]:
    """The runs of one partition's clustered files, oldest first."""
    files: dict[int, list[Block]] = defaultdict(list)
    horizons: dict[int, int] = {}
    for block in blocks:
        age, horizon = file_age(block)
        files[age].append(block)
        if horizon is not None:
            horizons[age] = max(horizons.get(age, horizon), horizon)
    return [Run(age, _by_min_key(members), horizons.get(age)) for age, members in sorted(files.items())]


def _by_min_key(files: list[Block]) -> tuple[Block, ...]:
    """Files by (min key, path): two stable sorts on plain keys, far faster than one on tuples."""
    files.sort(key=attrgetter("path"))
    files.sort(key=attrgetter("min_key"))  # clustered files: every one has a key
    return tuple(files)


BoolArray = npt.NDArray[np.bool_]


def overlapping(lo: IntArray, hi: IntArray, other_lo: IntArray, other_hi: IntArray) -> BoolArray:
    """For each closed range [lo, hi]: whether it intersects any of [other_lo, other_hi] (touching counts)."""
    result = np.zeros(len(lo), dtype=bool)
    if not len(other_lo) or not len(lo):
        return result
    order = np.argsort(other_lo, kind="stable")
    starts = other_lo[order]
    reach = np.maximum.accumulate(other_hi[order])
    count = np.searchsorted(starts, hi, side="right")
    some = count > 0
    result[some] = reach[count[some] - 1] >= lo[some]
    return result


def _first_column(block: Block) -> tuple[tuple[bool, Any], tuple[bool, Any]]:
    """The block's range in what outputs are cut on (the curve value, else the first key column; NULL first)."""
    low, high = block.cut_range
    return (low is not None, low), (high is not None, high)


def fixable_self_overlap(files: Sequence[Block]) -> list[Block]:
    """Files of one run that overlap another file of it in a way a merge removes.

    Both the key range and the first key column's range must meet: outputs are cut where the first column
    changes, so such files come out apart. A multi-column key's per-column ranges can also meet across a
    first-column boundary, or inside one heavy first-column value split by the full key; a merge cannot
    part those, and they must not trigger rewrites without end.
    """
    found: dict[str, Block] = {}
    widest: Block | None = None
    for block in sorted(files, key=lambda b: (b.min_key or b"", b.path)):
        if widest is not None and (widest.max_key or b"") >= (block.min_key or b""):
            (low, high), (widest_low, widest_high) = _first_column(block), _first_column(widest)
            if widest_high >= low and high >= widest_low:
                found[block.path] = block
                found[widest.path] = widest
        if widest is None or (block.max_key or b"") > (widest.max_key or b""):
            widest = block
    return list(found.values())


def effective_beta(clustered: Sequence[Block], bounds: SelectionBounds) -> float:
    """beta, or with a depth target beta * target / average_depth (clamped): lower while too deep."""
    if bounds.target_depth is None:
        return bounds.beta
    scale = min(max(bounds.target_depth / mean_block_depth(clustered), 1 / BETA_SCALE_LIMIT), BETA_SCALE_LIMIT)
    return bounds.beta * scale


@dataclass(frozen=True, slots=True)
class Absorb:
    """One absorb decided on the current runs: `target` takes in `files`; None when nothing is due."""

    target: Run
    files: tuple[Block, ...]
    horizon_ms: int
    reason: Reason
    split_values: tuple[Any, ...] = ()
    """Values the outputs are cut at besides the absorbing run's untouched files (the watermark)."""


def decide_absorb(
    runs: Sequence[Run], beta: float, target_rows: int | None = None
) -> tuple[Absorb | None, WatermarkDecision | None]:
    """An absorb in progress (resumed first, oldest first); else, on a time-like table, the watermark and
    rent-or-buy decision for the oldest run (see `watermark`); else the ratio rule walking from the oldest run."""
    blocks = [b for run in runs for b in run.files]
    if len(blocks) < 2:
        return None, None
    ranks, _ = rank_keys([b.min_key or b"" for b in blocks] + [b.max_key or b"" for b in blocks])
    lo, hi = ranks[: len(blocks)], ranks[len(blocks) :]
    run_of = np.repeat(np.arange(len(runs)), [len(r.files) for r in runs])
    for index, run in enumerate(runs):
        if run.horizon_ms is None:
            continue
        newer = (run_of > index) & np.isin(run_of, [i for i, r in enumerate(runs) if r.age_ms <= run.horizon_ms])
        own = run_of == index
        self_overlap = fixable_self_overlap(run.files)
        if not newer.any() and not self_overlap:
            continue
        touched = own & overlapping(lo, hi, lo[newer], hi[newer])
        chosen = {b.path: b for b in (blocks[i] for i in np.flatnonzero(touched | newer))}
        chosen.update((b.path, b) for b in self_overlap)
        return Absorb(run, tuple(chosen.values()), run.horizon_ms, Reason.ABSORB_RESUME), None
    if len(runs) > 1:
        newer = run_of > 0
        touched = (run_of == 0) & overlapping(lo, hi, lo[newer], hi[newer])
        overlapped = [blocks[i] for i in np.flatnonzero(touched)]
        decision = decide_watermark(runs[0].files, [r.files for r in runs[1:]], overlapped, target_rows)
        if decision is not None:
            if decision.reason is not Reason.WATERMARK_ABSORB:
                return None, decision
            head = tuple(blocks[i] for i in np.flatnonzero(touched | newer))
            split = (decision.watermark,) if decision.cut else ()
            return Absorb(runs[0], head, runs[-1].age_ms, decision.reason, split), decision
    rows = np.array([b.rows for b in blocks], dtype=np.int64)
    rows_after = np.cumsum(np.bincount(run_of, weights=rows, minlength=len(runs))[::-1])[::-1]  # this run on
    for index, run in enumerate(runs[:-1]):
        own = run_of == index
        newer = run_of > index
        touched = own & overlapping(lo, hi, lo[newer], hi[newer])
        if rows_after[index + 1] < beta * int(rows[touched].sum()):
            continue
        members = np.flatnonzero(touched | newer)
        if not any_pair_overlaps(lo[members], hi[members]):
            return None, None  # nothing newer overlaps anything: no merge would lower the depth
        return Absorb(run, tuple(blocks[i] for i in members), runs[-1].age_ms, Reason.ABSORB_RATIO), None
    return None, None


def any_pair_overlaps(lo: IntArray, hi: IntArray) -> bool:
    if len(lo) < 2:
        return False
    order = np.argsort(lo, kind="stable")
    reach = np.maximum.accumulate(hi[order])
    return bool(np.any(lo[order][1:] <= reach[:-1]))


def absorb_slices(files: Sequence[Block], bounds: SelectionBounds, budget: int) -> list[list[Block]]:
    """Key-range slices of an absorb for this round.

    A slice is the longest prefix, in key order of the files' minimums, within max_task_bytes and
    max_task_files, but at least two files (one file alone would stall the absorb: an absorb is never
    skipped, DESIGN §5); later slices of the same round start above every earlier slice's range, so their
    outputs never meet. Files wider than a slice (appended files spanning the domain) come first in that
    order: the first slice sorts them, and their rows beyond its range become narrow files of the absorbing
    run that later slices merge. What is left is resumed next round from the log (`decide_absorb`).
    """
    count = len(files)
    ranks, _ = rank_keys([b.min_key or b"" for b in files] + [b.max_key or b"" for b in files])
    # by min, then max; ties keep the given order (deterministic: runs by age, each by min key and path)
    index = np.lexsort((ranks[count:], ranks[:count]))
    order = [files[i] for i in index.tolist()]
    mins, maxes = ranks[:count][index], ranks[count:][index]
    slices: list[list[Block]] = []
    start = 0
    while start < count and len(slices) < budget:
        chosen: list[Block] = []
        total = 0
        for block in itertools.islice(order, start, None):
            full = len(chosen) >= bounds.max_task_files or total + block.bytes > bounds.max_task_bytes
            if len(chosen) >= 2 and full:
                break
            chosen.append(block)
            total += block.bytes
        slices.append(chosen)
        end = start + len(chosen)
        start = max(end, int(np.searchsorted(mins, maxes[start:end].max(), side="right")))  # above this slice
    return slices


def absorb_tasks(
    partition: Partition, clustered: Sequence[Block], bounds: SelectionBounds, beta: float, budget: int
) -> tuple[list[MergeTask], WatermarkDecision | None]:
    """The `absorb` policy in one partition: the slices of at most one absorb for this round, and the time-like
    decision when the partition is time-like."""
    runs = recover_runs(clustered)
    absorb, decision = decide_absorb(runs, beta, bounds.target_rows)
    if absorb is None:
        return [], decision
    slices = absorb_slices(absorb.files, bounds, budget)
    target = absorb.target.files  # by min key (`recover_runs`): files starting above a slice are a suffix
    own = {b.path for b in target}
    target_mins = [b.min_key for b in target]
    tasks = []
    for files in slices:
        if len(files) == 1 and files[0].path in own:
            continue  # one file of the absorbing run alone: rewriting it would change nothing
        taken = {b.path for b in files}
        low, high = min(b.min_key or b"" for b in files), max(b.max_key or b"" for b in files)
        starting_below = target[: bisect.bisect_right(target_mins, high)]  # type: ignore[type-var]
        splits = sorted(
            {
                value
                for b in starting_below
                if b.path not in taken and (b.max_key or b"") >= low
                for value in b.cut_range
                if value is not None
            }
            | set(absorb.split_values)
        )
        level = max(b.level for b in files)
        depth = int(depth_profile([b.min_key for b in files], [b.max_key for b in files]).block_depth.max())  # type: ignore[misc]
        tasks.append(
            MergeTask(
                partition,
                level,
                output_level(level),
                tuple(files),
                absorb.reason,
                depth,
                output_run=age_run_id(absorb.target.age_ms),
                horizon_ms=absorb.horizon_ms,
                split_values=tuple(splits),
            )
        )
    return tasks, decision
