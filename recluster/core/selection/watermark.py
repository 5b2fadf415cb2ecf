"""`absorb` on time-like keys (docs/concepts.md#time-like-keys-the-lateness-watermark): a lateness watermark and a
rent-or-buy trigger. Pure.

Most clustered tables are keyed by event time: appends arrive mostly in order with some late rows. Whole-file
absorbs rewrite the main run's files that straddle the recent key range again and again. Two levers:

- **Watermark.** The table's lag is the largest lateness the waiting appends show (the largest key of everything
  older than an append minus that append's smallest key); the watermark is the largest key minus the lag and a
  margin (LAG_MARGIN). An absorb cuts its outputs at the watermark, so rows below it land in files that end there:
  later appends (late by at most the lag) do not overlap them, and they are not written again. Only the open head
  above it is.
- **Rent or buy.** Instead of the ratio rule, each waiting append adds (average depth after it - 1) to an
  accumulator, recomputed from the snapshot alone (the depth after each waiting append, in commit order); the head
  (the waiting appends and the main run's files they overlap) is absorbed once the accumulator reaches
  RENT_SHARE x rows(head) / rows per append x sqrt(files(head) / files): depth is paid for until it has cost a
  share of the rewrite (DILUTION says why the square root).

A table is time-like when its key is linear (not on a curve), the first key column's values subtract (numbers,
dates, timestamps), its appends move the largest key forward (MIN_ADVANCE) and the lag is under
TIME_LIKE_LAG_SHARE of the table's key span; random keys and late rows from anywhere in the past keep the ratio
rule. Every input is in the snapshot (file stats and ages), so a restart decides exactly the same.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import ROUND_FLOOR, Decimal
from typing import Any

import numpy as np

from recluster.core.metrics import table_mean_depth
from recluster.core.ranks import FloatArray, IntArray
from recluster.core.selection.plan import Reason, WatermarkDecision
from recluster.core.selection.runs import Runs

RENT_SHARE = 0.22
"""theta: absorb the head once the extra depth paid since the last absorb reaches this share of its rewrite
(a sweep in the model of tests/absorb_model.py, with DILUTION 0.5: 0.2 spends WA 2.0 over 400 appends, 0.25
leaves depth 1.15 there; 0.22 meets both of the issue's bounded-lateness goals; docs/performance.md)."""

HEAD_FLOOR_FILES = 2.0
"""The rewrite is priced at no less than this many target files: a tiny table is not rewritten at every append."""

TIME_LIKE_LAG_SHARE = 0.75
"""A table whose lag spans at least this share of its key range is not time-like (random keys, unbounded
lateness): the watermark would leave nothing closed."""

DILUTION = 0.5
"""The price of the rewrite is scaled by (files(head) / files) ** DILUTION. The accumulator counts the mean depth
over all files, in which the head's extra depth is diluted by the table's size; a query of recent rows pays it
undiluted. Counting the mean alone (0) lets a big table's head grow deep (every 10 appends over 400: depth 1.21);
counting the head alone (1) rewrites a small table at every other append. The square root weighs both views
equally (measured in the model: 1.34 at WA 2.26 over 40 appends, 1.14 at 1.95 over 400)."""

MAX_COUNTED_APPENDS = 64
"""More appends than this waiting (a job that was stopped for a while): absorb the head without pricing it."""

MIN_ADVANCE = 0.05
"""A time-like table's appends move its largest key forward: on average by at least this share of their own key
range (random keys barely move it)."""

LAG_MARGIN = 1 / 64
"""The watermark trails the largest key by the learned lag and this share of it more. The learned lag falls
short of the true bound by about the gap between late rows, and a late row landing below the watermark makes the
closed file it meets be rewritten whole (in the model, 40 appends, the trigger before DILUTION: WA 2.44 without
a margin, 2.35 with 1/32)."""

MIN_CLOSED_SHARE = 0.5
"""The watermark cut is made only when the rows it closes fill at least this share of a target file: the outputs
stay at least half the target size."""


Span = tuple[float, float]


def learned_lag(older: Span, appends: Sequence[Span]) -> tuple[float, float]:
    """(lag, advance) the waiting appends (their first-key spans, oldest first) show after the `older` span: the
    largest lateness (largest key of everything older minus the append's smallest key), and the mean share of its
    own range by which an append moved the largest key forward."""
    top = older[1]
    lag, advances = 0.0, []
    for low, high in appends:
        lag = max(lag, top - low)
        advances.append(max(high - top, 0.0) / (high - low) if high > low else 0.0)
        top = max(top, high)
    return lag, float(np.mean(advances))


def value_at(position_value: float, like: Any) -> Any:
    """A number on the first key's axis back as a value of the column's type (rounded down)."""
    if isinstance(like, dt.datetime):
        moment = dt.datetime.fromtimestamp(position_value, tz=like.tzinfo or dt.UTC)
        return moment if like.tzinfo else moment.replace(tzinfo=None)  # no zone: UTC, as `position` reads it
    if isinstance(like, dt.date):
        return dt.date.fromordinal(int(position_value))
    if isinstance(like, int):
        return int(np.floor(position_value))
    if isinstance(like, Decimal):
        return Decimal(repr(position_value)).quantize(like, rounding=ROUND_FLOOR)
    return position_value


def rows_below(lows: FloatArray, highs: FloatArray, rows: FloatArray, cut: float) -> float:
    """Rows under `cut`, each file's rows spread evenly over its first-key range (an estimate from the stats)."""
    width = highs - lows
    spread = np.clip((cut - lows) / np.where(width > 0, width, 1.0), 0.0, 1.0)
    return float((rows * np.where(width > 0, spread, lows < cut)).sum())


def first_key_positions(runs: Runs) -> tuple[FloatArray, FloatArray] | None:
    """The first key column's minimum and maximum of every file of `runs` (in `runs.files` order) as numbers on its
    axis, or None when the time-like decisions cannot read them: a curve key (it orders by the curve value, not by
    its first column), or a file without such a number. Computed once per decision, shared by `decide_watermark`
    and `late_run.decide_late_run`."""
    table = runs.table
    if table.curve_ranges and any(int(i) in table.curve_ranges for i in runs.files):
        return None
    lows, highs = table.first_positions(runs.files)
    if np.isnan(lows).any() or np.isnan(highs).any():
        return None
    return lows, highs


def run_spans(lows: FloatArray, highs: FloatArray, starts: IntArray) -> list[Span]:
    """The first-key span of each run beginning at `starts` (the positions in `runs.files`), the last entry the end."""
    run_lows = np.minimum.reduceat(lows, starts[:-1]).tolist()
    run_highs = np.maximum.reduceat(highs, starts[:-1]).tolist()
    return list(zip(run_lows, run_highs, strict=True))


def lag_value(top: float, lag: float, like: Any) -> Any:
    """A lag on the first key's axis as a difference of values of the column's type (`like`: one of them)."""
    return value_at(top, like) - value_at(top - lag, like) if not isinstance(like, float) else lag


def decide_watermark(
    runs: Runs, overlapped: IntArray, target_rows: int | None, positions: tuple[FloatArray, FloatArray]
) -> WatermarkDecision | None:
    """The time-like decision for the oldest run and the appends waiting after it, or None when the table is not
    time-like. `overlapped`: the oldest run's files the appends overlap (rewritten with them); `positions`: the
    files' `first_key_positions`."""
    table, everything = runs.table, runs.files
    main = runs.members(0)
    waiting = everything[len(main) :]
    if not len(main) or not len(waiting):
        return None
    lows, highs = positions
    spans = run_spans(lows, highs, runs.bounds)
    low, high = float(lows.min()), float(highs.max())
    if high <= low:
        return None
    lag, advance = learned_lag(spans[0], spans[1:])
    if advance < MIN_ADVANCE or lag >= TIME_LIKE_LAG_SHARE * (high - low):
        return None
    like = table.first_value(int(everything[int(np.argmax(highs))]), True)
    watermark = high - lag * (1 + LAG_MARGIN)
    waiting_rows = table.rows_of(waiting).astype(np.float64)
    head_file_rows = table.rows_of(overlapped).astype(np.float64)
    per_append = float(waiting_rows.sum()) / (len(runs) - 1)
    head_rows = float(waiting_rows.sum() + head_file_rows.sum())
    threshold = RENT_SHARE * max(head_rows, HEAD_FLOOR_FILES * (target_rows or 0)) / max(per_append, 1.0)
    threshold *= ((len(overlapped) + len(waiting)) / len(everything)) ** DILUTION
    closing = rows_below(lows[len(main) :], highs[len(main) :], waiting_rows, watermark)
    closing += rows_below(*table.first_positions(overlapped), head_file_rows, watermark)
    cut = target_rows is not None and closing >= MIN_CLOSED_SHARE * target_rows
    accumulator = accumulated_depth(runs, threshold)
    reason = Reason.WATERMARK_ABSORB if accumulator >= threshold else Reason.WATERMARK_RENT
    return WatermarkDecision(lag_value(high, lag, like), value_at(watermark, like), accumulator, threshold, reason, cut)


def accumulated_depth(runs: Runs, threshold: float) -> float:
    """Sum of (average depth - 1) after each waiting append, in commit order; it stops once past `threshold`
    (the decision is made), and counts a backlog of more than MAX_COUNTED_APPENDS as reaching it: after a long
    stop the head is absorbed without one depth profile per waiting append."""
    if len(runs) - 1 > MAX_COUNTED_APPENDS:
        return threshold
    total = 0.0
    for end in runs.bounds[2:].tolist():
        total += table_mean_depth(runs.table, runs.files[:end]) - 1
        if total >= threshold:
            break
    return total
