"""Clustering information (DESIGN §4) and the incremental per-level state. Pure: numpy only, no I/O.

One depth implementation (`depth_profile`) serves the reported metrics and selection, so they can never
disagree. Keys are rank-encoded (distinct min/max tuples become points 0..P-1), point depths come from a
difference-array sweep, and a block's depth is a range-maximum query over the points inside its range.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from recluster.core.blocks import Block
from recluster.core.keys import ClusterKey
from recluster.core.pruning import column_scan_fractions

IntArray = npt.NDArray[np.int64]

EMPTY_AVERAGE_DEPTH = 1.0
"""A table with no clustered blocks is perfectly clustered (Databend reports 0.0; DESIGN §4 says 1.0)."""


def rank_keys(keys: Sequence[bytes]) -> tuple[IntArray, int]:
    """Dense ranks (0-based) of byte keys and the number of distinct keys.

    Fixed-width keys (one numeric column, the common case) are sorted as big-endian 64-bit words with
    numpy, several times faster than sorting byte strings; byte columns equal in every key (the NULL
    marker) are dropped first, so a 9-byte int64 key sorts as one word. Other keys go through Arrow.
    """
    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    width = len(keys[0])
    if width and min(map(len, keys)) == max(map(len, keys)):
        raw = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(n, width)
        raw = raw[:, ~np.all(raw == raw[0], axis=0)]
        if raw.shape[1] == 0:
            return np.zeros(n, dtype=np.int64), 1
        words = -(-raw.shape[1] // 8)
        padded = np.zeros((n, words * 8), dtype=np.uint8)
        padded[:, : raw.shape[1]] = raw
        columns = padded.view(">u8").astype(np.uint64)
        order = np.lexsort(columns.T[::-1]) if words > 1 else np.argsort(columns[:, 0], kind="stable")
        ordered = columns[order]
        new_value = np.ones(n, dtype=bool)
        new_value[1:] = np.any(ordered[1:] != ordered[:-1], axis=1)
        dense = np.cumsum(new_value) - 1
        ranks = np.empty(n, dtype=np.int64)
        ranks[order] = dense
        return ranks, int(dense[-1]) + 1
    ranked = pc.rank(pa.array(keys, pa.binary()), sort_keys="ascending", tiebreaker="dense")
    ranks = ranked.to_numpy().astype(np.int64) - 1
    return ranks, int(ranks.max()) + 1


@dataclass(frozen=True, slots=True)
class DepthProfile:
    """Depth of every point and every block of one set of clustered blocks (same order as given)."""

    lo: IntArray
    """Point index of each block's min tuple."""
    hi: IntArray
    """Point index of each block's max tuple."""
    point_depth: IntArray
    """depth(p) = number of blocks with min <= p <= max, for each distinct point p."""
    block_depth: IntArray
    """Max depth over the points inside each block's range."""
    overlaps: IntArray
    """Number of other blocks whose range intersects each block's range."""


def _range_max(values: IntArray, lo: IntArray, hi: IntArray) -> IntArray:
    """max(values[lo[i] .. hi[i]]) for all i at once, with a sparse table (O(n log n), vectorized)."""
    table = [values]
    span = 1
    while 2 * span <= len(values):
        previous = table[-1]
        table.append(np.maximum(previous[: len(previous) - span], previous[span:]))
        span *= 2
    length = hi - lo + 1
    level = np.floor(np.log2(length)).astype(np.int64)
    result = np.empty(len(lo), dtype=values.dtype)
    for k in np.unique(level):
        mask = level == k
        row = table[int(k)]
        result[mask] = np.maximum(row[lo[mask]], row[hi[mask] - (1 << int(k)) + 1])
    return result


