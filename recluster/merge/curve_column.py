"""The curve value of every row, as an extra int64 column the merge kernel sorts, partitions and cuts on.

Each key column's Arrow values are brought to the form the range bounds compare (`key_bounds.comparable`: days,
microseconds, floats for decimals, strings), ranked by the bounds (`curves.column_ranks`) and the ranks mapped
to the curve (`curves.curve_values`). The column never reaches a data file: the kernel drops it before writing
and records each file's lowest and highest value in its name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from recluster.core.curves import Curve, column_ranks, curve_values
from recluster.core.key_bounds import comparable_bounds
from recluster.core.keys import ClusterKey, KeyColumn, KeyType

CURVE_FIELD = pa.field("__recluster_curve", pa.int64(), nullable=False)


@dataclass(frozen=True, slots=True)
class CurveSpec:
    """What a writer needs to compute curve values (picklable): the curve, the key columns, their bounds."""

    curve: Curve
    columns: tuple[KeyColumn, ...]
    bounds: tuple[tuple[Any, ...], ...]
    """Per column, its bounds in `key_bounds.comparable` form."""

    @classmethod
    def of(cls, key: ClusterKey) -> CurveSpec | None:
        """The spec of a curve key with bounds; None for a linear key (an unbounded curve key cannot be written)."""
        if not key.on_curve:
            return None
        if key.bounds is None:
            raise ValueError(f"curve key ({key}) has no range bounds yet: sample them before merging")
        return cls(key.curve, key.columns, tuple(tuple(b) for b in comparable_bounds(key.bounds, key.columns)))


def _comparable_numpy(column: pa.ChunkedArray | pa.Array, key_column: KeyColumn) -> npt.NDArray[Any]:
    """A column's values as numpy in `key_bounds.comparable` form, NULLs filled (their ranks come from the null
    mask)."""
    values: npt.NDArray[Any]
    match key_column.type:
        case KeyType.INTEGER | KeyType.BOOLEAN:
            values = pc.fill_null(column.cast(pa.int64()), 0).to_numpy()
            return values
        case KeyType.FLOAT | KeyType.DECIMAL:
            values = pc.fill_null(column.cast(pa.float64()), 0.0).to_numpy()
            return values
        case KeyType.DATE:
            values = pc.fill_null(column.cast(pa.date32()).cast(pa.int32()), 0).to_numpy().astype(np.int64)
            return values
        case KeyType.TIMESTAMP:
            micros = column.cast(pa.timestamp("us", column.type.tz)).cast(pa.int64())
            values = pc.fill_null(micros, 0).to_numpy()
            return values
        case KeyType.STRING:
            return np.asarray(pc.fill_null(column.cast(pa.string()), "").to_numpy(zero_copy_only=False), dtype=str)
    return np.asarray(column.to_pylist(), dtype=object)  # binary: bytes compared in Python


def curve_column(table: pa.Table, spec: CurveSpec) -> pa.Array:
    """The curve value of each row of `table` (which holds the key columns)."""
    ranks: list[npt.NDArray[np.uint64]] = []
    for key_column, bounds in zip(spec.columns, spec.bounds, strict=True):
        column = table.column(key_column.name)
        nulls = column.is_null().to_numpy(zero_copy_only=False)
        values = _comparable_numpy(column, key_column)
        ranks.append(column_ranks(values, nulls, list(bounds)))
    points = np.stack(ranks, axis=1) if ranks else np.zeros((table.num_rows, 0), dtype=np.uint64)
    return pa.array(curve_values(spec.curve, points).astype(np.int64), pa.int64())


def with_curve_column(table: pa.Table, spec: CurveSpec | None) -> pa.Table:
    """`table` with the curve column appended (unchanged without a curve or when it already has it)."""
    if spec is None or CURVE_FIELD.name in table.column_names:
        return table
    return table.append_column(CURVE_FIELD, curve_column(table, spec))


def sort_columns(key: Sequence[str], spec: CurveSpec | None) -> tuple[str, ...]:
    """What rows are sorted by: the curve value, then the key columns (a stable order inside one curve cell)."""
    return tuple(key) if spec is None else (CURVE_FIELD.name, *key)
