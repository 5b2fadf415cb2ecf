"""Which blocks to merge (DESIGN §5). Pure: blocks and bounds in, an immutable plan out, no I/O.

Policy `levels` (Databend's): per partition, per level from 0 upward, a level whose average depth exceeds
clamp(blocks * depth_ratio, 1, max_depth_threshold) gets work: the blocks covering its deepest point
range form one merge task, bounded in bytes and files. Disjoint ranges give independent tasks. FINAL
pools every level (and files of an older key) with threshold 1, so repeated rounds end fully clustered.

Policy `absorb` (overlap-aware ratio rule): runs in age order (an appended file is a run; the files an
absorb writes form one sorted run); the first run i, walking from the oldest, with rows(newer runs) >=
beta * rows(files of run i overlapping newer data) absorbs all newer runs into itself. Big absorbs are cut
into key-range slices of at most max_task_bytes, one slice per disjoint range per round, resumed from the
log (see `recover_runs`). FINAL is the same for both policies.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from recluster.blocks import LEVEL_CONSTANT, MAX_LEVEL, Block, Partition, age_run_id, parse_data_file_name
from recluster.metrics import depth_profile, rank_keys


class Policy(StrEnum):
    """The selection policies (DESIGN §5); FINAL rounds are the same for both."""

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
        part = ",".join(f"{k}={v}" for k, v in self.partition) or "-"
        low, high = self.key_range
        run = "" if self.output_run is None else f" run={self.output_run}"
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
    """Plan one round over a snapshot's blocks with `bounds.policy` (see the module docstring)."""
    tasks: list[MergeTask] = []
    skipped: list[Skipped] = []
    live = [b for b in blocks if b.level != LEVEL_CONSTANT]
    older = [b for b in live if b.key_fingerprint not in (None, bounds.key_fingerprint)]
    if older and not final:
        skipped.append(Skipped(Reason.OLDER_KEY, len(older), "not sorted by the current key; run FINAL"))
        live = [b for b in live if b.key_fingerprint in (None, bounds.key_fingerprint)]
    absorb = bounds.policy is Policy.ABSORB and not final
    oversized = 0
    betas: list[float] = []
    for partition, members in sorted(_partitions(live).items(), key=lambda item: str(item[0])):
        unclustered = [b for b in members if not b.clustered]
        oversized += sum(b.bytes > bounds.max_task_bytes for b in unclustered)
        for group in _chunks(unclustered, bounds):
            level = max(b.level for b in group)
            tasks.append(MergeTask(partition, level, _output_level(level), tuple(group), Reason.UNCLUSTERED, 0))
        clustered = [b for b in members if b.clustered]
        budget = bounds.max_tasks - len(tasks)
        if len(clustered) < 2 or budget < 1:
            continue
        if absorb:
            beta = effective_beta(clustered, bounds)
            betas.append(beta)
            found, over = absorb_tasks(partition, clustered, bounds, beta, budget), 0
        else:
            found, over = _levels_tasks(partition, clustered, bounds, final, budget)
        tasks.extend(found)
        oversized += over
    if oversized:
        skipped.append(Skipped(Reason.OVER_SIZE_BOUND, oversized, "deep ranges whose files exceed the task bounds"))
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
    )


def _levels_tasks(
    partition: Partition, clustered: Sequence[Block], bounds: SelectionBounds, final: bool, budget: int
) -> tuple[list[MergeTask], int]:
    """The `levels` policy in one partition: tasks around the deepest ranges of levels above threshold."""
    tasks: list[MergeTask] = []
    oversized = 0
    pools = (
        [(clustered, 1.0)]
        if final
        else [([b for b in clustered if b.level == level], 0.0) for level in sorted({b.level for b in clustered})]
    )
    for pool, final_threshold in pools:
        if len(pool) < 2 or len(tasks) >= budget:
            continue
        threshold = final_threshold if final else level_threshold(len(pool), bounds)
        reason = Reason.FINAL if final else Reason.DEPTH_ABOVE_THRESHOLD
        groups, depths, over = _deepest_range_tasks(pool, threshold, bounds, reason, budget - len(tasks))
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
    return tasks, oversized


# ---- absorb ----------------------------------------------------------------------------------------------------

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

    @property
    def live_rows(self) -> int:
        """Rows not hidden by deletion vectors: what the outputs must hold."""
        return sum(b.live_rows for b in self.files)


def file_age(block: Block) -> tuple[int, int | None]:
    """(age in ms, absorb horizon or None) of one file, from its name and its add action."""
    written = parse_data_file_name(block.path)
    if written is not None and written.horizon_ms is not None:
        return int(written.run_id, 16), written.horizon_ms
    return block.modified_ms, None