def depth_profile(min_keys: Sequence[bytes], max_keys: Sequence[bytes]) -> DepthProfile:
    """Point depths, block depths and overlaps; blocks touching at one value overlap. O(n log n)."""
    n = len(min_keys)
    ranks, points = rank_keys([*min_keys, *max_keys])
    lo, hi = ranks[:n], ranks[n:]
    starts_at = np.bincount(lo, minlength=points)
    ends_at = np.bincount(hi, minlength=points)
    point_depth = np.cumsum(starts_at) - np.concatenate(([0], np.cumsum(ends_at)[:-1]))
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return DepthProfile(lo, hi, point_depth, empty, empty)
    # Depth only rises at a block's min, so the maximum inside [lo, hi] sits at some block's min:
    # the range-maximum table needs only the distinct min points (at most n), indexed by rank.
    is_start = starts_at > 0
    start_index = np.cumsum(is_start) - 1
    block_depth = _range_max(point_depth[is_start], start_index[lo], start_index[hi])
    # overlaps(b) = n - 1 - #(blocks starting after b ends) - #(blocks ending before b starts)
    starting_at_or_before = np.cumsum(starts_at)
    ending_before = np.concatenate(([0], np.cumsum(ends_at)))
    overlaps = n - 1 - (n - starting_at_or_before[hi]) - ending_before[lo]
    return DepthProfile(lo, hi, point_depth, block_depth.astype(np.int64), overlaps.astype(np.int64))


def mean_block_depth(blocks: Sequence[Block]) -> float:
    """The average depth `info` reports (the mean of the blocks' depths) over clustered blocks; 1.0 for none."""
    profile = depth_profile([b.min_key for b in blocks], [b.max_key for b in blocks])  # type: ignore[misc]
    return float(profile.block_depth.mean()) if len(profile.block_depth) else 1.0


def histogram_bucket(depth: int) -> int:
    """Buckets 1..16, then 32, 64, 128, ...: the smallest bucket >= depth."""
    if depth <= 16:
        return max(depth, 1)
    return 1 << math.ceil(math.log2(depth))


def bucket_label(bucket: int) -> str:
    return f"{bucket:05d}"


def nearest_rank(sorted_values: npt.NDArray[Any], percent: float) -> int:
    """Nearest-rank percentile of an ascending array (the smallest value with >= percent% at or below)."""
    rank = math.ceil(percent / 100 * len(sorted_values))
    return int(sorted_values[max(rank, 1) - 1])


@dataclass(frozen=True, slots=True)
class ClusteringMetrics:
    """The metric keys of DESIGN §4 for one set of blocks (a table, a level, a partition)."""

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
    """Blocks as parallel key lists plus running totals: O(1) to add or remove a block (swap-remove),
    so recomputing a big level's metrics after a small commit costs only the vectorized depth sweep."""

    def __init__(self, blocks: Iterable[Block] = ()) -> None:
        self._clustered: list[Block] = []
        self._min_keys: list[bytes] = []
        self._max_keys: list[bytes] = []
        self._position: dict[str, int] = {}
        self._unclustered: dict[str, Block] = {}
        self.rows = self.bytes = self.constants = 0
        for block in blocks:
            self.add(block)

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

    def add(self, block: Block) -> None:
        """Add (or replace) a block."""
        self.remove(block.path)
        self._count(block, 1)
        if not block.clustered:
            self._unclustered[block.path] = block
            return
        self._position[block.path] = len(self._clustered)
        self._clustered.append(block)
        self._min_keys.append(block.min_key)  # type: ignore[arg-type]
        self._max_keys.append(block.max_key)  # type: ignore[arg-type]

    def remove(self, path: str) -> bool:
        """Remove a block by path; False when it is not here."""
        if path in self._unclustered:
            self._count(self._unclustered.pop(path), -1)
            return True
        index = self._position.pop(path, None)
        if index is None:
            return False
        self._count(self._clustered[index], -1)
        last = len(self._clustered) - 1
        if index != last:  # move the last block into the hole
            moved = self._clustered[last]
            self._clustered[index] = moved
            self._min_keys[index] = self._min_keys[last]
            self._max_keys[index] = self._max_keys[last]
            self._position[moved.path] = index
        self._clustered.pop()
        self._min_keys.pop()
        self._max_keys.pop()
        return True

    def metrics(self) -> ClusteringMetrics:
        return summarize(
            self._min_keys,
            self._max_keys,
            blocks=len(self),
            constants=self.constants,
            unclustered=len(self._unclustered),
            rows=self.rows,
            nbytes=self.bytes,
        )


