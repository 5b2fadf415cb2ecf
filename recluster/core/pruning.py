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

from recluster.core.blocks import Block
from recluster.core.keys import ClusterKey, KeyColumn, KeyType, comparable, comparable_bounds

BOUND_POINTS = 100
"""Points taken from a curve's bounds per column (every tenth of 1,000 ranges)."""

_NUMERIC = (KeyType.INTEGER, KeyType.FLOAT, KeyType.DECIMAL, KeyType.DATE, KeyType.TIMESTAMP, KeyType.BOOLEAN)


def _usable(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _points(ranges: Sequence[tuple[Any, Any]], column: KeyColumn, bounds: Sequence[Any] | None) -> list[Any]:
    if bounds:
        step = max(1, len(bounds) // BOUND_POINTS)
        return list(bounds[step // 2 :: step])
    if column.type in _NUMERIC:
        return [(low + high) / 2 for low, high in ranges]
    return [low for low, _ in ranges]


def column_scan_fractions(blocks: Sequence[Block], key: ClusterKey) -> Mapping[str, float]:
    """Per key column, the average fraction of the files a point predicate on it reads after stats pruning."""
    count = len(blocks)
    if count == 0 or key.keyless:
        return {}
    curve_bounds = comparable_bounds(key.bounds, key.columns) if key.bounds is not None else None
    result: dict[str, float] = {}
    for index, column in enumerate(key.columns):
        ranges: list[tuple[Any, Any]] = []
        for block in blocks:
            low, high = block.column_range(index)
            if _usable(low) and _usable(high):
                ranges.append((comparable(low, column), comparable(high, column)))
        unprunable = count - len(ranges)
        try:
            points = _points(ranges, column, curve_bounds[index] if curve_bounds else None)
            lows: list[Any] = sorted(low for low, _ in ranges)
            highs: list[Any] = sorted(high for _, high in ranges)
            reads = [bisect.bisect_right(lows, p) - bisect.bisect_left(highs, p) + unprunable for p in points]
        except TypeError:  # stats of mixed types (a column whose type changed): no figure
            continue
        result[column.name] = sum(reads) / len(reads) / count if reads else 1.0
    return result
