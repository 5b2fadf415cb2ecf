"""Scenario 5: adversarial data through a FINAL recluster, rows checked; then nothing is left to do (no loops)."""

from __future__ import annotations

import datetime as dt
import decimal
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from recluster.delta.log_writer import set_table_properties
from recluster.delta.maintenance import clean_orphans
from recluster.settings import CLUSTER_BY_PROPERTY, ClusteringSettings, Settings
from tests.reliability.checks import assert_intact, run_final

pytestmark = [pytest.mark.spark]

SETTINGS = Settings(clustering=ClusteringSettings(target_rows=1_000, max_tasks_per_round=2))
BATCHES = 3
ROWS = 600

Make = Callable[[np.random.Generator, int], pa.Array]
"""Key values of batch `i` (ROWS of them)."""


def _floats(rng: np.random.Generator, i: int) -> pa.Array:
    values = rng.normal(0, 1e6, ROWS).tolist()
    specials = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, None, 1e308, -1e308]
    for j, special in enumerate(specials):
        values[(j * 37 + i) % ROWS] = special
    return pa.array(values, pa.float64())


def _long_strings(rng: np.random.Generator, i: int) -> pa.Array:
    # 32 shared characters, then the part that orders them: Delta's string stats keep only the prefix
    return pa.array([f"{'p' * 32}{x:012d}" for x in rng.integers(0, 10**12, ROWS)])


def _microsecond_timestamps(rng: np.random.Generator, i: int) -> pa.Array:
    base = dt.datetime(2026, 1, 1, 12, 0, 0)
    # a few milliseconds shared by every batch: stats truncated to the ms make each file's max stat lower
    return pa.array(
        [base + dt.timedelta(microseconds=int(x)) for x in rng.integers(0, 5_000, ROWS)], pa.timestamp("us")
    )


def _decimals(rng: np.random.Generator, i: int) -> pa.Array:
    return pa.array(
        [
            decimal.Decimal(f"{x}.{y:010d}")
            for x, y in zip(rng.integers(-(10**17), 10**17, ROWS), rng.integers(0, 10**10, ROWS), strict=True)
        ],
        pa.decimal128(38, 10),
    )


def _old_dates(rng: np.random.Generator, i: int) -> pa.Array:
    start = dt.date(1900, 1, 1)
    return pa.array([start + dt.timedelta(days=int(x)) for x in rng.integers(0, 40_000, ROWS)], pa.date32())


def _random_ints(rng: np.random.Generator, i: int) -> pa.Array:
    return pa.array(rng.integers(-(10**9), 10**9, ROWS), pa.int64())


KEYS: dict[str, Make] = {
    "all_constant": lambda rng, i: pa.array([7] * ROWS, pa.int64()),
    "all_null": lambda rng, i: pa.array([None] * ROWS, pa.int64()),
    "nan_and_infinities": _floats,
    "strings_longer_than_stats": _long_strings,
    "microsecond_timestamps": _microsecond_timestamps,
    "decimals": _decimals,
    "dates_before_1970": _old_dates,
}


def write(path: Path, keys: pa.Array, batch: int, **options: object) -> None:
    data = pa.table(
        {"k": keys, "batch": pa.array([batch] * len(keys), pa.int32()), "i": pa.array(range(len(keys)), pa.int64())}
    )
    create = not (path / "_delta_log").exists()
    write_deltalake(str(path), data, mode="append", **options)  # type: ignore[arg-type]
    if create:
        set_table_properties(path, {CLUSTER_BY_PROPERTY: "k"})


def final_then_nothing_left(path: Path, spark, settings: Settings = SETTINGS) -> None:
    """FINAL keeps every row, stops by itself, and a second FINAL finds nothing to do."""
    expected = DeltaTable(str(path)).to_pyarrow_table()
    result = run_final(path, spark, settings)
    assert result.totals.failures == 0 and result.totals.conflicts == 0, result
    assert result.stop_reason in ("within_threshold", "no_progress"), result.stop_reason
    assert_intact(path, expected)
    again = run_final(path, spark, settings)
    assert again.totals.tasks == 0, f"FINAL rewrote data again: {again.plans[0]}"
    assert_intact(path, expected)


@pytest.mark.parametrize("name", list(KEYS))
def test_final_on_adversarial_keys(tmp_path, spark, name):
    rng = np.random.default_rng(len(name))
    for batch in range(BATCHES):
        write(tmp_path / name, KEYS[name](rng, batch), batch)
    final_then_nothing_left(tmp_path / name, spark)


def test_final_on_one_huge_file_among_small_ones(tmp_path, spark):
    rng = np.random.default_rng(3)
    path = tmp_path / "huge"
    write(path, pa.array([], pa.int64()), 0)  # creates the table with its key property
    write(path, pa.array(rng.integers(-(10**9), 10**9, 30_000), pa.int64()), 1)
    for batch in range(2, 5):
        write(path, _random_ints(rng, batch), batch)
    huge = max(pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))["size_bytes"].to_pylist())
    # the huge file alone is over the task bound: the small ones are merged without it, and FINAL stops
    bounded = Settings(clustering=SETTINGS.clustering.model_copy(update={"max_merge_bytes": huge - 1}))
    final_then_nothing_left(path, spark, bounded)
    assert any(p.endswith(".parquet") and "part-L" not in p for p in DeltaTable(str(path)).file_uris())


def test_final_on_one_row_per_file(tmp_path, spark):
    rng = np.random.default_rng(4)
    for batch in range(25):
        write(tmp_path / "tiny", pa.array(rng.integers(0, 10, 1), pa.int64()), batch)
    final_then_nothing_left(tmp_path / "tiny", spark)


def test_final_on_an_empty_table(tmp_path, spark):
    path = tmp_path / "empty"
    write(path, pa.array([], pa.int64()), 0)
    version = DeltaTable(str(path)).version()
    final_then_nothing_left(path, spark)
    assert DeltaTable(str(path)).version() == version


def test_final_and_clean_on_a_checkpointed_table_with_cleaned_up_log(tmp_path, spark):
    rng = np.random.default_rng(6)
    path = tmp_path / "checkpointed"
    for batch in range(4):
        write(path, _random_ints(rng, batch), batch, configuration={"delta.logRetentionDuration": "interval 0 seconds"})
    table = DeltaTable(str(path))
    table.create_checkpoint()
    old = time.time() - 3600
    for name in os.listdir(path / "_delta_log"):
        os.utime(path / "_delta_log" / name, (old, old))
    table.cleanup_metadata()
    assert not (path / "_delta_log" / f"{0:020d}.json").exists(), "the log was cleaned up"
    final_then_nothing_left(path, spark)
    expected = DeltaTable(str(path)).to_pyarrow_table()
    result = clean_orphans(str(path), safety_age_seconds=0)
    assert result.orphans == (), result.orphans  # files of the retained versions only: nothing is ours to delete
    assert_intact(path, expected)


def test_final_on_partitioned_table_with_null_partition_values(tmp_path, spark):
    rng = np.random.default_rng(7)
    path = tmp_path / "nullparts"
    for batch in range(BATCHES):
        part = pa.array([None if x % 3 == 0 else f"p{x % 2}" for x in range(ROWS)])
        data = pa.table({"k": _random_ints(rng, batch), "p": part, "batch": pa.array([batch] * ROWS, pa.int32())})
        write_deltalake(str(path), data, mode="append", partition_by=["p"])
    set_table_properties(path, {CLUSTER_BY_PROPERTY: "k"})
    final_then_nothing_left(path, spark)
    actions = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True)).to_pylist()
    assert sum(a["partition.p"] is None for a in actions) >= 1
