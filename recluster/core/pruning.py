"""What users feel of a layout: the share of files a narrow predicate on one key column must read. Pure.

A multi-column key sorted lexicographically prunes well on its first column only; on a curve every column
prunes about as well (issue 19). The predicates are points spread over the column's values: the curve's range
bounds (quantiles sampled from the data) when the key has them, else the midpoints of the files' ranges for
numbers, dates and timestamps, else (strings, binary) the files' minimums, which favour sorted columns. A file is
read when its min/max stats of the column contain the point, or when it has no usable stats for it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from recluster.core.blocks import Block
from recluster.core.keys import ClusterKey, KeyColumn, KeyType, comparable_bounds, comparable_values

BOUND_POINTS = 100
"""Points taken from a curve's bounds per column (every tenth of 1,000 ranges)."""

_NUMERIC = (KeyType.INTEGER, KeyType.FLOAT, KeyType.DECIMAL, KeyType.DATE, KeyType.TIMESTAMP, KeyType.BOOLEAN)


def _usable(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _points(lows: Sequence[Any], highs: Sequence[Any], column: KeyColumn, bounds: Sequence[Any] | None) -> list[Any]:
    if bounds:
        step = max(1, len(bounds) // BOUND_POINTS)
        return list(bounds[step // 2 :: step])
    if column.type in _NUMERIC:
        return [(low + high) / 2 for low, high in zip(lows, highs, strict=True)]
    return list(lows)


def _reads(lows: list[Any], highs: list[Any], points: list[Any], numeric: bool) -> float:
    """Files whose range contains each point, summed: numbers in float64 with numpy, others by bisection."""
    if numeric:
        low_array, high_array = np.sort(np.asarray(lows, np.float64)), np.sort(np.asarray(highs, np.float64))
        at = np.sort(np.asarray(points, np.float64))  # sorted queries search far faster
        inside = np.searchsorted(low_array, at, "right") - np.searchsorted(high_array, at, "left")
        return float(inside.sum())
    lows.sort()
    highs.sort()
    return float(sum(bisect.bisect_right(lows, p) - bisect.bisect_left(highs, p) for p in points))


def column_scan_fractions(blocks: Sequence[Block], key: ClusterKey) -> Mapping[str, float]:
    """Per key column, the average fraction of the files a point predicate on it reads after stats pruning."""
    count = len(blocks)
    if count == 0 or key.keyless:
        return {}
    curve_bounds = comparable_bounds(key.bounds, key.columns) if key.bounds is not None else None
    ranged = [b for b in blocks if b.min_values and b.max_values]
    result: dict[str, float] = {}
    for index, column in enumerate(key.columns):
        pairs = [(b.min_values[index], b.max_values[index]) for b in ranged]  # type: ignore[index]
        usable = [(low, high) for low, high in pairs if _usable(low) and _usable(high)]
        lows = comparable_values([low for low, _ in usable], column)
        highs = comparable_values([high for _, high in usable], column)
        try:
            points = _points(lows, highs, column, curve_bounds[index] if curve_bounds else None)
            reads = _reads(lows, highs, points, column.type in _NUMERIC)
        except (TypeError, ValueError):  # stats of mixed types (a column whose type changed): no figure
            continue
        unprunable = count - len(usable)
        result[column.name] = (reads / len(points) + unprunable) / count if points else 1.0
    return result
