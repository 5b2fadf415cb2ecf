"""Space-filling curves (issue 19): the curve functions against brute force, and multi-column keys end to end."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from deltalake import DeltaTable
from hypothesis import given, settings
from hypothesis import strategies as st

from recluster.core.blocks import parse_data_file_name
from recluster.core.curves import (
    RANK_BITS,
    Curve,
    column_ranks,
    hilbert_index,
    interleave,
    quantile_bounds,
    whole_curve,
)
from recluster.core.sql import ClusterByStatement, parse_statement
from recluster.core.sql_parser import SqlError
from recluster.delta.log_writer import set_table_properties
from recluster.engine.api import read_snapshot
from recluster.settings import CLUSTER_BY_PROPERTY, CURVE_PROPERTY, RANGES_PROPERTY, Settings
from tests.helpers import SMALL_FILES, main_json, our_add_actions, random_pairs, row_multiset


@pytest.mark.parametrize(("dims", "bits"), [(1, 4), (2, 1), (2, 4), (3, 3), (4, 2)])
def test_hilbert_is_a_bijection_whose_consecutive_values_are_grid_neighbours(dims: int, bits: int) -> None:
    points = np.array(list(itertools.product(range(1 << bits), repeat=dims)), dtype=np.uint64)
    index = hilbert_index(points, bits)
    assert sorted(index.tolist()) == list(range(1 << (bits * dims)))  # every cell once: a bijection
    walk = points[np.argsort(index)].astype(np.int64)
    steps = np.abs(np.diff(walk, axis=0)).sum(axis=1)
    assert (steps == 1).all()  # each step moves to a neighbouring cell
    assert index[0] == 0 and (walk[0] == 0).all()  # the walk starts at the origin (NULL ranks)


def test_zorder_interleaves_the_bits_of_the_ranks() -> None:
    points = np.array(list(itertools.product(range(8), repeat=2)), dtype=np.uint64)
    index = interleave(points, 3)
    for (x, y), z in zip(points.tolist(), index.tolist(), strict=True):
        expected = 0
        for bit in range(2, -1, -1):
            expected = (expected << 2) | (((x >> bit) & 1) << 1) | ((y >> bit) & 1)
        assert z == expected
    assert sorted(index.tolist()) == list(range(64))


@settings(max_examples=80, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), st.integers(-100, 100), st.just(float("nan"))), max_size=60),
    sample=st.lists(st.integers(-120, 120), max_size=50),
)
def test_ranks_put_nulls_first_nan_last_and_follow_the_bounds(values: list[Any], sample: list[int]) -> None:
    bounds = quantile_bounds(sorted(sample), 7)
    assert bounds == sorted(set(bounds))
    nulls = np.array([v is None for v in values], dtype=bool)
    array = np.array([0.0 if v is None else float(v) for v in values], dtype=np.float64)
    ranks = column_ranks(array, nulls, [float(b) for b in bounds]).tolist()
    top = (1 << RANK_BITS) - 1
    assert ranks == [value_rank(None if v is None else float(v), bounds) * top // (len(bounds) + 2) for v in values]
    for value, rank in zip(values, ranks, strict=True):
        if value is None:
            assert rank == 0
        elif value != value:
            assert rank == top  # NaN: the last cell of the grid's side
        else:
            assert 0 < rank < top
    numbers = sorted((v, r) for v, r in zip(values, ranks, strict=True) if v is not None and v == v)
    assert [r for _, r in numbers] == sorted(r for _, r in numbers)  # monotone in the value


def value_rank(value: Any, bounds: list[Any]) -> int:
    """The rank of one value, by the definition: NULL 0, NaN after the last range, else 1 + bounds at or below."""
    if value is None:
        return 0
    if isinstance(value, float) and value != value:
        return len(bounds) + 2
    return sum(1 for bound in bounds if bound <= value) + 1


@settings(max_examples=60, deadline=None)
@given(distinct=st.integers(1, 999))
def test_ranks_of_any_number_of_ranges_spread_over_the_whole_grid_side_in_order(distinct: int) -> None:
    """Three airports take as much of the curve as a thousand ranges: the highest rank lands in the grid's top
    third whatever the count, and distinct ranges stay distinct positions."""
    bounds = [float(v) for v in range(1, distinct + 1)]
    values = np.arange(0, distinct + 1, dtype=np.float64)  # one value in each range
    ranks = column_ranks(values, np.zeros(len(values), dtype=bool), bounds)
    assert (np.diff(ranks.astype(np.int64)) > 0).all()
    assert int(ranks[-1]) >= ((1 << RANK_BITS) - 1) * 2 // 3


def test_cluster_by_using_parses_every_curve_and_refuses_others() -> None:
    statement = parse_statement("ALTER TABLE 't' CLUSTER BY (a, b) USING zorder")
    assert isinstance(statement, ClusterByStatement) and statement.curve is Curve.ZORDER
    plain = parse_statement("ALTER TABLE 't' CLUSTER BY (a, b)")
    assert isinstance(plain, ClusterByStatement) and plain.curve is None
    with pytest.raises(SqlError, match="HILBERT, ZORDER or LINEAR"):
        parse_statement("ALTER TABLE 't' CLUSTER BY (a, b) USING SPIRAL")


@pytest.mark.parametrize("curve", ["hilbert", "zorder"])
def test_final_on_a_curve_prunes_every_column_and_keeps_the_rows(tmp_path: Path, capsys: Any, curve: str) -> None:
    path = tmp_path / "t"
    expected = random_pairs(path)
    statement = f"ALTER TABLE '{path}' CLUSTER BY (b, day)" + ("" if curve == "hilbert" else " USING ZORDER")
    main_json(capsys, "sql", statement)
    properties = DeltaTable(str(path)).metadata().configuration
    assert properties[CLUSTER_BY_PROPERTY] == "b,day" and properties[CURVE_PROPERTY] == curve
    linear = main_json(capsys, "run", str(path), "--final", "--curve", "linear", *SMALL_FILES)
    scan_linear = linear["after"]["column_scan"]  # type: ignore[index]
    result = main_json(capsys, "run", str(path), "--final", *SMALL_FILES)
    assert row_multiset(DeltaTable(str(path)).to_pyarrow_table()) == row_multiset(expected)
    scans = result["after"]["column_scan"]  # type: ignore[index]
    files = our_add_actions(path)
    assert len(files) >= 12
    names = [parse_data_file_name(f["path"]) for f in files]
    assert all(n is not None and n.curve_range is not None for n in names)
    # lexicographic: the first column prunes, the second is read almost everywhere; the curve evens them out
    assert scan_linear["day"] > 0.8
    # Hilbert: each column about 1/sqrt(files); Z-order jumps between quadrants and pays for it
    assert max(scans.values()) <= (1.3 if curve == "hilbert" else 2.0) / len(files) ** 0.5
    assert RANGES_PROPERTY not in DeltaTable(str(path)).metadata().configuration  # no metaData commit of ours
    (pointer,) = (path / "_recluster").glob("current-ranges-*-0000000001.json")
    bounds_id = json.loads(pointer.read_text())["ranges"]
    assert read_snapshot(str(path), settings=Settings()).key.bounds.id == bounds_id  # type: ignore[union-attr]
    stored = json.loads((path / "_recluster" / f"ranges-{bounds_id}.json").read_text())
    assert stored["columns"] == ["b", "day"] and 500 < len(stored["bounds"][0]) < 1000
    info = main_json(capsys, "info", str(path))
    assert info["column_scan"] == pytest.approx(scans)  # type: ignore[index]
    assert info["unclustered_block_count"] == 0 and info["average_depth"] <= 1.5  # type: ignore[index]


def test_incremental_rounds_put_appends_on_the_curve(tmp_path: Path, capsys: Any) -> None:
    """An append not yet on the curve spans the whole curve (it may hold any curve value); the default policy
    absorbs the appends into the run on the curve once they hold enough rows, under the same bounds."""
    path = tmp_path / "t"
    random_pairs(path, appends=4)
    set_table_properties(path, {CLUSTER_BY_PROPERTY: "a,b"})
    main_json(capsys, "run", str(path), "--final", *SMALL_FILES)
    bounds_before = read_snapshot(str(path), settings=Settings()).key.bounds
    assert bounds_before is not None
    random_pairs(path, appends=3, rows=2_000, seed=8)
    expected = DeltaTable(str(path)).to_pyarrow_table()
    settings = Settings(clustering={"target_rows": 3000})  # type: ignore[arg-type]
    whole = whole_curve(2)
    before = read_snapshot(str(path), settings=settings).blocks
    assert sum(b.curve_range == whole and b.level == 0 for b in before) == 3
    main_json(capsys, "run", str(path), *SMALL_FILES)
    after = read_snapshot(str(path), settings=settings)
    assert not [b for b in after.blocks if b.curve_range == whole]
    assert all(b.key_fingerprint == after.key.fingerprint for b in after.blocks)
    assert after.key.bounds == bounds_before  # the bounds are kept
    assert len(list((path / "_recluster").glob("current-ranges-*.json"))) == 1
    assert row_multiset(DeltaTable(str(path)).to_pyarrow_table()) == row_multiset(expected)


@pytest.mark.spark
@pytest.mark.parametrize("placement", ["spark", "process"], ids=["spark-tasks", "in-process-ranges"])
def test_final_on_a_curve_in_every_placement(tmp_path: Path, spark: Any, placement: str) -> None:
    """The curve value is computed, partitioned on, sorted and cut on in Spark tasks and in the range-partitioned
    in-process kernel alike (the one-piece path is the default for small tasks, above)."""
    from recluster.engine.rounds import recluster_table, snapshot_loader

    path = tmp_path / "t"
    expected = random_pairs(path, appends=6)
    set_table_properties(path, {CLUSTER_BY_PROPERTY: "a,b"})
    settings = Settings(
        clustering={"target_rows": 1500},  # type: ignore[arg-type]
        merge={"in_process_max_bytes": 0, "placement": placement},  # type: ignore[arg-type]
    )
    loader = snapshot_loader(str(path), settings, None)
    result = recluster_table(str(path), loader, settings=settings, spark_factory=lambda: spark, final=True)
    assert row_multiset(DeltaTable(str(path)).to_pyarrow_table()) == row_multiset(expected)
    files = our_add_actions(path)
    assert len(files) >= 12 and all(parse_data_file_name(f["path"]).curve_range for f in files)  # type: ignore[union-attr]
    assert result.after.table.average_depth <= 1.5
    # about 1/sqrt(files) each (a lexicographic key reads every file for its second column); a file cut a little
    # past a square of the curve widens its min/max box, so a few files' worth of slack
    assert max(result.after.column_scan.values()) < 0.55