def recover_runs(blocks: Iterable[Block]) -> list[Run]:
    """The runs of one partition's clustered files, oldest first."""
    files: dict[int, list[Block]] = {}
    horizons: dict[int, int] = {}
    for block in blocks:
        age, horizon = file_age(block)
        files.setdefault(age, []).append(block)
        if horizon is not None:
            horizons[age] = max(horizons.get(age, horizon), horizon)
    return [
        Run(age, tuple(sorted(members, key=lambda b: (b.min_key or b"", b.path))), horizons.get(age))
        for age, members in sorted(files.items())
    ]


BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]


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
    """The block's range in its first key column (NULL first)."""
    low = block.min_values[0] if block.min_values else None
    high = block.max_values[0] if block.max_values else None
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
    profile = depth_profile([b.min_key for b in clustered], [b.max_key for b in clustered])  # type: ignore[misc]
    average = float(profile.block_depth.mean()) if len(profile.block_depth) else 1.0
    scale = min(max(bounds.target_depth / average, 1 / BETA_SCALE_LIMIT), BETA_SCALE_LIMIT)
    return bounds.beta * scale


@dataclass(frozen=True, slots=True)
class Absorb:
    """One absorb decided on the current runs: `target` takes in `files`; None when nothing is due."""

    target: Run
    files: tuple[Block, ...]
    horizon_ms: int
    reason: Reason


def decide_absorb(runs: Sequence[Run], beta: float) -> Absorb | None:
    """An absorb in progress (resumed first, oldest first), else the ratio rule walking from the oldest run."""
    blocks = [b for run in runs for b in run.files]
    if len(blocks) < 2:
        return None
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
        return Absorb(run, tuple(chosen.values()), run.horizon_ms, Reason.ABSORB_RESUME)
    for index, run in enumerate(runs[:-1]):
        own = run_of == index
        newer = run_of > index
        touched = own & overlapping(lo, hi, lo[newer], hi[newer])
        newer_rows = sum(b.rows for r in runs[index + 1 :] for b in r.files)
        if newer_rows < beta * sum(blocks[i].rows for i in np.flatnonzero(touched)):
            continue
        members = np.flatnonzero(touched | newer)
        if not any_pair_overlaps(lo[members], hi[members]):
            return None  # nothing newer overlaps anything: no merge would lower the depth
        return Absorb(run, tuple(blocks[i] for i in members), runs[-1].age_ms, Reason.ABSORB_RATIO)
    return None


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
    remaining = sorted(files, key=lambda b: (b.min_key or b"", b.max_key or b"", b.path))
    slices: list[list[Block]] = []
    while remaining and len(slices) < budget:
        chosen: list[Block] = []
        total = 0
        for block in remaining:
            full = len(chosen) >= bounds.max_task_files or total + block.bytes > bounds.max_task_bytes
            if len(chosen) >= 2 and full:
                break
            chosen.append(block)
            total += block.bytes
        slices.append(chosen)
        top = max(b.max_key or b"" for b in chosen)
        remaining = [b for b in remaining[len(chosen) :] if (b.min_key or b"") > top]
    return slices


def absorb_tasks(
    partition: Partition, clustered: Sequence[Block], bounds: SelectionBounds, beta: float, budget: int
) -> list[MergeTask]:
    """The `absorb` policy in one partition: the slices of at most one absorb for this round."""
    runs = recover_runs(clustered)
    absorb = decide_absorb(runs, beta)
    if absorb is None:
        return []
    slices = absorb_slices(absorb.files, bounds, budget)
    own = {b.path for b in absorb.target.files}
    tasks = []
    for files in slices:
        if len(files) == 1 and files[0].path in own:
            continue  # one file of the absorbing run alone: rewriting it would change nothing
        taken = {b.path for b in files}
        kept = [b for b in absorb.target.files if b.path not in taken]
        low, high = min(b.min_key or b"" for b in files), max(b.max_key or b"" for b in files)
        splits = sorted(
            {
                value
                for b in kept
                if (b.min_key or b"") <= high and (b.max_key or b"") >= low
                for value in (b.min_values[0] if b.min_values else None, b.max_values[0] if b.max_values else None)
                if value is not None
            }
        )
        level = max(b.level for b in files)
        depth = int(depth_profile([b.min_key for b in files], [b.max_key for b in files]).block_depth.max())  # type: ignore[misc]
        tasks.append(
            MergeTask(
                partition,
                level,
                _output_level(level),
                tuple(files),
                absorb.reason,
                depth,
                output_run=age_run_id(absorb.target.age_ms),
                horizon_ms=absorb.horizon_ms,
                split_values=tuple(splits),
            )
        )
    return tasks


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
