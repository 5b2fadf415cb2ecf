"""The shape of a table's appends, learned from its commits (docs/commands.md#recluster-estimate), and synthetic appends
of that shape.

What `estimate` learns from the log: how many rows and bytes each data commit added and when, and how each append's
range of the first key column relates to the table's before it. Appends that move the table's largest key forward
make a *time-like* table: most rows are new, a share of them late by up to a lag (in appends), or by any amount
when the lateness reaches back over most of the table. Appends that do not move it make a *random* table: each
append spans the key domain. The late share is not in the stats (one file's min says a row is late, not how many
are): it is measured on the key column of a few sampled appended files (`LateSample`), else assumed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from recluster.core.curves import RANK_BITS, hilbert_index

ASSUMED_LATE_SHARE = 0.05
"""Late share of a time-like table whose sampled appended files are gone (vacuumed): the workloads' usual share."""
TIME_LIKE_ADVANCE = 0.5
"""A table is time-like when its appends moved the largest key over at least this share of the key span."""
UNBOUNDED_LATENESS = 0.75
"""Lateness reaching back over this share of the table (in the newer half of the appends) counts as unbounded."""
KEY_WIDTH = 1 << 20
"""Key width of one synthetic time-like append's own range."""
RANDOM_DOMAIN = 1 << 40
CURVE_COLUMNS = 2
"""Keys of this many columns are modelled on the curve, with their columns' ranges per file (more columns: the
curve's order alone, files read for the first column only)."""


class KeyShape(StrEnum):
    """How appends' key ranges relate to the table's."""

    TIME_LIKE = "time_like"
    RANDOM = "random"


@dataclass(frozen=True, slots=True)
class AppendStats:
    """One data commit as the log shows it: its rows, bytes and files, and the range of the first key column over
    the files it added (numbers; None when the column's stats are missing or not numbers)."""

    version: int
    timestamp_ms: int | None
    rows: int
    bytes: int
    files: int
    low: float | None
    high: float | None


@dataclass(frozen=True, slots=True)
class LateSample:
    """One sampled appended file's first key column against the table's largest key before its commit."""

    rows: int
    late_rows: int


@dataclass(frozen=True, slots=True)
class HistoryShape:
    """What the projection needs to know of a table's appends."""

    appends: int
    rows: int
    bytes: int
    seconds: float
    """From the first to the last data commit learned from."""
    kind: KeyShape
    late_share: float
    lag_appends: float | None
    """Time-like: how many appends back late rows reach; None: by any amount."""
    late_share_measured: bool
    key_columns: int = 1
    """A random table's key of two columns is modelled on its Hilbert curve (`synthetic_append`)."""

    @property
    def rows_per_append(self) -> float:
        return self.rows / self.appends

    @property
    def bytes_per_row(self) -> float:
        return self.bytes / max(self.rows, 1)

    @property
    def appends_per_day(self) -> float:
        """Data commits per day at the history's pace (one per second when all came in the same second)."""
        return 86_400.0 * max(self.appends - 1, 1) / max(self.seconds, 1.0)

    def describe(self) -> str:
        if self.kind is KeyShape.RANDOM:
            return "random: every append spans the key domain"
        lag = "any amount" if self.lag_appends is None else f"up to {self.lag_appends:.1f} appends"
        measured = "measured" if self.late_share_measured else "assumed"
        return f"time-like: {self.late_share:.1%} of the rows late ({measured}) by {lag}"


def _floats(values: Sequence[float | None]) -> npt.NDArray[np.float64]:
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def learn_shape(appends: Sequence[AppendStats], samples: Sequence[LateSample], key_columns: int = 1) -> HistoryShape:
    """The shape of these data commits (oldest first, at least one) of a table keyed by `key_columns` columns."""
    rows = sum(a.rows for a in appends)
    stamps = [a.timestamp_ms for a in appends if a.timestamp_ms is not None]
    seconds = (max(stamps) - min(stamps)) / 1000.0 if stamps else 0.0
    lows, highs = _floats([a.low for a in appends]), _floats([a.high for a in appends])
    kind, lag = KeyShape.RANDOM, None
    if len(appends) >= 3 and not (np.isnan(lows).any() or np.isnan(highs).any()):
        kind, lag = _time_like(lows, highs)
    sampled = sum(s.rows for s in samples)
    measured = kind is KeyShape.RANDOM or sampled > 0
    share = sum(s.late_rows for s in samples) / sampled if sampled else ASSUMED_LATE_SHARE
    return HistoryShape(
        appends=len(appends),
        rows=rows,
        bytes=sum(a.bytes for a in appends),
        seconds=seconds,
        kind=kind,
        late_share=share if kind is KeyShape.TIME_LIKE else 0.0,
        lag_appends=lag,
        late_share_measured=measured,
        key_columns=key_columns if kind is KeyShape.RANDOM else 1,
    )


def _time_like(lows: npt.NDArray[np.float64], highs: npt.NDArray[np.float64]) -> tuple[KeyShape, float | None]:
    """(shape, lag in appends) from the appends' key ranges."""
    span = float(highs.max() - lows.min())
    before = np.maximum.accumulate(highs)[:-1]  # the largest key before append i + 1
    if span <= 0 or float(highs.max() - highs[0]) < TIME_LIKE_ADVANCE * span:
        return KeyShape.RANDOM, None
    advance = np.maximum(highs[1:] - before, 0.0)
    width = float(np.median(advance[advance > 0])) if (advance > 0).any() else span / len(highs)
    lateness = np.maximum(before - lows[1:], 0.0)
    table_span = before - np.minimum.accumulate(lows)[:-1]
    newer = slice(len(lateness) // 2, None)
    reach = lateness[newer] / np.maximum(table_span[newer], 1e-300)
    if float(np.median(reach)) >= UNBOUNDED_LATENESS:
        return KeyShape.TIME_LIKE, None
    return KeyShape.TIME_LIKE, float(lateness[newer].max()) / max(width, 1e-300)


def synthetic_append(shape: HistoryShape, index: int, rows: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """The keys of append `index` of a table of this shape (int64; only their order matters)."""
    if shape.kind is KeyShape.RANDOM and shape.key_columns == CURVE_COLUMNS:
        ranks = rng.integers(0, 1 << RANK_BITS, size=(rows, CURVE_COLUMNS), dtype=np.uint64)
        return hilbert_index(ranks).astype(np.int64)
    if shape.kind is KeyShape.RANDOM:
        return rng.integers(0, RANDOM_DOMAIN, size=rows, dtype=np.int64)
    start = index * KEY_WIDTH
    keys = rng.integers(start, start + KEY_WIDTH, size=rows, dtype=np.int64)
    late = rng.random(rows) < shape.late_share
    if index and late.any():
        reach = index if shape.lag_appends is None else min(float(index), shape.lag_appends)
        earliest = start - max(int(reach * KEY_WIDTH), 1)
        keys[late] = rng.integers(earliest, start, size=int(late.sum()), dtype=np.int64)
    return keys
