"""What users feel of a layout: the share of files a narrow predicate on one key column must read. Pure.

A multi-column key sorted lexicographically prunes well on its first column only; on a curve every column
prunes about as well (docs/concepts.md#multi-column-keys-on-a-curve). The predicates are points spread over the column's
values: the curve's range bounds (quantiles sampled from the data) when the key has them, else the midpoints of the
files' ranges for numbers, dates and timestamps, else (strings, binary) the files' minimums, which favour sorted
columns. A file is read when its min/max stats of the column contain the point, or when it has no usable stats for it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from recluster.core.block_table import as_table
from recluster.core.blocks import Block
from recluster.core.file_columns import Column
from recluster.core.key_bounds import comparable_bounds, comparable_values
from recluster.core.keys import ClusterKey, KeyColumn, KeyType

BOUND_POINTS = 100
"""Points taken from a curve's bounds per column (every tenth of 1,000 ranges)."""

Values = Sequence[Any] | npt.NDArray[np.float64]

_AS_FLOATS = (KeyType.INTEGER, KeyType.FLOAT)
_NUMERIC = (KeyType.INTEGER, KeyType.FLOAT, KeyType.DECIMAL, KeyType.DATE, KeyType.TIMESTAMP, KeyType.BOOLEAN)


def _usable(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _points(lows: Values, highs: Values, column: KeyColumn, bounds: Sequence[Any] | None) -> Values:
    if bounds:
        step = max(1, len(bounds) // BOUND_POINTS)
        return list(bounds[step // 2 :: step])
    if column.type in _NUMERIC:
        midpoints: npt.NDArray[np.float64] = (np.asarray(lows, np.float64) + np.asarray(highs, np.float64)) / 2
        return midpoints
    return list(lows)


def _sorted(values: Values) -> npt.NDArray[np.float64]:
    """Numbers sorted, in place when they are a float64 array of our own (a million files: no second copy); the
    callers below need no order kept."""
    array = np.asarray(values, np.float64)
    if array is values and array.flags.writeable:
        array.sort()
        return array
    return np.sort(array)


def _reads(lows: Values, highs: Values, points: Values, numeric: bool) -> float:
    """Files whose range contains each point, summed: numbers in float64 with numpy (arrays may be sorted in
    place), others by bisection."""
    if numeric:
        at = _sorted(points)  # sorted queries search far faster
        started = int(np.searchsorted(_sorted(lows), at, "right").sum())
        return float(started - int(np.searchsorted(_sorted(highs), at, "left").sum()))
    low_list, high_list = sorted(lows), sorted(highs)
    return float(sum(bisect.bisect_right(low_list, p) - bisect.bisect_left(high_list, p) for p in points))


def _usable_ranges(lows: Column, highs: Column, column: KeyColumn) -> tuple[Values, Values]:
    """The (comparable) ranges with a usable minimum and maximum: integers and floats as float64 arrays at once
    (None and NaN both become NaN), other types value by value."""
    if column.type in _AS_FLOATS:
        low_array, high_array = _floats(lows), _floats(highs)
        usable = ~(np.isnan(low_array) | np.isnan(high_array))
        return (low_array, high_array) if usable.all() else (low_array[usable], high_array[usable])
    low_list, high_list = _python(lows), _python(highs)
    pairs = [(low, high) for low, high in zip(low_list, high_list, strict=True) if _usable(low) and _usable(high)]
    return comparable_values([p[0] for p in pairs], column), comparable_values([p[1] for p in pairs], column)


def _floats(values: Column) -> npt.NDArray[np.float64]:
    if isinstance(values, pa.Array | pa.ChunkedArray):
        floats: npt.NDArray[np.float64] = (
            pc.cast(values, pa.float64(), safe=False).fill_null(np.nan).to_numpy(zero_copy_only=False)
        )
        return floats
    return np.array(values, dtype=np.float64)


def _python(values: Column) -> list[Any]:
    return values.to_pylist() if isinstance(values, pa.Array | pa.ChunkedArray) else list(values)


def column_scan_fractions(blocks: Sequence[Block], key: ClusterKey) -> Mapping[str, float]:
    """Per key column, the average fraction of the files a point predicate on it reads after stats pruning."""
    table = as_table(blocks)
    count = len(table)
    if count == 0 or key.keyless:
        return {}
    curve_bounds = comparable_bounds(key.bounds, key.columns) if key.bounds is not None else None
    ranged = pa.array(table.ranged) if not table.ranged.all() else None
    result: dict[str, float] = {}
    for index, column in enumerate(key.columns):
        try:
            column_lows, column_highs = (_ranged(table.column_values(index, high), ranged) for high in (False, True))
            lows, highs = _usable_ranges(column_lows, column_highs, column)
            points = _points(lows, highs, column, curve_bounds[index] if curve_bounds else None)
            reads = _reads(lows, highs, points, column.type in _NUMERIC)
        except (TypeError, ValueError, pa.ArrowInvalid):  # stats of mixed types (a column whose type changed)
            continue
        result[column.name] = (reads / len(points) + count - len(lows)) / count if len(points) else 1.0
    return result


def _ranged(values: Column, ranged: pa.Array | None) -> Column:
    """The values of the files with min/max tuples."""
    if ranged is None:
        return values
    if isinstance(values, pa.Array | pa.ChunkedArray):
        return values.filter(ranged)
    return [v for v, keep in zip(values, ranged.to_pylist(), strict=True) if keep]