def summarize(
    min_keys: Sequence[bytes],
    max_keys: Sequence[bytes],
    *,
    blocks: int,
    constants: int,
    unclustered: int,
    rows: int,
    nbytes: int,
) -> ClusteringMetrics:
    """The metrics from the clustered blocks' keys and the totals: the one place they are computed."""
    totals = {
        "total_block_count": blocks,
        "constant_block_count": constants,
        "unclustered_block_count": unclustered,
        "total_rows": rows,
        "total_bytes": nbytes,
    }
    if not min_keys:
        return ClusteringMetrics(
            **totals,
            average_overlaps=0.0,
            average_depth=EMPTY_AVERAGE_DEPTH,
            p95_depth=1,
            p99_depth=1,
            block_depth_histogram={},
        )
    profile = depth_profile(min_keys, max_keys)
    depths = np.sort(profile.block_depth)
    per_depth_values, per_depth_counts = np.unique(depths, return_counts=True)
    histogram: dict[int, int] = {}
    for depth, count in zip(per_depth_values.tolist(), per_depth_counts.tolist(), strict=True):
        bucket = histogram_bucket(depth)
        histogram[bucket] = histogram.get(bucket, 0) + count
    return ClusteringMetrics(
        **totals,
        average_overlaps=float(profile.overlaps.mean()),
        average_depth=float(depths.mean()),
        p95_depth=nearest_rank(depths, 95),
        p99_depth=nearest_rank(depths, 99),
        block_depth_histogram={bucket_label(b): histogram[b] for b in sorted(histogram)},
    )


def clustering_metrics(blocks: Iterable[Block]) -> ClusteringMetrics:
    """Metrics of a set of blocks in bulk (a snapshot); `BlockSet` serves incremental updates."""
    members = list(blocks)
    clustered = [b for b in members if b.min_key is not None and b.max_key is not None]
    min_keys: list[bytes] = [b.min_key for b in clustered]  # type: ignore[misc]
    max_keys: list[bytes] = [b.max_key for b in clustered]  # type: ignore[misc]
    return summarize(
        min_keys,
        max_keys,
        blocks=len(members),
        constants=sum(map(bytes.__eq__, min_keys, max_keys)),
        unclustered=len(members) - len(clustered),
        rows=sum(b.rows for b in members),
        nbytes=sum(b.bytes for b in members),
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


def blocks_by_level(blocks: Iterable[Block]) -> dict[int, list[Block]]:
    levels: dict[int, list[Block]] = {}
    for block in blocks:
        levels.setdefault(block.level, []).append(block)
    return levels


def clustering_info(blocks: Sequence[Block], key: ClusterKey | None = None) -> ClusteringInfo:
    """Whole-table and per-level metrics, and per column of `key` the scan fraction."""
    levels = {level: clustering_metrics(members) for level, members in sorted(blocks_by_level(blocks).items())}
    # A table of one level is that level: no second computation.
    table = next(iter(levels.values())) if len(levels) == 1 else clustering_metrics(blocks)
    return ClusteringInfo(table=table, levels=levels, column_scan=column_scan_fractions(blocks, key) if key else {})


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
        touched: set[int] = set()
        for path in removed:
            level = self._level_of.pop(path, None)
            if level is not None:
                self._levels[level].remove(path)
                touched.add(level)
        for block in added:
            previous = self._level_of.get(block.path)
            if previous is not None and previous != block.level:  # a re-added path replaces its old entry
                self._levels[previous].remove(block.path)
                touched.add(previous)
            self._levels.setdefault(block.level, BlockSet()).add(block)
            self._level_of[block.path] = block.level
            touched.add(block.level)
        for level in touched:
            self._cached.pop(level, None)
            if not self._levels.get(level, True):
                del self._levels[level]
        return frozenset(touched)

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
