"""Run a strategy over synthetic appends shaped like a table's history, in the table model
(docs/commands.md#recluster-estimate).

The configured policy is the product's own selection (`select_merge_tasks`) after every append, on files that hold
real keys and are cut as the merge kernel cuts them (`ModelTable`). The alternatives a user weighs are what other
tools do: nothing, delta-rs `compact` (bin-packing small files, unsorted) and a full sort (FINAL, `OPTIMIZE
ZORDER`) every N appends. Appends are scaled down to `rows_per_append` model rows (files scaled alike: the same
rows per append / rows per file) and, beyond `MAX_MODEL_APPENDS`, one modelled append stands for several commits.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from recluster.core.curves import RANK_BITS, hilbert_index
from recluster.core.estimate.model import FINGERPRINT, KEY, MODEL_BYTES_PER_ROW, ModelTable, cut_sorted
from recluster.core.estimate.shape import CURVE_COLUMNS, HistoryShape, synthetic_append
from recluster.core.keys import ClusterKey
from recluster.core.pruning import BOUND_POINTS, column_scan_fractions
from recluster.core.selection import select_merge_tasks
from recluster.core.selection.plan import SelectionBounds

MAX_MODEL_APPENDS = 500
"""Longer histories are modelled as this many appends, each standing for several commits (said in the output)."""
MODEL_ROWS_PER_APPEND = 2_000
"""Model rows of one append (fewer when the appends are smaller); files are scaled alike. Fewer rows make the
late rows coarser: at 200 the row write amplification of time-like tables came out 8-14% high."""
MAX_MODEL_ROWS = 400_000
"""Model rows in all: a long history gets fewer rows per append (a full sort every append stays fast)."""
MIN_MODEL_FILE_ROWS = 8
DEPTH_SAMPLES = 100
"""The depth is measured after this many appends at most, evenly spread (the time average is over those)."""
STEADY_SHARE = 0.5
"""Per-day figures come from the newer half of the modelled appends (the start of a table is cheaper)."""


class Strategy(StrEnum):
    """What is done to the table as appends arrive."""

    POLICY = "policy"
    """recluster's configured selection policy after every append."""
    NONE = "none"
    COMPACT = "compact_every_n"
    """delta-rs optimize.compact every N appends: small files bin-packed, not sorted."""
    FULL_SORT = "full_sort_every_n"
    """A FINAL recluster or OPTIMIZE ZORDER every N appends: everything sorted again."""


