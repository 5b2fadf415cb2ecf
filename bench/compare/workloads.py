"""The workloads of the comparison: seeded Arrow batches of streaming appends, and the run sizes.

(a) uniform random int64 keys; (b) microsecond timestamps increasing with the batch index (one hour per batch), 5%
late rows drawn uniformly from the past; (c) a two-column key (int in [0, 1000), 10-letter string); (d) numpy
zipf(a=1.3) keys clipped to 1,000,000. Each batch also carries a float and a 20-character string payload.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from bench.merge_bench import STRING_WIDTH, letters

SEED = 20240605


@dataclass(frozen=True)
class Params:
    batches: int
    rows: int
    every: int
    target_rows: int
    queries: int = 200
    query_fraction: float = 0.01


FULL = Params(batches=60, rows=50_000, every=10, target_rows=1_000_000)
QUICK = Params(batches=30, rows=10_000, every=5, target_rows=100_000)
"""Quick keeps full mode's table/target ratio (3 target files at the end) and maintenance count (6 every-k runs);
appends are 10% of a target file instead of 5%. With target_rows=200,000 the whole 200,000-row quick table would
fit in one target file: every every-k strategy would end as one file and all scan ratios would be trivially 1."""


def payload(rng: np.random.Generator, rows: int) -> dict[str, pa.Array]:
    return {"v": pa.array(rng.random(rows)), "s": letters(rng, rows, STRING_WIDTH)}


def uniform_batch(rng: np.random.Generator, index: int, rows: int) -> pa.Table:
    return pa.table({"k": pa.array(rng.integers(-(1 << 62), 1 << 62, size=rows, dtype=np.int64)), **payload(rng, rows)})


T0 = int(dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp() * 1_000_000)
HOUR = 3_600_000_000
LATE_SHARE = 0.05


def late_rows_batch(
    rng: np.random.Generator, index: int, rows: int, lateness_hours: int | None, share: float = LATE_SHARE
) -> pa.Table:
    """Rows in this batch's hour but a `share` of late rows (5%), uniformly from the `lateness_hours` hours before
    it (None: from T0, late by any amount)."""
    start = T0 + index * HOUR
    ts = rng.integers(start, start + HOUR, size=rows, dtype=np.int64)
    late = rng.random(rows) < share
    if index > 0:
        earliest = T0 if lateness_hours is None else max(T0, start - lateness_hours * HOUR)
        ts[late] = rng.integers(earliest, start, size=int(late.sum()), dtype=np.int64)
    return pa.table({"ts": pa.array(ts, pa.timestamp("us", tz="UTC")), **payload(rng, rows)})


def time_batch(rng: np.random.Generator, index: int, rows: int) -> pa.Table:
    """Late rows from anywhere in the past (workload b)."""
    return late_rows_batch(rng, index, rows, None)


def bounded_time_batch(rng: np.random.Generator, index: int, rows: int) -> pa.Table:
    """Late rows from at most 4 hours (appends) back (issue 20)."""
    return late_rows_batch(rng, index, rows, 4)


def two_column_batch(rng: np.random.Generator, index: int, rows: int) -> pa.Table:
    return pa.table(
        {
            "a": pa.array(rng.integers(0, 1_000, size=rows, dtype=np.int64)),
            "b": letters(rng, rows, 10),
            **payload(rng, rows),
        }
    )


ZIPF_A = 1.3
ZIPF_CLIP = 1_000_000


def zipf_batch(rng: np.random.Generator, index: int, rows: int) -> pa.Table:
    keys = np.minimum(rng.zipf(ZIPF_A, size=rows), ZIPF_CLIP).astype(np.int64)
    return pa.table({"z": pa.array(keys), **payload(rng, rows)})


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    key: tuple[str, ...]
    make: Callable[[np.random.Generator, int, int], pa.Table]


WORKLOADS = (
    Workload("a_uniform", "(a) uniform random int64 keys", ("k",), uniform_batch),
    Workload("b_time", "(b) mostly-ordered timestamps, 5% late rows", ("ts",), time_batch),
    Workload("c_two_col", "(c) two-column key (int in [0,1000), string)", ("a", "b"), two_column_batch),
    Workload("d_zipf", f"(d) zipf(a={ZIPF_A}) keys clipped to {ZIPF_CLIP:,}", ("z",), zipf_batch),
)


# ---- issue 11: the absorb policy against levels and z_order -------------------------------------------------


@dataclass(frozen=True)
class SuiteCase:
    name: str
    workload: Workload
    params: Params
    strategies: tuple[str, ...]


ALL_ABSORB = ("z_order", "recluster_incr", "absorb", "absorb_quality", "absorb_economy")
LONG_RUN = ("z_order", "recluster_incr", "absorb")
UNIFORM, TIME = WORKLOADS[0], WORKLOADS[1]
ABSORB_SUITE = (
    SuiteCase("random_40", UNIFORM, Params(40, 50_000, 5, 1_000_000), ALL_ABSORB),
    SuiteCase("time_40", TIME, Params(40, 50_000, 5, 1_000_000), LONG_RUN),
    SuiteCase("random_400", UNIFORM, Params(400, 5_000, 5, 100_000), ("z_order", "absorb", "recluster_incr")),
    SuiteCase("time_400", TIME, Params(400, 5_000, 5, 100_000), ("z_order", "absorb")),
)
"""The issue's workloads: 40 appends at full size (2,000,000 rows, 1,000,000-row files) and 400 small appends
(5,000 rows, 100,000-row files: the same table/file ratio) of random int64 keys and of time-like keys with 5%
late rows; z_order every 5 appends, levels and absorb after every append."""
ABSORB_SUITE_QUICK = (
    SuiteCase("random_40", UNIFORM, Params(20, 5_000, 5, 50_000), LONG_RUN),
    SuiteCase("random_400", UNIFORM, Params(60, 1_000, 5, 20_000), LONG_RUN),
    SuiteCase("time_40", TIME, Params(20, 5_000, 5, 50_000), LONG_RUN),
    SuiteCase("time_400", TIME, Params(60, 1_000, 5, 20_000), LONG_RUN),
)
"""CI speed (about 3 minutes): fewer, smaller appends; only the absorb goals' shape is checked, not their values."""
