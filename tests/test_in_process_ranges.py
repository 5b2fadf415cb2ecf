"""The kernel's range partitioning above merge.in_process_max_bytes, in the process and in Spark tasks: every
row once, files sorted and apart on the first key column, NULLs first and NaN last, deletion vectors applied; both
placements write the same files."""

from __future__ import annotations

import bisect
import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st

from recluster.core.curves import sample_quantile_bounds as range_bounds
from recluster.core.selection import select_merge_tasks
from recluster.delta.log_writer import set_table_properties
from recluster.engine.api import selection_bounds
from recluster.engine.rounds import snapshot_loader, write_task
from recluster.merge.in_process import range_ids
from recluster.settings import CLUSTER_BY_PROPERTY, Settings
from tests.helpers import row_multiset
from tests.table_shapes import add_deletion_vector, read_with_delta_rs, set_protocol_features


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), st.integers(-50, 50)), max_size=80),
    sample=st.lists(st.integers(-60, 60), max_size=40),
    ranges=st.integers(1, 9),
)
def test_range_ids_match_a_bisect_over_the_bounds(values: list[int | None], sample: list[int], ranges: int) -> None:
    bounds = range_bounds(pa.chunked_array([pa.array(sample, pa.int64())]), ranges)
    assert bounds == sorted(set(bounds)) and len(bounds) <= max(ranges - 1, 0)
    ids = range_ids(pa.array(values, pa.int64()), bounds)
    assert ids.tolist() == [0 if v is None else bisect.bisect_right(bounds, v) for v in values]


def test_nan_goes_to_the_last_range_and_null_to_the_first() -> None:
    column = pa.array([None, float("nan"), -math.inf, 0.5, math.inf], pa.float64())
    bounds = range_bounds(pa.chunked_array([column]), 3)
    assert not any(isinstance(b, float) and math.isnan(b) for b in bounds)
    ids = range_ids(column, bounds).tolist()
    assert ids[0] == 0 and ids[1] == len(bounds) and ids == [0, len(bounds), *sorted(ids[2:])]


def float_key_table(path: Path, *, with_vector: bool) -> pa.Table:
    rng = np.random.default_rng(3)
    for index in range(6):
        keys = rng.integers(0, 300, 4_000).astype(np.float64)
        keys[rng.random(4_000) < 0.02] = np.nan
        key = pa.array(keys, mask=rng.random(4_000) < 0.02)
        write_deltalake(str(path), pa.table({"k": key, "n": np.arange(4_000) + index * 4_000}), mode="append")
    set_table_properties(path, {CLUSTER_BY_PROPERTY: "k"})
    if with_vector:
        set_protocol_features(str(path), ["deletionVectors"], ["deletionVectors"])
        first = sorted(DeltaTable(str(path)).file_uris())[0].rsplit("/", 1)[1]
        add_deletion_vector(str(path), first, list(range(0, 4_000, 3)))
    return read_with_delta_rs(str(path))


def sort_rank(value: float | None) -> tuple[int, float]:
    if value is None:
        return (0, 0.0)
    return (2, 0.0) if math.isnan(value) else (1, value)


def range_partitioned(path: Path, placement: str, spark: Any) -> list[pa.Table]:
    """The files one FINAL task over the whole table writes (not committed), by `placement`."""
    settings = Settings(
        clustering={"target_rows": 3_000},  # type: ignore[arg-type]
        merge={"in_process_max_bytes": 0, "placement": placement, "threads": 2},  # type: ignore[arg-type]
    )
    snapshot = snapshot_loader(str(path), settings, None)()
    plan = select_merge_tasks(
        str(path), snapshot.version, snapshot.blocks, selection_bounds(settings, snapshot, None), final=True
    )
    (task,) = plan.tasks
    written = write_task(spark, task, snapshot, settings=settings, run_id=f"000000000{placement[:3]}")
    return [pq.read_table(path / f.path) for f in written]


@pytest.mark.parametrize("with_vector", [False, True], ids=["plain", "with-deletion-vector"])
def test_range_partitioned_merge_keeps_every_row_once_in_sorted_disjoint_files(
    tmp_path: Path, with_vector: bool
) -> None:
    path = tmp_path / "t"
    expected = float_key_table(path, with_vector=with_vector)
    tables = range_partitioned(path, "process", None)
    assert row_multiset(pa.concat_tables(tables)) == row_multiset(expected)
    assert len(tables) >= 6  # about rows / target_rows ranges, each cut into files
    spans = []
    for table in tables:
        ranks = [sort_rank(v) for v in table.column("k").to_pylist()]
        assert ranks == sorted(ranks)  # sorted inside the file, NULLs first, NaN last
        spans.append((ranks[0], ranks[-1]))
    spans.sort()
    for (_, high), (low, _) in itertools.pairwise(spans):
        assert high < low  # a key value (NULL and NaN included) lives in one file only
    assert int(pc.sum(pc.is_nan(pa.concat_tables(tables).column("k"))).as_py()) > 0


@pytest.mark.spark
@pytest.mark.parametrize("with_vector", [False, True], ids=["plain", "with-deletion-vector"])
def test_spark_placement_writes_the_files_of_the_in_process_placement(
    tmp_path: Path, spark: Any, with_vector: bool
) -> None:
    """Spark tasks place the same bounds (the same sample) and cut the same files: file by file the same rows."""
    path = tmp_path / "t"
    float_key_table(path, with_vector=with_vector)

    def by_first_row(tables: list[pa.Table]) -> list[Any]:
        return sorted((sort_rank(t.column("k")[0].as_py()), row_multiset(t)) for t in tables)

    in_process = range_partitioned(path, "process", None)
    in_spark = range_partitioned(path, "spark", spark)
    assert len(in_spark) == len(in_process) >= 6
    assert by_first_row(in_spark) == by_first_row(in_process)