@dataclass(frozen=True, slots=True)
class ModelScale:
    """How the history maps onto the model: model appends, their rows, the model file size."""

    appends: int
    commits_per_append: int
    rows_per_append: int
    target_rows: int
    rows_scale: float
    """Real rows per model row."""

    @classmethod
    def of(cls, shape: HistoryShape, target_rows: int) -> ModelScale:
        commits = max(1, math.ceil(shape.appends / MAX_MODEL_APPENDS))
        real_rows = shape.rows_per_append * commits
        appends = math.ceil(shape.appends / commits)
        rows = max(1, min(MODEL_ROWS_PER_APPEND, MAX_MODEL_ROWS // appends, round(real_rows)))
        model_target = round(target_rows * rows / real_rows)
        if model_target < MIN_MODEL_FILE_ROWS:  # appends far bigger than a file: keep files a few rows long
            rows = max(rows, math.ceil(rows * MIN_MODEL_FILE_ROWS / max(model_target, 1)))
            model_target = max(MIN_MODEL_FILE_ROWS, round(target_rows * rows / real_rows))
        return cls(appends, commits, rows, model_target, real_rows / rows)

    @property
    def sampled(self) -> bool:
        return self.commits_per_append > 1


@dataclass(frozen=True, slots=True)
class ModelRun:
    """What one strategy did over the modelled appends, in model rows and files."""

    strategy: Strategy
    appends: int
    rows_appended: int
    rows_rewritten: int
    merges: int
    files_added: int
    files_removed: int
    steady_appends: int
    """The newer appends the steady_* figures count over."""
    steady_rows_rewritten: int
    steady_merges: int
    steady_files_added: int
    steady_files_removed: int
    time_averaged_depth: float
    final_files: int
    files_read: tuple[float, ...]
    """Per key column modelled, files a point predicate on it reads after stats pruning, at the end."""


@dataclass
class _Counts:
    merges: int = 0
    added: int = 0
    removed: int = 0


def run_model(
    shape: HistoryShape, scale: ModelScale, strategy: Strategy, bounds: SelectionBounds, every: int, seed: int = 35
) -> ModelRun:
    """Append `scale.appends` synthetic appends of `shape` to an empty model table, doing `strategy` after each."""
    rng = np.random.default_rng(seed)
    table = ModelTable(scale.target_rows)
    model_bounds = _model_bounds(shape, scale, bounds)
    counts, steady = _Counts(), _Counts()
    steady_from = int(scale.appends * (1 - STEADY_SHARE))
    steady_rewritten = 0
    depths: list[float] = []
    every = max(1, round(every / scale.commits_per_append))  # in modelled appends
    stride = max(1, scale.appends // DEPTH_SAMPLES)
    for index in range(scale.appends):
        table.append(synthetic_append(shape, index, scale.rows_per_append, rng))
        rewritten = table.rewritten
        done = _maintain(table, strategy, model_bounds, (index + 1) % every == 0)
        if index >= steady_from:
            steady_rewritten += table.rewritten - rewritten
            steady.merges, steady.added, steady.removed = (
                steady.merges + done.merges,
                steady.added + done.added,
                steady.removed + done.removed,
            )
        counts.merges, counts.added, counts.removed = (
            counts.merges + done.merges,
            counts.added + done.added,
            counts.removed + done.removed,
        )
        if (scale.appends - 1 - index) % stride == 0:
            depths.append(table.average_depth)
    blocks = list(table.blocks.values())
    return ModelRun(
        strategy=strategy,
        appends=scale.appends,
        rows_appended=table.appended,
        rows_rewritten=table.rewritten,
        merges=counts.merges,
        files_added=counts.added,
        files_removed=counts.removed,
        steady_appends=scale.appends - steady_from,
        steady_rows_rewritten=steady_rewritten,
        steady_merges=steady.merges,
        steady_files_added=steady.added,
        steady_files_removed=steady.removed,
        time_averaged_depth=float(np.mean(depths)),
        final_files=len(blocks),
        files_read=_files_read(table, shape.key_columns),
    )


@dataclass(frozen=True, slots=True)
class ModelFinal:
    """A FINAL on a model of the table as its history left it (nothing clustered): the product's FINAL selection
    round after round, as `recluster run --final` repeats it."""

    rounds: int
    tasks: int
    rows_rewritten: int
    first_round_rows: int


def run_final(
    shape: HistoryShape, scale: ModelScale, bounds: SelectionBounds, max_rounds: int, seed: int = 35
) -> ModelFinal:
    """Rounds until the plan is empty, a round makes the table no shallower, or `max_rounds`."""
    rng = np.random.default_rng(seed)
    table = ModelTable(scale.target_rows)
    for index in range(scale.appends):
        table.append(synthetic_append(shape, index, scale.rows_per_append, rng))
    model_bounds = _model_bounds(shape, scale, bounds)
    rounds = tasks = first = 0
    depth = table.average_depth
    while rounds < max_rounds:
        plan = select_merge_tasks("model", rounds, list(table.blocks.values()), model_bounds, final=True)
        if not plan.tasks:
            break
        rewritten = table.rewritten
        for task in plan.tasks:
            table.merge(task)
        rounds, tasks = rounds + 1, tasks + len(plan.tasks)
        first = first or table.rewritten - rewritten
        if table.average_depth >= depth:
            break
        depth = table.average_depth
    return ModelFinal(rounds, tasks, table.rewritten, first)


def _model_bounds(shape: HistoryShape, scale: ModelScale, bounds: SelectionBounds) -> SelectionBounds:
    """The table's selection bounds on model files: the model's key, file size and bytes per row."""
    model_bytes_per_row = shape.bytes_per_row * scale.rows_scale / MODEL_BYTES_PER_ROW
    return dataclasses.replace(
        bounds,
        key_fingerprint=FINGERPRINT,
        target_rows=scale.target_rows,
        max_task_bytes=max(1, int(bounds.max_task_bytes / model_bytes_per_row)),
    )


def _maintain(table: ModelTable, strategy: Strategy, bounds: SelectionBounds, due: bool) -> _Counts:
    """Do the strategy's work after one append; what it merged, added and removed."""
    done = _Counts()
    if strategy is Strategy.POLICY:
        for task in table.plan(bounds).tasks:
            done.merges += 1
            done.removed += len(task.files)
            done.added += len(table.merge(task))
    elif strategy is Strategy.FULL_SORT and due and len(table.blocks) > 1:
        pieces = cut_sorted(table.all_keys(), table.target_rows, ())
        done.merges, done.removed, done.added = 1, len(table.blocks), len(pieces)
        table.replace(list(table.keys), pieces)
    elif strategy is Strategy.COMPACT and due:
        for paths in _compact_bins(table):
            done.merges += 1
            done.removed += len(paths)
            done.added += 1
            table.replace(paths, [np.concatenate([table.keys[p] for p in paths])])
    return done


def _compact_bins(table: ModelTable) -> list[list[str]]:
    """delta-rs compact's bins: the files under the target size, oldest first, packed up to the target; a bin of
    one file is left alone."""
    bins: list[list[str]] = [[]]
    rows = 0
    for path, keys in table.keys.items():
        if len(keys) >= table.target_rows:
            continue
        if bins[-1] and rows + len(keys) > table.target_rows:
            bins.append([])
            rows = 0
        bins[-1].append(path)
        rows += len(keys)
    return [b for b in bins if len(b) > 1]


def _files_read(table: ModelTable, columns: int) -> tuple[float, ...]:
    """Files a point predicate reads: on the model's one key (`column_scan_fractions`, as `info` measures), or, for
    a key on the curve, on each column: its ranks decoded from the curve values, predicates every
    1,024 / `BOUND_POINTS` ranks (as at a curve's range bounds)."""
    blocks = list(table.blocks.values())
    if columns != CURVE_COLUMNS:
        return (column_scan_fractions(blocks, ClusterKey(KEY)).get(KEY[0].name, 1.0) * len(blocks),)
    cells = _curve_cells()
    ranges = np.array([[cells[keys].min(axis=0), cells[keys].max(axis=0)] for keys in table.keys.values()])
    points = np.arange(0, 1 << RANK_BITS, (1 << RANK_BITS) // BOUND_POINTS)
    return tuple(
        float(((ranges[:, 0, c, None] <= points) & (ranges[:, 1, c, None] >= points)).sum(axis=0).mean())
        for c in range(CURVE_COLUMNS)
    )


@functools.cache
def _curve_cells() -> npt.NDArray[np.int64]:
    """Curve value -> the (rank, rank) cell it is, for a two-column Hilbert key."""
    side = 1 << RANK_BITS
    grid = np.stack(np.divmod(np.arange(side * side, dtype=np.int64), side), axis=1)
    cells = np.empty_like(grid)
    cells[hilbert_index(grid.astype(np.uint64)).astype(np.int64)] = grid
    return cells
