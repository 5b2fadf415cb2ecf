"""Clustering information (docs/concepts.md) and the incremental per-level state. Pure: numpy only, no I/O.

The figures `info` reports and the job publishes, from the depth profile (`depth`) of a table, a level or a partition:
in bulk from a snapshot's `BlockTable`, or kept up to date commit by commit by each level's `BlockSet`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from recluster.core.block_table import BlockTable, as_table, release_arrow_memory
from recluster.core.blocks import Block
from recluster.core.depth import DepthProfile, ranked_depth_profile
from recluster.core.keys import ClusterKey
from recluster.core.pruning import column_scan_fractions
from recluster.core.ranks import IntArray, as_words, word_key

EMPTY_AVERAGE_DEPTH = 1.0
"""A table with no clustered blocks is perfectly clustered (Databend reports 0.0; docs/concepts.md says 1.0)."""


def table_mean_depth(table: BlockTable, indices: IntArray) -> float:
    """The average depth `info` reports (the mean of the blocks' depths) of some clustered files of a table; 1.0
    for none."""
    if not len(indices):
        return 1.0
    return float(ranked_depth_profile(*table.ranks_of(indices)).block_depth.mean())


def histogram_bucket(depth: int) -> int:
    """Buckets 1..16, then 32, 64, 128, ...: the smallest bucket >= depth."""
    if depth <= 16:
        return max(depth, 1)
    return 1 << math.ceil(math.log2(depth))


def bucket_label(bucket: int) -> str:
    return f"{bucket:05d}"


def nearest_rank(counts: IntArray, percent: float) -> int:
    """Nearest-rank percentile of values given as counts (counts[v] values equal to v): the smallest value with
    >= percent% of all at or below."""
    cumulative = np.cumsum(counts)
    rank = max(math.ceil(percent / 100 * int(cumulative[-1])), 1)
    return int(np.searchsorted(cumulative, rank))


@dataclass(frozen=True, slots=True)
class ClusteringMetrics:
    """The metric keys of docs/concepts.md#depth-and-levels for one set of blocks (a table, a level, a partition)."""

    total_block_count: int
    constant_block_count: int
    unclustered_block_count: int
    total_rows: int
    total_bytes: int
    average_overlaps: float
    average_depth: float
    p95_depth: int
    p99_depth: int
    block_depth_histogram: Mapping[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "total_block_count": self.total_block_count,
            "constant_block_count": self.constant_block_count,
            "unclustered_block_count": self.unclustered_block_count,
            "total_rows": self.total_rows,
            "total_bytes": self.total_bytes,
            "average_overlaps": self.average_overlaps,
            "average_depth": self.average_depth,
            "p95_depth": self.p95_depth,
            "p99_depth": self.p99_depth,
            "block_depth_histogram": dict(self.block_depth_histogram),
        }


class BlockSet:
    """One level's blocks, kept ready for its metrics: the distinct keys sorted (with how many block ends sit on
    each) and every clustered block's point ranks, updated per commit in time linear in the level's size with
    small constants (vectorized rank shifts, no sort), so a small commit on a big level costs only the depth sweep.
    """

    def __init__(self, blocks: Iterable[Block] = ()) -> None:
        self._clustered: list[Block] = []
        self._position: dict[str, int] = {}
        self._unclustered: dict[str, Block] = {}
        self._lo = np.zeros(0, dtype=np.int64)
        self._hi = np.zeros(0, dtype=np.int64)
        self._points: npt.NDArray[Any] = np.zeros(0, dtype=np.uint64)
        """The distinct min/max keys of the clustered blocks, ascending (see `_comparable_keys`)."""
        self._ends = np.zeros(0, dtype=np.int64)
        """How many block minimums and maximums sit on each point (points with none are dropped once they are a
        quarter of all: until then they only cost a slot; ranks need not be dense)."""
        self.rows = self.bytes = self.constants = 0
        self.update(blocks, ())

    def __len__(self) -> int:
        return len(self._clustered) + len(self._unclustered)

    def __contains__(self, path: object) -> bool:
        return path in self._position or path in self._unclustered

    def __iter__(self) -> Iterator[Block]:
        yield from self._clustered
        yield from self._unclustered.values()

    def _count(self, block: Block, sign: int) -> None:
        self.rows += sign * block.rows
        self.bytes += sign * block.bytes
        self.constants += sign * block.constant

    def update(self, added: Iterable[Block], removed: Iterable[str]) -> None:
        """Remove `removed` (unknown paths are ignored), then add `added` (a path already here is replaced)."""
        new = list({b.path: b for b in added}.values())
        for path in {*removed, *(b.path for b in new)}:
            self._remove(path)
        for block in new:
            self._count(block, 1)
        for block in new:
            if not block.clustered:
                self._unclustered[block.path] = block
        self._add_clustered([b for b in new if b.clustered])

    def _remove(self, path: str) -> None:
        if path in self._unclustered:
            self._count(self._unclustered.pop(path), -1)
            return
        index = self._position.pop(path, None)
        if index is None:
            return
        self._count(self._clustered[index], -1)
        self._ends[self._lo[index]] -= 1
        self._ends[self._hi[index]] -= 1
        last = len(self._clustered) - 1
        if index != last:  # move the last block into the hole
            moved = self._clustered[last]
            self._clustered[index] = moved
            self._lo[index], self._hi[index] = self._lo[last], self._hi[last]
            self._position[moved.path] = index
        self._clustered.pop()
        self._lo, self._hi = self._lo[:last], self._hi[:last]

    def _comparable_keys(self, keys: list[bytes]) -> npt.NDArray[Any]:
        """The keys as the points array holds them: while every key is one 8-byte value (a marker, then 8 bytes:
        one integer, date, timestamp or float column, unpartitioned) as the unsigned numbers they order as, searched
        and inserted at numpy speed; else as bytes objects (compared as Python compares them), and the points too."""
        if self._points.dtype != object:
            words = as_words(keys)
            if words is not None:
                return words
            converted = np.empty(len(self._points), dtype=object)
            converted[:] = [word_key(w) for w in self._points.tolist()]
            self._points = converted
        objects = np.empty(len(keys), dtype=object)
        objects[:] = keys
        return objects

    def _add_clustered(self, blocks: list[Block]) -> None:
        """Insert the new blocks' new keys (and drop unused points when they are many), moving every rank to its
        new place with one gather: no sort, no search per block."""
        count = len(blocks)
        ends_of_blocks = [b.min_key for b in blocks] + [b.max_key for b in blocks]
        keys = self._comparable_keys(ends_of_blocks)  # type: ignore[arg-type]
        points, ends = self._points, self._ends
        at = np.searchsorted(points, keys)
        found = at < len(points)
        found[found] = points[at[found]] == keys[found]
        keep = ends > 0
        keep[at[found]] = True
        if np.count_nonzero(keep) * 4 > len(points) * 3:  # few unused points: they stay (no block end, no depth)
            keep[:] = True
        fresh = np.unique(keys[~found])
        if len(fresh) or not keep.all():
            places = np.searchsorted(points, fresh)
            kept_before = np.concatenate(([0], np.cumsum(keep)))
            inserted_up_to = np.cumsum(np.bincount(places, minlength=len(points) + 1))
            new_place = kept_before[:-1] + inserted_up_to[:-1]
            self._lo, self._hi = new_place[self._lo], new_place[self._hi]
            at_fresh = kept_before[places]  # np.insert puts fresh[j] before kept point at_fresh[j]: place + j
            self._points = np.insert(points if keep.all() else points[keep], at_fresh, fresh)
            self._ends = np.insert(ends[keep], at_fresh, 0)
        if not count:
            return
        ranks = np.searchsorted(self._points, keys).astype(np.int64)
        np.add.at(self._ends, ranks, 1)
        for offset, block in enumerate(blocks):
            self._position[block.path] = len(self._clustered) + offset
        self._clustered.extend(blocks)
        self._lo = np.concatenate([self._lo, ranks[:count]])
        self._hi = np.concatenate([self._hi, ranks[count:]])

    def metrics(self) -> ClusteringMetrics:
        profile = ranked_depth_profile(self._lo, self._hi, len(self._points)) if self._clustered else None
        return summarize(
            profile,
            blocks=len(self),
            constants=self.constants,
            unclustered=len(self._unclustered),
            rows=self.rows,
            nbytes=self.bytes,
        )


def summarize(
    profile: DepthProfile | None,
    *,
    blocks: int,
    constants: int,
    unclustered: int,
    rows: int,
    nbytes: int,
) -> ClusteringMetrics:
    """The metrics from the clustered blocks' depth profile and the totals: the one place they are computed."""
    totals = {
        "total_block_count": blocks,
        "constant_block_count": constants,
        "unclustered_block_count": unclustered,
        "total_rows": rows,
        "total_bytes": nbytes,
    }
    if profile is None or not len(profile.block_depth):
        return ClusteringMetrics(
            **totals,
            average_overlaps=0.0,
            average_depth=EMPTY_AVERAGE_DEPTH,
            p95_depth=1,
            p99_depth=1,
            block_depth_histogram={},
        )
    counts = np.bincount(profile.block_depth)
    cumulative, top = np.cumsum(counts), len(counts) - 1
    histogram: dict[int, int] = {}
    bucket, below = 1, 0
    while True:  # one step per bucket (about 16 + log2(deepest)), not per distinct depth
        up_to = int(cumulative[min(bucket, top)])
        if up_to > below:
            histogram[bucket] = up_to - below
        if bucket >= top:
            break
        bucket, below = histogram_bucket(bucket + 1), up_to
    return ClusteringMetrics(
        **totals,
        average_overlaps=float(profile.overlaps.mean()),
        average_depth=float(profile.block_depth.mean()),
        p95_depth=nearest_rank(counts, 95),
        p99_depth=nearest_rank(counts, 99),
        block_depth_histogram={bucket_label(b): histogram[b] for b in sorted(histogram)},
    )


def clustering_metrics(blocks: Sequence[Block]) -> ClusteringMetrics:
    """Metrics of a set of blocks in bulk (a snapshot); `BlockSet` serves incremental updates."""
    table = as_table(blocks)
    return table_metrics(table)


def table_metrics(table: BlockTable, indices: IntArray | None = None) -> ClusteringMetrics:
    """`clustering_metrics` of some files of a table (None: all of them, without an index array)."""
    clustered = table.clustered if indices is None else table.clustered[indices]
    count = len(clustered)
    lo, hi, points = table.key_ranks()
    if indices is None and clustered.all():  # every file: the table's own ranks, no index array
        profile = ranked_depth_profile(lo, hi, points) if count else None
        constants = int(np.count_nonzero(lo == hi))
    else:
        members = np.arange(count) if indices is None else indices
        members = members if clustered.all() else members[clustered]
        profile = ranked_depth_profile(*table.ranks_of(members)) if len(members) else None
        constants = int(np.count_nonzero(lo[members] == hi[members]))
    return summarize(
        profile,
        blocks=count,
        constants=constants,
        unclustered=count - int(np.count_nonzero(clustered)),
        rows=table.total_rows(indices),
        nbytes=table.total_bytes(indices),
    )


@dataclass(frozen=True, slots=True)
class ClusteringInfo:
    """Clustering information for a whole table and for each of its levels."""

    table: ClusteringMetrics
    levels: Mapping[int, ClusteringMetrics]
    column_scan: Mapping[str, float] = field(default_factory=dict)
    """Per key column, the average fraction of files a point predicate on it reads (`pruning`)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.table.to_dict(),
            "levels": {str(level): self.levels[level].to_dict() for level in sorted(self.levels)},
            **({"column_scan": dict(self.column_scan)} if self.column_scan else {}),
        }


def _where(mask: npt.NDArray[np.bool_]) -> IntArray:
    """Indices of the true entries as int32 (a million of them: half the memory of `np.flatnonzero`'s)."""
    indices: IntArray = np.flatnonzero(mask).astype(np.int32)
    return indices


def clustering_info(blocks: Sequence[Block], key: ClusterKey | None = None) -> ClusteringInfo:
    """Whole-table and per-level metrics, and per column of `key` the scan fraction."""
    table = as_table(blocks)
    distinct = np.unique(table.levels).tolist()
    if len(distinct) == 1:
        levels = {int(distinct[0]): table_metrics(table)}
    else:
        levels = {int(level): table_metrics(table, _where(table.levels == level)) for level in distinct}
    # A table of one level is that level: no second computation.
    whole = next(iter(levels.values())) if len(levels) == 1 else table_metrics(table)
    column_scan = column_scan_fractions(table, key) if key else {}
    release_arrow_memory()  # (the scan's Arrow temporaries are gone once it has returned)
    return ClusteringInfo(table=whole, levels=levels, column_scan=column_scan)


class ClusteringState:
    """Live blocks of one table by level, updated from each commit's adds and removes.

    Only the levels a commit touched are recomputed, each from its `BlockSet` with the same code a full
    recompute uses: equal to it by construction.
    """

    def __init__(self, blocks: Iterable[Block] = ()) -> None:
        self._levels: dict[int, BlockSet] = {}
        self._level_of: dict[str, int] = {}
        self._cached: dict[int, ClusteringMetrics] = {}
        self.apply(added=blocks, removed=())

    def apply(self, added: Iterable[Block], removed: Iterable[str]) -> frozenset[int]:
        """Apply one commit; returns the levels it changed. Removing an unknown path is a no-op."""
        gone: dict[int, set[str]] = {}
        new: dict[int, dict[str, Block]] = {}
        for path in removed:
            level = self._level_of.pop(path, None)
            if level is not None:
                gone.setdefault(level, set()).add(path)
        for block in added:
            previous = self._level_of.get(block.path)
            if previous is not None and previous != block.level:  # a re-added path leaves its old level
                if new.get(previous, {}).pop(block.path, None) is None:
                    gone.setdefault(previous, set()).add(block.path)
                else:
                    new.setdefault(previous, {})
            new.setdefault(block.level, {})[block.path] = block
            self._level_of[block.path] = block.level
        touched = frozenset(gone) | frozenset(new)
        for level in touched:
            if level not in self._levels:
                self._levels[level] = BlockSet()
            self._levels[level].update(new.get(level, {}).values(), gone.get(level, ()))
            self._cached.pop(level, None)
            if not self._levels[level]:
                del self._levels[level]
        return touched

    @property
    def blocks(self) -> list[Block]:
        return [block for members in self._levels.values() for block in members]

    @property
    def levels(self) -> list[int]:
        return sorted(self._levels)

    def level_blocks(self, level: int) -> list[Block]:
        return list(self._levels.get(level, ()))

    def level_metrics(self, level: int) -> ClusteringMetrics:
        if level not in self._cached:
            members = self._levels.get(level)
            self._cached[level] = members.metrics() if members else clustering_metrics(())
        return self._cached[level]

    def info(self, key: ClusterKey | None = None) -> ClusteringInfo:
        levels = {level: self.level_metrics(level) for level in self.levels}
        blocks = self.blocks
        table = next(iter(levels.values())) if len(levels) == 1 else clustering_metrics(blocks)
        return ClusteringInfo(table=table, levels=levels, column_scan=column_scan_fractions(blocks, key) if key else {})
