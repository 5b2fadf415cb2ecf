"""`absorb` on tables whose appends move the largest key forward but carry late rows from anywhere in the past
(docs/concepts.md#late-rows-from-anywhere-the-late-run): a main run and a late run. Pure.

Every such append spans the whole table, so each waiting append adds about one to the depth of every file, and
no watermark closes anything. Instead of absorbing the appends into the main run (a rewrite of the whole table),
an absorb takes the waiting appends, the late run and the main run's under-filled last files: the rows above the
main run's untouched top extend the main run (`UpperRun`), the rows below (the late ones) form the late run, one
sorted run beside it. Two rent-or-buy decisions, both from the snapshot alone (a restart decides the same):

- **Absorb the appends** once m waiting appends have cost m(m+1)/2 append-depths (each adds about one) and that
  reaches APPEND_RENT_SHARE x rows(rewrite) / rows per append x sqrt(files taken / files) (as `watermark` prices).
- **Merge the late run into the main run** (a rewrite of everything) once the late run's rent since it began
  reaches that rewrite: it adds about one to every file's depth (priced at an append's rows per append) and is
  rewritten at every absorb (half its rows, on average).

A table qualifies when its key is linear, the first key column subtracts, the main run was written by `absorb`,
the table holds MIN_TABLE_APPENDS appends' rows and the waiting appends move the largest key forward by at least
FRESH_SHARE of what their rows would span at the table's density (random keys move it by about 1/rows of that).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from recluster.core.block_table import NO_HORIZON
from recluster.core.blocks import age_run_id
from recluster.core.ranks import FloatArray, IntArray
from recluster.core.selection.plan import Reason, UpperRun, WatermarkDecision
from recluster.core.selection.runs import Runs
from recluster.core.selection.watermark import DILUTION, lag_value, learned_lag, run_spans

APPEND_RENT_SHARE = 0.6
"""Waiting appends are absorbed once their depth cost reaches this share of the absorb's rewrite (in appends),
scaled by (files taken / files) ** DILUTION as the watermark's price is (in the model, 0.5 and 0.6 decide alike
on the bench's workloads; 0.7 waits longer: depth 1.91 instead of 1.81 over 40 appends)."""

REWRITE_RENT = 1.0
"""The late run merges into the main run once its rent reaches this many rewrites of everything (1: rent or buy's
break-even; in the model 1.5 leaves files of 0.42 of the target over 40 appends, 0.75 spends WA 3.1 there)."""

HEAD_FILL = 0.3
"""The main run's last files under this share of the target size are rewritten with the appends (they fill up;
0.4 rewrites the in-order rows more often: over 400 appends WA 6.0 instead of 5.5 at the same depth)."""

MIN_TABLE_APPENDS = 8
"""A table holding fewer appends' rows keeps the ratio rule: while young, a bounded lateness spans most of it too,
and the watermark takes it once it is a few lags wide (a late run begun there costs it: 5% late by <= 4 appends,
40 appends: depth 1.48 instead of 1.34)."""

FRESH_SHARE = 0.5
"""Appends must move the largest key by at least this share of (key span x their rows / the table's rows)."""


@dataclass(frozen=True, slots=True, eq=False)
class LateRunChoice:
    """What the late-run decision chose: the run absorbing (`target`: 0 the main run, 1 the late run or the
    oldest waiting append), the files taken, where the main run's rows begin, and the decision as reported."""

    target: int
    taken: IntArray
    upper_run: UpperRun | None
    decision: WatermarkDecision


