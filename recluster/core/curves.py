"""Space-filling curves over range ids (docs/concepts.md#multi-column-keys-on-a-curve). Pure: numpy and Arrow compute,
no I/O.

Each key column is mapped to a rank by fixed quantile bounds sampled from the data (`RangeBounds`): NULL is
rank 0, a value gets 1 + the number of bounds at or below it, NaN the rank after the last; the ranks are then
spread evenly over the grid's side, so a column with few ranges (a low-cardinality column: three airports) takes
as much of the curve as one with a thousand instead of being folded into its first cells. The ranks of a row's
columns are one point of a grid of 2^RANK_BITS per side; the curve orders the points: HILBERT (Skilling's
transpose algorithm: consecutive values are grid neighbours), ZORDER (the ranks' bits interleaved), LINEAR (the
columns compared in order: no curve). Bounds stay fixed across incremental merges so curve values stay
comparable; their id is part of the key fingerprint, so new bounds make every file "not sorted by the current key".
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from recluster.core.errors import TableError

RANK_BITS = 10
"""Bits per column on the curve: ranks 0 (NULL) .. 1023."""

RANGES_PER_COLUMN = 1000
"""Quantile ranges each column is mapped to (as Delta liquid clustering and Databend's HILBERT do)."""

MAX_CURVE_COLUMNS = 4
"""Columns on one curve: 4 x RANK_BITS = 40 bits, an int64 with room to spare."""

RANK_LAYOUT = "spread"
"""How ranks sit on the grid (evenly spread over its side). Part of the key fingerprint: a change here changes every
curve value, so it must make the layout "not sorted by the current key" (a full recluster), never a silent mix."""

DRIFT_SHARE = 0.1
"""Bounds are sampled anew once more than this share of the live rows sits in files entirely outside a column's
bounds (data drifted past them: new timestamps, new ids)."""

UInt64Array = npt.NDArray[np.uint64]


class Curve(StrEnum):
    LINEAR = "linear"
    HILBERT = "hilbert"
    ZORDER = "zorder"


def default_curve(columns: int) -> Curve:
    """HILBERT for two to MAX_CURVE_COLUMNS columns, else LINEAR."""
    return Curve.HILBERT if 1 < columns <= MAX_CURVE_COLUMNS else Curve.LINEAR


def parse_curve(text: str) -> Curve:
    try:
        return Curve(text.strip().lower())
    except ValueError:
        known = ", ".join(c.value for c in Curve)
        raise TableError(f"unknown curve {text!r} (known: {known})") from None


def hilbert_index(ranks: UInt64Array, bits: int = RANK_BITS) -> UInt64Array:
    """Hilbert index of each row of `ranks` (n x d, every value < 2^bits): Skilling (2004), vectorized."""
    points = np.array(ranks, dtype=np.uint64, copy=True)
    if points.ndim != 2 or points.shape[1] == 0:
        raise ValueError("ranks must be an n x d array with d >= 1")
    dims = points.shape[1]
    top = np.uint64(1 << (bits - 1))
    q = top
    while q > 1:
        p = q - np.uint64(1)
        for i in range(dims):
            high = (points[:, i] & q) != 0
            if i == 0:
                points[:, 0] = np.where(high, points[:, 0] ^ p, points[:, 0])
                continue
            swap = (points[:, 0] ^ points[:, i]) & p
            points[:, 0] = np.where(high, points[:, 0] ^ p, points[:, 0] ^ swap)
            points[:, i] = np.where(high, points[:, i], points[:, i] ^ swap)
        q >>= np.uint64(1)
    for i in range(1, dims):
        points[:, i] ^= points[:, i - 1]
    flips = np.zeros(len(points), dtype=np.uint64)
    q = top
    while q > 1:
        flips = np.where((points[:, dims - 1] & q) != 0, flips ^ (q - np.uint64(1)), flips)
        q >>= np.uint64(1)
    points ^= flips[:, None]
    return interleave(points, bits)


def interleave(points: UInt64Array, bits: int = RANK_BITS) -> UInt64Array:
    """The bits of the columns interleaved, most significant first, column 0 leading (Z-order of the ranks)."""
    dims = points.shape[1]
    result = np.zeros(len(points), dtype=np.uint64)
    for bit in range(bits - 1, -1, -1):
        for i in range(dims):
            result = (result << np.uint64(1)) | ((points[:, i] >> np.uint64(bit)) & np.uint64(1))
    return result


def whole_curve(columns: int) -> tuple[int, int]:
    """The range of every curve value of a key of `columns` columns: what a file not sorted on the curve spans."""
    return 0, (1 << (RANK_BITS * columns)) - 1


def curve_values(curve: Curve, ranks: UInt64Array) -> UInt64Array:
    if curve is Curve.HILBERT:
        return hilbert_index(ranks)
    if curve is Curve.ZORDER:
        return interleave(np.asarray(ranks, dtype=np.uint64))
    raise ValueError("a LINEAR key has no curve values")


# ---- bounds ------------------------------------------------------------------------------------------------------


def quantile_bounds(ordered: Sequence[Any], ranges: int = RANGES_PER_COLUMN) -> list[Any]:
    """Up to ranges - 1 strictly increasing values at the quantiles of sorted, non-NULL, non-NaN values."""
    if not ordered or ranges < 2:
        return []
    picks = [ordered[(len(ordered) * i) // ranges] for i in range(1, ranges)]
    return [value for i, value in enumerate(picks) if i == 0 or value != picks[i - 1]]


def sample_quantile_bounds(sample: pa.ChunkedArray | pa.Array, ranges: int = RANGES_PER_COLUMN) -> list[Any]:
    """`quantile_bounds` of a sample of one column, its NULLs and NaNs left out (they have ranges of their own)."""
    values = sample.filter(pc.invert(pc.is_nan(sample))) if pa.types.is_floating(sample.type) else sample
    values = pc.drop_null(values)
    return quantile_bounds(values.take(pc.sort_indices(values)).to_pylist(), ranges)


@dataclass(frozen=True, slots=True)
class RangeBounds:
    """Per key column, the increasing values that cut it into ranges (as JSON values, see `bound_to_json`)."""

    columns: tuple[str, ...]
    bounds: tuple[tuple[Any, ...], ...]

    @property
    def id(self) -> str:
        """Content hash: the same bounds have the same id wherever they were computed."""
        return hashlib.sha1(self.to_json().encode("utf-8")).hexdigest()[:8]

    def to_json(self) -> str:
        return json.dumps({"columns": list(self.columns), "bounds": [list(b) for b in self.bounds]}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RangeBounds:
        data = json.loads(text)
        return cls(tuple(data["columns"]), tuple(tuple(b) for b in data["bounds"]))

    def __str__(self) -> str:
        sizes = ", ".join(f"{c}: {len(b) + 1}" for c, b in zip(self.columns, self.bounds, strict=True))
        return f"ranges {self.id} ({sizes})"


def column_ranks(values: npt.NDArray[Any], nulls: npt.NDArray[np.bool_], bounds: Sequence[Any]) -> UInt64Array:
    """Grid positions of one column's values (already `comparable`; NULL positions flagged in `nulls`): the rank
    (0 for NULL, 1 + the number of bounds <= the value, NaN after the last range) spread over the grid's side."""
    ranks = np.zeros(len(values), dtype=np.uint64)
    present = ~nulls
    if values.dtype.kind == "f":
        nan = present & np.isnan(np.where(present, values, 0.0))
        ranks[nan] = len(bounds) + 2
        present &= ~nan
    if values.dtype.kind in "iufU":
        sorted_bounds = np.asarray(bounds, dtype=values.dtype) if bounds else np.zeros(0, values.dtype)
        if values.dtype.kind == "U" and bounds:
            sorted_bounds = np.asarray(bounds, dtype=str)
        ranks[present] = 1 + np.searchsorted(sorted_bounds, values[present], side="right")
    else:
        ranks[present] = [1 + bisect.bisect_right(bounds, v) for v in values[present]]
    return spread_ranks(ranks, len(bounds))


def spread_ranks(ranks: UInt64Array, bounds: int) -> UInt64Array:
    """Ranks 0 .. bounds + 2 stretched over 0 .. 2^RANK_BITS - 1, order kept (strictly, as bounds + 2 < 2^RANK_BITS)."""
    return (ranks * np.uint64((1 << RANK_BITS) - 1)) // np.uint64(bounds + 2)


def curve_of(curve: Curve, ranks: Sequence[int]) -> int:
    return int(curve_values(curve, np.array([ranks], dtype=np.uint64))[0])
