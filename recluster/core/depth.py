"""Depth: how many files cover each key point, and each file's deepest point and overlaps (docs/concepts.md). Pure:
numpy only, no I/O.

One depth implementation (`ranked_depth_profile`) serves the reported metrics and selection, so they can never
disagree. Keys are rank-encoded (distinct min/max tuples become points 0..P-1: sorted at once by `depth_profile`,
kept up to date commit by commit by a level's `metrics.BlockSet`), point depths come from a difference-array sweep,
and a block's depth is a range-maximum query over the points inside its range.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from recluster.core.ranks import IntArray, rank_keys


@dataclass(frozen=True, slots=True)
class DepthProfile:
    """Depth of every point and every block of one set of clustered blocks (same order as given)."""

    lo: IntArray
    """Point index of each block's min tuple."""
    hi: IntArray
    """Point index of each block's max tuple."""
    point_depth: npt.NDArray[np.int32]
    """depth(p) = number of blocks with min <= p <= max, for each distinct point p."""
    block_depth: IntArray
    """Max depth over the points inside each block's range."""
    overlaps: IntArray
    """Number of other blocks whose range intersects each block's range."""


def _range_max(values: IntArray, lo: IntArray, hi: IntArray) -> IntArray:
    """max(values[lo[i] .. hi[i]]) for all i at once, with a sparse table built one row at a time (vectorized,
    O(n log n) time, O(n) memory): row k holds the maximum of each window of 2**k values, and a query of length
    between 2**k and 2**(k+1) is the larger of two windows of row k, answered while row k is at hand."""
    n = len(values)
    result = np.zeros(len(lo), dtype=np.int32)  # depths fit; half the memory traffic
    if len(lo) == 0:
        return result
    row = values.astype(np.int32)
    level = np.empty(len(lo), dtype=np.int8)  # floor(log2(length)) of each query, a slice at a time
    for start in range(0, len(lo), COUNT_POINTS_AT_ONCE):
        part = slice(start, start + COUNT_POINTS_AT_ONCE)
        level[part] = np.frexp((hi[part] - lo[part] + 1).astype(np.float64))[1] - 1  # exact
    span = 1
    for k in range(int(level.max()) + 1):
        asked = np.flatnonzero(level == k)
        if len(asked):
            result[asked] = np.maximum(row[lo[asked]], row[hi[asked] - span + 1])
        if 2 * span <= n:
            width = n - 2 * span + 1
            np.maximum(row[:width], row[span : span + width], out=row[:width])
        span *= 2
    return result


def depth_profile(min_keys: Sequence[bytes], max_keys: Sequence[bytes]) -> DepthProfile:
    """Point depths, block depths and overlaps; blocks touching at one value overlap. O(n log n)."""
    n = len(min_keys)
    ranks, points = rank_keys([*min_keys, *max_keys])
    return ranked_depth_profile(ranks[:n], ranks[n:], points)


COUNT_POINTS_AT_ONCE = 1 << 19
"""Points counted per `np.bincount` call: its int64 counts stay at 4 MB however many points a table has."""


def _cumulative_count(points_of: IntArray, points: int, out: npt.NDArray[np.int32]) -> None:
    """How many of `points_of` are at or before each point, into `out` (int32), a window of points at a time."""
    if points <= COUNT_POINTS_AT_ONCE:
        np.cumsum(np.bincount(points_of, minlength=points), dtype=np.int32, out=out)
        return
    ordered = np.sort(points_of)  # each window's points are then one slice, found by bisection
    bounds = np.searchsorted(ordered, np.arange(0, points + COUNT_POINTS_AT_ONCE, COUNT_POINTS_AT_ONCE))
    for window, start in enumerate(range(0, points, COUNT_POINTS_AT_ONCE)):
        width = min(COUNT_POINTS_AT_ONCE, points - start)
        inside = ordered[bounds[window] : bounds[window + 1]] - start
        out[start : start + width] = np.bincount(inside, minlength=width)
    np.cumsum(out, out=out)


def ranked_depth_profile(lo: IntArray, hi: IntArray, points: int) -> DepthProfile:
    """`depth_profile` from the blocks' point ranks among `points` ordered keys (a point no block starts or ends
    at is allowed: it never starts a block, so it changes no figure). Counts are int32 (a million blocks: every
    array here is a few megabytes)."""
    n = len(lo)
    starting_at_or_before = np.zeros(points, dtype=np.int32)
    _cumulative_count(lo, points, starting_at_or_before)
    ending_before = np.zeros(points + 1, dtype=np.int32)
    _cumulative_count(hi, points, ending_before[1:])
    point_depth = starting_at_or_before - ending_before[:-1]
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return DepthProfile(lo, hi, point_depth, empty, empty)
    # overlaps(b) = n - 1 - #(blocks starting after b ends) - #(blocks ending before b starts)
    overlaps = starting_at_or_before[hi]
    overlaps -= ending_before[lo]
    overlaps -= 1
    del starting_at_or_before, ending_before  # (freed before the range maximum needs its own arrays)
    return DepthProfile(lo, hi, point_depth, _range_max(point_depth, lo, hi), overlaps)
