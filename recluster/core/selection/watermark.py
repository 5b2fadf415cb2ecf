"""`absorb` on time-like keys (issue 20): a lateness watermark and a rent-or-buy trigger. Pure.

Most clustered tables are keyed by event time: appends arrive mostly in order with some late rows. Whole-file
absorbs rewrite the main run's files that straddle the recent key range again and again. Two levers:

- **Watermark.** The table's lag is the largest lateness the waiting appends show (the largest key of everything
  older than an append minus that append's smallest key); the watermark is the largest key minus the lag. An absorb
  cuts its outputs at the watermark, so rows below it land in files that end there: later appends (late by at most
  the lag) do not overlap them, and they are not written again. Only the open head above it is.
- **Rent or buy.** Instead of the ratio rule, each waiting append adds (average depth after it - 1) to an
  accumulator, recomputed from the snapshot alone (the depth after each waiting append, in commit order); the head
  (the waiting appends and the main run's files they overlap) is absorbed once the accumulator reaches
  RENT_SHARE x rows(head) / rows per append: depth is paid for until it has cost a share of the rewrite.

A table is time-like when its key is linear (not on a curve), the first key column's values subtract (numbers,
dates, timestamps), its appends move the largest key forward (MIN_ADVANCE) and the lag is under
TIME_LIKE_LAG_SHARE of the table's key span; random keys and late rows from anywhere in the past keep the ratio
rule. Every input is in the snapshot (file stats and ages), so a restart decides exactly the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from decimal import ROUND_FLOOR, Decimal
from typing import Any

import numpy as np
import numpy.typing as npt

from recluster.core.blocks import Block
from recluster.core.metrics import mean_block_depth
from recluster.core.selection.plan import Reason, WatermarkDecision

RENT_SHARE = 0.15
"""theta: absorb the head once the extra depth paid since the last absorb reaches this share of its rewrite
(measured in the model of tests/absorb_model.py: 0.1 holds 400 appends at depth 1.15 but rewrites 2.7x over 40;
0.15 with HEAD_FLOOR_FILES is the best compromise of the issue's two goals; README, Performance)."""

HEAD_FLOOR_FILES = 2.0
"""The rewrite is priced at no less than this many target files: a tiny table is not rewritten at every append."""

TIME_LIKE_LAG_SHARE = 0.75
"""A table whose lag spans at least this share of its key range is not time-like (random keys, unbounded
lateness): the watermark would leave nothing closed."""

MAX_COUNTED_APPENDS = 64
"""More appends than this waiting (a job that was stopped for a while): absorb the head without pricing it."""

MIN_ADVANCE = 0.05
"""A time-like table's appends move its largest key forward: on average by at least this share of their own key
range (random keys barely move it)."""

MIN_CLOSED_SHARE = 0.5
"""The watermark cut is made only when the rows it closes fill at least this share of a target file: the outputs
stay at least half the target size."""


def first_value(block: Block, high: bool) -> Any:
    values = block.max_values if high else block.min_values
    return values[0] if values else None


def position(value: Any) -> float | None:
    """A first-key value as a number on its axis (None: not subtractable, e.g. strings and booleans)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float | Decimal):
        number = float(value)
        return None if number != number else number
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, date):
        return float(value.toordinal())
    return None


Span = tuple[float, float]
FloatArray = npt.NDArray[np.float64]


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


def first_positions(blocks: Sequence[Block]) -> tuple[FloatArray, FloatArray] | None:
    """Each block's first-key minimum and maximum on its axis; None when a value is not a number."""
    found = []
    for values in ([first_value(b, False) for b in blocks], [first_value(b, True) for b in blocks]):
        if not set(map(type, values)) <= {int, float}:  # else: the plain numbers, at once
            values = [position(v) for v in values]
            if None in values:
                return None
        array = np.array(values, dtype=np.float64)
        if np.isnan(array).any():
            return None
        found.append(array)
    return found[0], found[1]


def value_at(position_value: float, like: Any) -> Any:
    """A number on the first key's axis back as a value of the column's type (rounded down)."""
    if isinstance(like, datetime):
        return datetime.fromtimestamp(position_value, tz=like.tzinfo)
    if isinstance(like, date):
        return date.fromordinal(int(position_value))
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


def decide_watermark(
    main: Sequence[Block], appends: Sequence[Sequence[Block]], overlapped: Sequence[Block], target_rows: int | None
) -> WatermarkDecision | None:
    """The time-like decision for a main run and the appends waiting after it (oldest first), or None when the
    table is not time-like. `overlapped`: the main run's files the appends overlap (rewritten with them)."""
    waiting = [b for files in appends for b in files]
    if not main or not waiting or any(b.curve_range is not None for b in (*main, *waiting)):
        return None  # a curve key orders by the curve value, not by its first column
    everything = [*main, *waiting]
    positions, head = first_positions(everything), first_positions(overlapped)
    if positions is None or head is None:
        return None
    lows, highs = positions
    starts = np.cumsum([0, len(main), *(len(files) for files in appends)])[:-1]
    run_lows, run_highs = np.minimum.reduceat(lows, starts).tolist(), np.maximum.reduceat(highs, starts).tolist()
    spans = list(zip(run_lows, run_highs, strict=True))
    low, high = float(lows.min()), float(highs.max())
    if high <= low:
        return None
    lag, advance = learned_lag(spans[0], spans[1:])
    if advance < MIN_ADVANCE or lag >= TIME_LIKE_LAG_SHARE * (high - low):
        return None
    like = first_value(everything[int(np.argmax(highs))], True)
    watermark = high - lag
    per_append = sum(b.rows for b in waiting) / len(appends)
    head_rows = sum(b.rows for b in waiting) + sum(b.rows for b in overlapped)
    threshold = RENT_SHARE * max(head_rows, HEAD_FLOOR_FILES * (target_rows or 0)) / max(per_append, 1.0)
    accumulator = accumulated_depth(main, appends, threshold)
    waiting_rows = np.array([b.rows for b in waiting], dtype=np.float64)
    head_file_rows = np.array([b.rows for b in overlapped], dtype=np.float64)
    closing = rows_below(lows[len(main) :], highs[len(main) :], waiting_rows, watermark)
    closing += rows_below(head[0], head[1], head_file_rows, watermark)
    cut = target_rows is not None and closing >= MIN_CLOSED_SHARE * target_rows
    reason = Reason.WATERMARK_ABSORB if accumulator >= threshold else Reason.WATERMARK_RENT
    lag_value = value_at(high, like) - value_at(watermark, like) if not isinstance(like, float) else lag
    return WatermarkDecision(lag_value, value_at(watermark, like), accumulator, threshold, reason, cut)


def accumulated_depth(main: Sequence[Block], appends: Sequence[Sequence[Block]], threshold: float) -> float:
    """Sum of (average depth - 1) after each waiting append, in commit order; it stops once past `threshold`
    (the decision is made), and counts a backlog of more than MAX_COUNTED_APPENDS as reaching it: after a long
    stop the head is absorbed without one depth profile per waiting append."""
    if len(appends) > MAX_COUNTED_APPENDS:
        return threshold
    total, files = 0.0, list(main)
    for members in appends:
        files.extend(members)
        total += mean_block_depth(files) - 1
        if total >= threshold:
            break
    return total
