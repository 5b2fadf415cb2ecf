"""Files a query reads on a layout: each file's min and max per column against the query's predicates, the way
Delta's data skipping reads them. Pure (pyarrow compute on values already read).

A layout is either a table's real files (their min/max stats from the log) or one simulated from a sample of its
rows: ordered by a candidate key and cut into as many files as the table would have at its target size
(docs/advise.md#how-files-read-are-estimated).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recluster.core.advice.filters import Predicate, PredicateShape

PREFIX_END = "\U0010ffff"
"""Above every string that starts with a prefix: `prefix + PREFIX_END` bounds a LIKE 'prefix%' range."""


@dataclass(frozen=True, slots=True)
class Layout:
    """Per column, each file's lowest and highest value (null: no usable stats, the file is read)."""

    files: int
    lows: Mapping[str, pa.Array]
    highs: Mapping[str, pa.Array]

    def column_type(self, column: str) -> pa.DataType | None:
        found = self.lows.get(column)
        return found.type if found is not None else None


def simulated_layout(ordered: pa.Table, files: int, columns: Sequence[str]) -> Layout:
    """`ordered` (a sample of rows in a candidate key's order) cut into `files` files of equal row counts: each
    file's min and max of `columns`. Fewer sample rows than files leaves the extra files out (they would be read
    by no query more than the ones made)."""
    files = max(1, min(files, ordered.num_rows))
    edges = [index * ordered.num_rows // files for index in range(files + 1)]
    lows: dict[str, pa.Array] = {}
    highs: dict[str, pa.Array] = {}
    for column in columns:
        values = ordered.column(column)
        low, high = [], []
        for start, stop in itertools.pairwise(edges):
            extremes = pc.min_max(values.slice(start, stop - start))
            low.append(extremes["min"])
            high.append(extremes["max"])
        lows[column] = pa.array([v.as_py() for v in low], values.type)
        highs[column] = pa.array([v.as_py() for v in high], values.type)
    return Layout(files, lows, highs)


def literal(text: str, arrow_type: pa.DataType) -> pa.Scalar | None:
    """A predicate's literal as a value of the column's type, or None when it does not convert."""
    try:
        if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
            return pa.scalar(text, arrow_type)
        if pa.types.is_boolean(arrow_type):
            return pa.scalar(text.strip().lower() == "true", arrow_type)
        if pa.types.is_timestamp(arrow_type) and arrow_type.tz is not None:  # Spark prints them without a zone
            naive = pa.scalar(text.strip()).cast(pa.timestamp(arrow_type.unit))
            return pa.scalar(naive.value, pa.timestamp(arrow_type.unit, "UTC")).cast(arrow_type)
        return pa.scalar(text.strip()).cast(arrow_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError):
        return None


def _may_hold(lows: pa.Array, highs: pa.Array, low: pa.Scalar | None, high: pa.Scalar | None) -> np.ndarray:
    """Per file: whether its [min, max] meets [low, high] (None: unbounded); files without stats may."""
    keep = pa.array(np.ones(len(lows), dtype=bool))
    if low is not None:
        keep = pc.and_kleene(keep, pc.greater_equal(highs, low))
    if high is not None:
        keep = pc.and_kleene(keep, pc.less_equal(lows, high))
    return np.asarray(pc.fill_null(keep, True).to_numpy(zero_copy_only=False), dtype=bool)


def _predicate_mask(layout: Layout, predicate: Predicate) -> np.ndarray | None:
    """Files the predicate may match, or None when the layout cannot judge it (no stats of the column, a literal
    of another type): such a predicate prunes nothing."""
    arrow_type = layout.column_type(predicate.column)
    if arrow_type is None:
        return None
    lows, highs = layout.lows[predicate.column], layout.highs[predicate.column]
    match predicate.shape:
        case PredicateShape.EQUALITY | PredicateShape.IN:
            values = [literal(v, arrow_type) for v in predicate.values]
            if not values or any(v is None for v in values):
                return None
            mask = np.zeros(layout.files, dtype=bool)
            for value in values:
                mask |= _may_hold(lows, highs, value, value)
            return mask
        case PredicateShape.PREFIX:
            if not pa.types.is_string(arrow_type):
                return None
            prefix = predicate.values[0]
            return _may_hold(lows, highs, pa.scalar(prefix, arrow_type), pa.scalar(prefix + PREFIX_END, arrow_type))
    low = literal(predicate.low, arrow_type) if predicate.low is not None else None
    high = literal(predicate.high, arrow_type) if predicate.high is not None else None
    if (predicate.low is not None and low is None) or (predicate.high is not None and high is None):
        return None
    return _may_hold(lows, highs, low, high)


def files_read(layout: Layout, predicates: Sequence[Predicate]) -> int:
    """Files a query with these predicates (ANDed) reads on the layout."""
    keep = np.ones(layout.files, dtype=bool)
    for predicate in predicates:
        mask = _predicate_mask(layout, predicate)
        if mask is not None:
            keep &= mask
    return int(keep.sum())


def files_for(rows: int, target_rows: int) -> int:
    """Files a table of `rows` has once clustered at `target_rows` a file."""
    return max(1, math.ceil(rows / max(target_rows, 1)))
