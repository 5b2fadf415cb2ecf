"""Per-file columns as `BlockTable` holds them, an Arrow array from the log or numpy/a list built from `Block`s, read
the same way whatever they are: one value, some files' numbers, totals, and first-key values as numbers on their axis.
Pure: numpy and Arrow arrays, no I/O.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recluster.core.key_encoding import arrow_numbers
from recluster.core.ranks import FloatArray, IntArray

Numbers: TypeAlias = IntArray | pa.Array | pa.ChunkedArray
"""Per-file integers (rows, bytes, modification times): numpy, or the log's Arrow column as it came."""
Column: TypeAlias = pa.Array | pa.ChunkedArray | Sequence[Any]
"""One key column's per-file values: an Arrow array (built from the log) or a list (built from `Block`s)."""

_DATE_ORDINAL_OF_EPOCH = dt.date(1970, 1, 1).toordinal()


def position(value: Any) -> float:
    """A first-key value as a number on its axis (NaN: not subtractable, e.g. strings, booleans, NULL). A
    timestamp without a zone counts as UTC, the same on every machine."""
    if isinstance(value, bool) or value is None:
        return float("nan")
    if isinstance(value, int | float | Decimal):
        return float(value)
    if isinstance(value, dt.datetime):
        return (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).timestamp()
    if isinstance(value, dt.date):
        return float(value.toordinal())
    return float("nan")


def column_positions(column: Column) -> FloatArray:
    """`position` of every value of a column at once where Arrow's type allows."""
    if not isinstance(column, pa.Array | pa.ChunkedArray):
        return np.array([position(v) for v in column], dtype=np.float64)
    kind = column.type
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        numbers = pc.cast(column, pa.float64(), safe=False)
    elif pa.types.is_date32(kind):
        numbers = pc.add(column.cast(pa.int32()).cast(pa.float64()), float(_DATE_ORDINAL_OF_EPOCH))
    elif pa.types.is_timestamp(kind):
        per_second = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}[kind.unit]
        numbers = pc.divide(column.cast(pa.int64()).cast(pa.float64()), per_second)
    else:
        return np.full(len(column), np.nan)
    if numbers.null_count:
        numbers = numbers.fill_null(np.nan)
    floats: FloatArray = np.asarray(numbers.to_numpy(zero_copy_only=False), dtype=np.float64)
    return floats


def number_at(numbers: Numbers, index: int) -> int:
    """One file's number."""
    return int(numbers[index].as_py() if isinstance(numbers, pa.Array | pa.ChunkedArray) else numbers[index])


def numbers_of(numbers: Numbers, indices: IntArray | None) -> IntArray:
    """The numbers of some files as int64 (an Arrow column is converted whole, a short-lived copy: numpy's gather
    is far faster than Arrow's `take` over many chunks)."""
    every = numbers if isinstance(numbers, np.ndarray) else arrow_numbers(numbers.cast(pa.int64()), 0)
    return every if indices is None else every[indices]


def total_of(numbers: Numbers, indices: IntArray | None) -> int:
    """The sum over some files (None: all, summed by Arrow without a conversion)."""
    if indices is None and not isinstance(numbers, np.ndarray):
        return int(pc.sum(numbers).as_py() or 0)
    return int(numbers_of(numbers, indices).sum())


def take_files(column: Column, indices: IntArray) -> Column:
    """The values of some files, in the order asked, as the same kind of column."""
    if isinstance(column, pa.Array | pa.ChunkedArray):
        return column.take(pa.array(indices))
    return [column[int(i)] for i in indices]


def value_at(column: Column, index: int) -> Any:
    """One file's value as a Python object."""
    if isinstance(column, pa.Array | pa.ChunkedArray):
        return column[index].as_py()
    return column[index]
