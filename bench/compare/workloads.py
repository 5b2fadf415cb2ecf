"""The workloads of the comparison and their run sizes; the seeded batches themselves are tests/workload_data.py's
((a) uniform int64 keys, (b) timestamps with 5% late rows, (c) a two-column key, (d) zipf keys)."""

from __future__ import annotations

from dataclasses import dataclass

from tests.workload_data import ZIPF_A, ZIPF_CLIP, Workload, time_batch, two_column_batch, uniform_batch, zipf_batch

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