def decide_late_run(
    runs: Runs, target_rows: int | None, positions: tuple[FloatArray, FloatArray]
) -> LateRunChoice | WatermarkDecision | None:
    """The late-run decision for a table with late rows from anywhere (None: the table does not qualify, or no
    append waits; a decision alone: the appends wait). `positions`: the files' `watermark.first_key_positions`."""
    table, files, bounds = runs.table, runs.files, runs.bounds
    if len(runs) < 2 or runs.horizons[0] == NO_HORIZON:
        return None
    lows, highs = positions
    first_waiting = 2 if runs.horizons[1] != NO_HORIZON else 1  # run 1 written by absorb: the late run
    if first_waiting == len(runs):
        return None  # no appends wait: nothing shows the table's shape
    older = int(bounds[first_waiting])
    rows = table.rows_of(files).astype(np.float64)
    count = len(runs) - first_waiting
    per_append = float(rows[older:].sum()) / count
    if float(rows[:older].sum()) < MIN_TABLE_APPENDS * per_append:
        return None
    top = float(highs[:older].max())
    if not fresh(top, lows, highs, rows, bounds[first_waiting:]):
        return None
    lag, _ = learned_lag((float(lows[:older].min()), top), run_spans(lows, highs, bounds[first_waiting:]))
    lag_in_key = lag_value(top, lag, table.first_value(int(files[int(np.argmax(highs))]), True))
    main = runs.members(0)
    main_rows = table.rows_of(main)
    head = head_files(main_rows, target_rows)
    above = table.first_value(int(main[-head - 1]), True) if head < len(main) else None
    late_rows = float(rows[int(bounds[1]) : older].sum())
    # the late run's rent since it began: a depth of one on every file (an append's rows, per append) and its
    # rewrites (half its rows per absorb, on average); once that reaches a rewrite of everything, buy
    since = float(rows[int(bounds[1]) :].sum()) + float(main_rows[table.modified_of(main) >= runs.ages[1]].sum())
    paid, everything = since / max(per_append, 1.0) * (per_append + late_rows / 2), float(rows.sum())
    if paid >= REWRITE_RENT * everything:
        decision = WatermarkDecision(lag_in_key, above, paid, everything, Reason.LATE_RUN_REWRITE, False)
        return LateRunChoice(0, files, None, decision)
    taken = np.concatenate([main[len(main) - head :], files[int(bounds[1]) :]])
    cost = float(table.rows_of(taken).sum()) / max(per_append, 1.0)
    threshold = APPEND_RENT_SHARE * cost * (len(taken) / len(files)) ** DILUTION
    accumulator = count * (count + 1) / 2  # each waiting append adds about one to every file's depth
    if accumulator < threshold:
        return WatermarkDecision(lag_in_key, above, accumulator, threshold, Reason.LATE_RUN_RENT, True)
    decision = WatermarkDecision(lag_in_key, above, accumulator, threshold, Reason.LATE_RUN_ABSORB, True)
    upper = None if above is None else UpperRun(above, age_run_id(int(runs.ages[0])), int(runs.horizons[0]))
    return LateRunChoice(1, taken, upper, decision)


def head_files(main_rows: IntArray, target_rows: int | None) -> int:
    """How many of the main run's last files (by min key) hold under HEAD_FILL of the target: rewritten with
    the appends, so the main run's files fill up."""
    if not target_rows:
        return 0
    full = np.flatnonzero(main_rows >= HEAD_FILL * target_rows)
    return len(main_rows) - (int(full[-1]) + 1 if len(full) else 0)


def fresh(top: float, lows: FloatArray, highs: FloatArray, rows: FloatArray, starts: IntArray) -> bool:
    """Whether the waiting appends (runs beginning at `starts`, the last entry the end) move the largest key
    forward by at least FRESH_SHARE of what their rows span at the density of everything before each."""
    low = float(lows[: int(starts[0])].min())
    before = float(rows[: int(starts[0])].sum())
    shares = []
    for start, stop in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True):
        high = float(highs[start:stop].max())
        added = float(rows[start:stop].sum())
        expected = (top - low) * added / max(before, 1.0)
        shares.append(max(high - top, 0.0) / expected if expected > 0 else 0.0)
        top, low, before = max(top, high), min(low, float(lows[start:stop].min())), before + added
    return bool(np.mean(shares) >= FRESH_SHARE)
