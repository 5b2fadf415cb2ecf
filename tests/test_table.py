"""Snapshots of real Delta tables (written with delta-rs under tmp_path) -> blocks -> clustering info.

Every expectation is computed from the data the test wrote (per-file min/max, NULL first), never from the
code under test; the depth figures come from a brute-force O(n^2) oracle written from docs/concepts.md#depth-and-levels.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import ColumnProperties, DeltaTable, WriterProperties, write_deltalake

from recluster.core.blocks import LEVEL_CONSTANT, data_file_name, new_run_id
from recluster.core.errors import TableError
from recluster.core.keys import ClusterKey, KeyColumn, KeyType, key_fingerprint
from recluster.delta import file_blocks as table_module
from recluster.delta.file_blocks import blocks_from_actions
from recluster.delta.log_writer import set_table_properties
from recluster.engine.api import read_snapshot, table_info
from recluster.settings import CLUSTER_BY_PROPERTY, Settings, TableSettings
from tests.helpers import EMPTY_METRICS

SETTINGS = Settings(clustering={"curve": "linear"})  # type: ignore[arg-type]  # the lexicographic key encoding


# --- writing tables -------------------------------------------------------------------------------------


def file_paths(location: Path) -> set[str]:
    if not (location / "_delta_log").exists():
        return set()
    return set(pa.table(DeltaTable(str(location)).get_add_actions()).column("path").to_pylist())


def append(location: Path, data: pa.Table, **kwargs: Any) -> str:
    """Append one batch (one file) and return the path of the file it added, relative to the table."""
    before = file_paths(location)
    write_deltalake(str(location), data, mode="append", **kwargs)
    added = file_paths(location) - before
    assert len(added) == 1, added
    return added.pop()


def set_cluster_by(location: Path, columns: str) -> None:
    set_table_properties(location, {CLUSTER_BY_PROPERTY: columns})


def info_dict(location: Path, cluster_by: Sequence[str] | None = None, **kwargs: Any) -> dict[str, Any]:
    return table_info(str(location), settings=SETTINGS, cluster_by=cluster_by, **kwargs).to_dict()


def blocks_by_path(location: Path, cluster_by: Sequence[str] | None = None, **kwargs: Any) -> dict[str, Any]:
    snapshot = read_snapshot(str(location), settings=SETTINGS, cluster_by=cluster_by, **kwargs)
    return {b.path: b for b in snapshot.blocks}


# --- oracle ---------------------------------------------------------------------------------------------


def _component(value: Any) -> tuple[Any, ...]:
    """NULL sorts before every value; strings by UTF-8 bytes (as Spark)."""
    if value is None:
        return (0,)
    return (1, value.encode("utf-8") if isinstance(value, str) else value)


def sort_key(values: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(_component(v) for v in values)


def column_min_max(values: Sequence[Any]) -> tuple[Any, Any]:
    """Per-column (min, max) of one file as docs/concepts.md defines it: min NULL when the column has nulls."""
    present = [v for v in values if v is not None]
    if not present:
        return None, None
    low = None if len(present) < len(values) else min(present, key=_component)
    return low, max(present, key=_component)


def file_range(data: pa.Table, key: Sequence[str]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    pairs = [column_min_max(data.column(c).to_pylist()) for c in key]
    return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)


def oracle(ranges: Sequence[tuple[Any, Any]]) -> dict[str, Any]:
    """Depth metrics of docs/concepts.md by direct counting; ranges are (min, max) of comparable keys."""
    if not ranges:
        return {
            "average_depth": 1.0,
            "average_overlaps": 0.0,
            "p95_depth": 1,
            "p99_depth": 1,
            "block_depth_histogram": {},
        }
    points = sorted({x for r in ranges for x in r})
    depth = {p: sum(1 for lo, hi in ranges if lo <= p <= hi) for p in points}
    block_depths = [max(depth[p] for p in points if lo <= p <= hi) for lo, hi in ranges]
    overlaps = [
        sum(1 for j, (lo2, hi2) in enumerate(ranges) if j != i and lo2 <= hi and lo <= hi2)
        for i, (lo, hi) in enumerate(ranges)
    ]
    ordered = sorted(block_depths)

    def rank(percent: int) -> int:
        return ordered[max(math.ceil(percent / 100 * len(ordered)), 1) - 1]

    histogram: dict[int, int] = {}
    for d in block_depths:
        bucket = d if d <= 16 else 1 << (d - 1).bit_length()
        histogram[bucket] = histogram.get(bucket, 0) + 1
    return {
        "average_depth": sum(block_depths) / len(block_depths),
        "average_overlaps": sum(overlaps) / len(overlaps),
        "p95_depth": rank(95),
        "p99_depth": rank(99),
        "block_depth_histogram": {f"{b:05d}": histogram[b] for b in sorted(histogram)},
    }


def assert_depth_metrics(got: Mapping[str, Any], expected: Mapping[str, Any]) -> None:
    for name, value in expected.items():
        if isinstance(value, float):
            assert got[name] == pytest.approx(value, rel=1e-12), name
        else:
            assert got[name] == value, name


# --- many files -----------------------------------------------------------------------------------------


def test_many_files_match_oracle(tmp_path: Path) -> None:
    rng = random.Random(20240611)
    location = tmp_path / "many"
    expected: dict[str, tuple[int, int, int]] = {}
    previous_hi = None
    for batch in range(30):
        # every 7th file touches the previous one at exactly one value: they overlap
        touching = batch % 7 == 3 and previous_hi is not None
        lo = previous_hi if touching else rng.randrange(-1_000_000, 1_000_000)
        hi = lo + rng.choice([0, 1, 10, 5_000, 200_000, 900_000])
        rows = rng.randrange(2, 60)
        keys = [lo, hi] + [rng.randint(lo, hi) for _ in range(rows - 2)]
        rng.shuffle(keys)
        data = pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array([float(batch)] * rows)})
        path = append(location, data)
        expected[path] = (lo, hi, rows)
        previous_hi = hi

    result = table_info(str(location), settings=SETTINGS, cluster_by=["k"])
    got = result.to_dict()
    ranges = list(expected.values())
    assert got["total_block_count"] == 30
    assert got["total_rows"] == sum(r for _, _, r in ranges)
    assert got["unclustered_block_count"] == 0
    assert got["constant_block_count"] == sum(1 for lo, hi, _ in ranges if lo == hi)
    on_disk = sum((location / p).stat().st_size for p in expected)
    assert got["total_bytes"] == on_disk
    assert_depth_metrics(got, oracle([(lo, hi) for lo, hi, _ in ranges]))
    assert set(got["levels"]) == {"0"}
    assert got["levels"]["0"] == {k: v for k, v in got.items() if k not in ("levels", "column_scan")}

    # The per-file ranges the snapshot carries are exactly the data's.
    for block in result.snapshot.blocks:
        lo, hi, rows = expected[block.path]
        assert (block.min_values, block.max_values, block.rows, block.level) == ((lo,), (hi,), rows, 0)
        assert block.min_key is not None and block.max_key is not None
        assert block.min_key <= block.max_key


def test_key_from_table_property_and_from_settings(tmp_path: Path) -> None:
    location = tmp_path / "prop"
    append(location, pa.table({"a": [1, 5], "b": ["x", "y"]}))
    append(location, pa.table({"a": [3, 9], "b": ["a", "b"]}))
    with pytest.raises(TableError, match="no cluster key"):
        info_dict(location)

    configured = Settings(tables=[TableSettings(uri=str(location), cluster_by="b")])
    by_settings = table_info(str(location), settings=configured).to_dict()
    assert by_settings["average_depth"] == 1.0  # on b: [a, b] and [x, y] are apart

    set_cluster_by(location, "a")
    assert info_dict(location)["average_depth"] == 2.0
    # --cluster-by beats the table property, the settings entry beats the property too
    assert info_dict(location, cluster_by=["b"]) == by_settings
    assert table_info(str(location), settings=configured).to_dict() == by_settings
    snapshot = read_snapshot(str(location), settings=SETTINGS)
    assert snapshot.key.names == ("a",)
    assert snapshot.key.fingerprint == key_fingerprint(["a"])


def test_file_uri_is_accepted(tmp_path: Path) -> None:
    location = tmp_path / "uri"
    append(location, pa.table({"k": [1, 2, 3]}))
    assert info_dict(location, ["k"]) == table_info(location.as_uri(), settings=SETTINGS, cluster_by=["k"]).to_dict()


# --- partitions -----------------------------------------------------------------------------------------


def test_partitions_never_overlap(tmp_path: Path) -> None:
    location = tmp_path / "parts"
    for part in ("x", "y"):
        append(location, pa.table({"p": [part] * 3, "k": [0, 50, 100]}), partition_by=["p"])
    got = info_dict(location, ["k"])
    assert got["total_block_count"] == 2
    assert got["average_depth"] == 1.0
    assert got["average_overlaps"] == 0.0


def test_partition_filter(tmp_path: Path) -> None:
    location = tmp_path / "parts"
    x1 = append(location, pa.table({"p": ["x"] * 2, "k": [0, 100]}), partition_by=["p"])
    x2 = append(location, pa.table({"p": ["x"] * 2, "k": [50, 150]}), partition_by=["p"])
    y1 = append(location, pa.table({"p": ["y"] * 3, "k": [0, 10, 100]}), partition_by=["p"])

    whole = info_dict(location, ["k"])
    assert whole["total_block_count"] == 3
    assert whole["average_depth"] == pytest.approx(5 / 3)
    assert whole["average_overlaps"] == pytest.approx(2 / 3)

    only_x = blocks_by_path(location, ["k"], partition={"p": "x"})
    assert set(only_x) == {x1, x2}
    assert all(b.partition == (("p", "x"),) for b in only_x.values())
    x_info = info_dict(location, ["k"], partition={"p": "x"})
    assert (x_info["total_block_count"], x_info["total_rows"], x_info["average_depth"]) == (2, 4, 2.0)

    only_y = blocks_by_path(location, ["k"], partition={"p": "y"})
    assert set(only_y) == {y1}
    assert info_dict(location, ["k"], partition={"p": "nope"})["total_block_count"] == 0

    with pytest.raises(TableError, match="unknown partition column 'q'") as caught:
        info_dict(location, ["k"], partition={"q": "x"})
    assert "\n" not in str(caught.value)


def test_partition_filter_on_integer_partition_column(tmp_path: Path) -> None:
    location = tmp_path / "intparts"
    one = append(location, pa.table({"p": pa.array([1, 1], pa.int32()), "k": [0, 9]}), partition_by=["p"])
    append(location, pa.table({"p": pa.array([2, 2], pa.int32()), "k": [0, 9]}), partition_by=["p"])
    assert set(blocks_by_path(location, ["k"], partition={"p": "1"})) == {one}


def test_key_column_that_is_a_partition_column(tmp_path: Path) -> None:
    location = tmp_path / "parts"
    append(location, pa.table({"p": ["x"], "k": [1]}), partition_by=["p"])
    with pytest.raises(TableError, match="'p' is a partition column") as caught:
        info_dict(location, ["p"])
    assert "\n" not in str(caught.value)


# --- NULLs, strings, constants --------------------------------------------------------------------------


def test_two_column_key_with_nulls(tmp_path: Path) -> None:
    location = tmp_path / "nulls"
    schema = pa.schema([("i", pa.int64()), ("s", pa.string())])
    batches = [
        {"i": [None, 5, 7], "s": ["b", "a", "c"]},  # some NULLs in i: min i is NULL
        {"i": [None, None], "s": ["x", "y"]},  # i all NULL: min and max NULL
        {"i": [1, 2], "s": [None, "q"]},  # some NULLs in s
        {"i": [3, 3], "s": [None, None]},  # s all NULL
        {"i": [1, 1], "s": ["a", "ab"]},
        {"i": [1, 1], "s": ["b", "ba"]},  # "ab" < "b": no overlap with the previous one
        {"i": [1, 1], "s": ["aa", "b"]},  # overlaps both
        {"i": [2, 2], "s": ["z", "é"]},  # "z" < "é" in UTF-8 byte order
    ]
    expected = {}
    for columns in batches:
        data = pa.table(columns, schema=schema)
        expected[append(location, data)] = file_range(data, ["i", "s"])
    set_cluster_by(location, "i, s")

    result = table_info(str(location), settings=SETTINGS)
    blocks = {b.path: b for b in result.snapshot.blocks}
    assert set(blocks) == set(expected)
    for path, (low, high) in expected.items():
        assert (blocks[path].min_values, blocks[path].max_values) == (low, high), path
        assert blocks[path].min_key is not None and blocks[path].max_key is not None
    first = blocks[next(iter(expected))]
    assert first.min_values == (None, "a")
    assert first.max_values == (7, "c")

    # Encoded keys order exactly as the values do (NULL first, strings by UTF-8 bytes).
    keyed = [(sort_key(v), b.min_key) for b in blocks.values() for v in [b.min_values]]
    keyed += [(sort_key(v), b.max_key) for b in blocks.values() for v in [b.max_values]]
    for a_value, a_key in keyed:
        for b_value, b_key in keyed:
            assert (a_value < b_value) == (a_key < b_key)
            assert (a_value == b_value) == (a_key == b_key)

    got = result.to_dict()
    assert got["unclustered_block_count"] == 0
    assert_depth_metrics(got, oracle([(sort_key(lo), sort_key(hi)) for lo, hi in expected.values()]))


def test_constant_files(tmp_path: Path) -> None:
    location = tmp_path / "const"
    append(location, pa.table({"k": pa.array([5] * 10, pa.int64())}))
    append(location, pa.table({"k": pa.array([7, 7], pa.int64())}))
    append(location, pa.table({"k": pa.array([1, 9, 4], pa.int64())}))
    append(location, pa.table({"k": pa.array([None, 7], pa.int64())}))  # NULL and 7: not constant
    append(location, pa.table({"k": pa.array([None, None], pa.int64())}))  # all NULL: min == max == NULL
    got = info_dict(location, ["k"])
    assert got["constant_block_count"] == 3
    assert got["levels"]["0"]["constant_block_count"] == 3
    assert got["total_block_count"] == 5


# --- footer fallback ------------------------------------------------------------------------------------


def test_footer_fallback_for_key_without_log_stats(tmp_path: Path) -> None:
    location = tmp_path / "footer"
    batches = [
        # Two row groups: the first all NULL, so the file's min is NULL and its max comes from group 2.
        ({"a": list(range(10)), "k": [None] * 5 + [30, 10, 40, 10, 50]}, 5),
        ({"a": list(range(4)), "k": [20, 25, 21, 22]}, None),
        ({"a": list(range(3)), "k": [None, None, None]}, None),
        ({"a": list(range(6)), "k": [60, 45, 99, 1000, 45, 70]}, 2),
    ]
    expected = {}
    a_ranges = {}
    for index, (columns, group_rows) in enumerate(batches):
        data = pa.table({"a": pa.array(columns["a"], pa.int64()), "k": pa.array(columns["k"], pa.int64())})
        kwargs: dict[str, Any] = {}
        if index == 0:
            kwargs["configuration"] = {"delta.dataSkippingNumIndexedCols": "1"}
        if group_rows:
            kwargs["writer_properties"] = WriterProperties(max_row_group_size=group_rows)
        path = append(location, data, **kwargs)
        expected[path] = (file_range(data, ["k"]), data.num_rows)
        a_ranges[path] = (min(columns["a"]), max(columns["a"]))

    actions = pa.table(DeltaTable(str(location)).get_add_actions(flatten=True))
    assert "min.k" not in actions.column_names, "the log must lack stats for k for this test to mean anything"
    assert "min.a" in actions.column_names

    before = len(table_module._FOOTER_CACHE)
    blocks = blocks_by_path(location, ["k"])
    assert len(table_module._FOOTER_CACHE) == before + len(expected)
    for path, ((low, high), rows) in expected.items():
        assert (blocks[path].min_values, blocks[path].max_values, blocks[path].rows) == (low, high, rows)
    assert blocks_by_path(location, ["k"]) == blocks
    assert len(table_module._FOOTER_CACHE) == before + len(expected)

    # a two-column key mixing a logged column and an unlogged one
    mixed = blocks_by_path(location, ["a", "k"])
    for path, ((low, high), _) in expected.items():
        assert mixed[path].min_values == (a_ranges[path][0], *low)
        assert mixed[path].max_values == (a_ranges[path][1], *high)

    got = info_dict(location, ["k"])
    assert got["unclustered_block_count"] == 0
    ranges = [(sort_key(lo), sort_key(hi)) for (lo, hi), _ in expected.values()]
    assert_depth_metrics(got, oracle(ranges))


def test_file_without_any_stats_is_unclustered_not_dropped(tmp_path: Path) -> None:
    location = tmp_path / "nostats"
    no_stats = WriterProperties(column_properties={"k": ColumnProperties(statistics_enabled="NONE")})
    data = pa.table({"a": pa.array([1, 2, 3], pa.int64()), "k": pa.array([3, 1, 2], pa.int64())})
    blind = append(location, data, configuration={"delta.dataSkippingNumIndexedCols": "1"}, writer_properties=no_stats)
    seen = append(location, data)
    blocks = blocks_by_path(location, ["k"])
    assert set(blocks) == {blind, seen}
    assert not blocks[blind].clustered and blocks[blind].rows == 3
    assert blocks[seen].min_values == (1,)
    got = info_dict(location, ["k"])
    assert (got["total_block_count"], got["unclustered_block_count"], got["total_rows"]) == (2, 1, 6)
    assert got["average_depth"] == 1.0


# --- levels and fingerprints from file names ------------------------------------------------------------


def test_blocks_from_actions_levels_and_fingerprints(tmp_path: Path) -> None:
    fingerprint = key_fingerprint(["k"])
    run = new_run_id()
    level_two = data_file_name(2, fingerprint, run)
    constant = "p=x/" + data_file_name(LEVEL_CONSTANT, "0123abcd", run)
    ordinary = "p=x/part-00000-0f6bd5a2-8a4c-4ef4-8a3b-1d6a36fbd4b8-c000.snappy.parquet"
    all_null = "part-00001-0f6bd5a2-8a4c-4ef4-8a3b-1d6a36fbd4b8-c000.snappy.parquet"
    no_stats = "part-00002-no-stats.parquet"
    pq.write_table(pa.table({"k": pa.array([4, 2, 9], pa.int64())}), tmp_path / no_stats, write_statistics=False)

    actions = pa.table(
        {
            "path": [level_two, constant, ordinary, all_null, no_stats],
            "size_bytes": pa.array([100, 200, 300, 400, 500], pa.int64()),
            "num_records": pa.array([10, 20, 30, 5, None], pa.int64()),
            "null_count.k": pa.array([0, 0, 2, 5, None], pa.int64()),
            "min.k": pa.array([1, 7, 3, None, None], pa.int64()),
            "max.k": pa.array([5, 7, 8, None, None], pa.int64()),
            "partition.p": ["y", "x", "x", None, "z"],
        }
    )
    key = ClusterKey((KeyColumn("k", KeyType.INTEGER),))
    blocks = {b.path: b for b in blocks_from_actions(actions, key, ["p"], str(tmp_path))}
    assert list(blocks) == actions.column("path").to_pylist()  # order kept, nothing dropped

    assert (blocks[level_two].level, blocks[level_two].key_fingerprint) == (2, fingerprint)
    assert (blocks[level_two].min_values, blocks[level_two].max_values) == ((1,), (5,))
    assert (blocks[level_two].rows, blocks[level_two].bytes) == (10, 100)
    assert blocks[level_two].partition == (("p", "y"),)

    assert (blocks[constant].level, blocks[constant].key_fingerprint) == (LEVEL_CONSTANT, "0123abcd")
    assert blocks[constant].constant

    assert (blocks[ordinary].level, blocks[ordinary].key_fingerprint) == (0, None)
    assert (blocks[ordinary].min_values, blocks[ordinary].max_values) == ((None,), (8,))

    assert (blocks[all_null].min_values, blocks[all_null].max_values) == ((None,), (None,))
    assert blocks[all_null].clustered and blocks[all_null].partition == (("p", None),)

    # No log stats and no footer stats: unclustered, row count from the footer, never dropped.
    assert not blocks[no_stats].clustered
    assert (blocks[no_stats].rows, blocks[no_stats].bytes, blocks[no_stats].level) == (3, 500, 0)

    # Partition values prefix the keys: the same key range in two partitions is ordered, not overlapping.
    assert blocks[constant].max_key < blocks[level_two].min_key  # "x" before "y" although 7 > 1

    # A list with null counts but no min/max columns at all (every file all NULL): NULL..NULL from the log alone
    # (no footer is read: these paths do not exist).
    only_nulls = actions.select(["path", "size_bytes", "num_records", "null_count.k"]).slice(0, 2)
    only_nulls = only_nulls.set_column(3, "null_count.k", pa.array([10, 20], pa.int64()))
    for block in blocks_from_actions(only_nulls, key, [], str(tmp_path)):
        assert block.clustered and (block.min_values, block.max_values) == ((None,), (None,))


# --- errors ---------------------------------------------------------------------------------------------


def assert_one_line_table_error(match: str, location: str | Path, cluster_by: Sequence[str] | None) -> None:
    with pytest.raises(TableError, match=match) as caught:
        table_info(str(location), settings=SETTINGS, cluster_by=cluster_by)
    message = str(caught.value)
    assert message and "\n" not in message


def test_not_a_delta_table(tmp_path: Path) -> None:
    assert_one_line_table_error("is not a Delta table", tmp_path / "missing", ["k"])
    (tmp_path / "plain").mkdir()
    pq.write_table(pa.table({"k": [1]}), tmp_path / "plain" / "data.parquet")
    assert_one_line_table_error("is not a Delta table", tmp_path / "plain", ["k"])


@pytest.fixture(scope="module")
def nested_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    location = tmp_path_factory.mktemp("nested") / "t"
    data = pa.table(
        {
            "k": pa.array([1, 2], pa.int64()),
            "st": pa.array([{"x": 1}, {"x": 2}]),
            "l": pa.array([[1], [2, 3]]),
            "m": pa.array([[("a", 1)], [("b", 2)]], pa.map_(pa.string(), pa.int64())),
        }
    )
    write_deltalake(str(location), data, mode="append")
    return location


def test_unknown_key_column(nested_table: Path) -> None:
    assert_one_line_table_error(r"unknown key column 'nope' \(table columns: k, st, l, m\)", nested_table, ["nope"])
    assert_one_line_table_error("unknown key column 'nope'", nested_table, ["k", "nope"])


@pytest.mark.parametrize("column", ["st", "l", "m"])
def test_nested_key_column(nested_table: Path, column: str) -> None:
    assert_one_line_table_error(f"key column '{column}' has nested type", nested_table, [column])


def test_nested_columns_do_not_disturb_a_primitive_key(nested_table: Path) -> None:
    got = info_dict(nested_table, ["k"])
    assert (got["total_block_count"], got["total_rows"], got["average_depth"]) == (1, 2, 1.0)


def test_table_without_key(nested_table: Path) -> None:
    assert_one_line_table_error("has no cluster key: pass --cluster-by", nested_table, None)
    assert_one_line_table_error("has no cluster key", nested_table, [])


def test_key_column_listed_twice(nested_table: Path) -> None:
    assert_one_line_table_error("listed twice", nested_table, ["k", "k"])


# --- temporal keys --------------------------------------------------------------------------------------

UTC = dt.UTC


@pytest.mark.parametrize("from_footer", [False, True], ids=["log-stats", "footer"])
def test_timestamps_with_microseconds_and_dates_before_1970(tmp_path: Path, from_footer: bool) -> None:
    location = tmp_path / "temporal"
    batches = [
        (
            [dt.date(1900, 1, 1), dt.date(1969, 12, 31)],
            [dt.datetime(1900, 1, 1, 0, 0, 0, 1, UTC), dt.datetime(1969, 12, 31, 23, 59, 59, 999_999, UTC)],
        ),
        (
            [dt.date(1969, 12, 31), dt.date(1970, 1, 1)],
            [dt.datetime(1969, 12, 31, 23, 59, 59, 999_998, UTC), dt.datetime(1970, 1, 1, 0, 0, 0, 1, UTC)],
        ),
        (
            [dt.date(1970, 1, 2), dt.date(2024, 2, 29)],
            [dt.datetime(1970, 1, 2, 0, 0, 0, 123_456, UTC), dt.datetime(2024, 2, 29, 12, 0, 0, 654_321, UTC)],
        ),
    ]
    expected = {}
    for index, (dates, stamps) in enumerate(batches):
        data = pa.table(
            {
                "x": pa.array([index] * len(dates), pa.int32()),
                "d": pa.array(dates, pa.date32()),
                "ts": pa.array(stamps, pa.timestamp("us", tz="UTC")),
            }
        )
        config = {"delta.dataSkippingNumIndexedCols": "1"} if from_footer and index == 0 else None
        expected[append(location, data, configuration=config)] = (dates, stamps)

    for key in (["d"], ["ts"], ["d", "ts"]):
        result = table_info(str(location), settings=SETTINGS, cluster_by=key)
        blocks = {b.path: b for b in result.snapshot.blocks}
        for path, (dates, stamps) in expected.items():
            block = blocks[path]
            truth = {"d": (min(dates), max(dates)), "ts": (min(stamps), max(stamps))}
            for position, column in enumerate(key):
                low, high = block.min_values[position], block.max_values[position]
                assert low <= high
                if column == "d" or from_footer:
                    assert (low, high) == truth[column]
                else:  # Delta log stats hold milliseconds: allow the truncation, nothing more
                    assert abs(low - truth[column][0]) < dt.timedelta(milliseconds=1)
                    assert abs(high - truth[column][1]) < dt.timedelta(milliseconds=1)
            assert block.min_key <= block.max_key
        ordered = sorted(blocks.values(), key=lambda b: b.min_key)
        assert [b.path for b in ordered] == list(expected)  # batches were written in key order
        got = result.to_dict()
        ranges = [(sort_key(b.min_values), sort_key(b.max_values)) for b in blocks.values()]
        assert_depth_metrics(got, oracle(ranges))
        # batches 1 and 2 overlap at the end of 1969 (on d and on ts), batch 3 is apart
        assert got["average_depth"] == pytest.approx(5 / 3)


# --- empty tables ---------------------------------------------------------------------------------------


EMPTY_EXPECTED = {**EMPTY_METRICS, "levels": {}}


def test_empty_table_created_empty(tmp_path: Path) -> None:
    location = tmp_path / "empty"
    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    write_deltalake(str(location), schema.empty_table(), mode="append")
    assert info_dict(location, ["k"]) == EMPTY_EXPECTED


def test_empty_table_after_delete(tmp_path: Path) -> None:
    location = tmp_path / "deleted"
    append(location, pa.table({"k": [1, 2, 3]}))
    append(location, pa.table({"k": [2, 3, 4]}))
    assert info_dict(location, ["k"])["average_depth"] == 2.0
    DeltaTable(str(location)).delete()
    assert info_dict(location, ["k"]) == EMPTY_EXPECTED


# --- blocks from commit JSON (the streaming path) must equal snapshot blocks -----------------------------


def log_adds(location: Path) -> list[dict[str, Any]]:
    """The `add` actions of every commit file, as the streaming job reads them (raw JSON)."""
    adds = []
    for commit in sorted((location / "_delta_log").glob("*.json")):
        for line in commit.read_text(encoding="utf-8").splitlines():
            action = json.loads(line)
            if "add" in action:
                adds.append(action["add"])
    return adds


def assert_log_blocks_equal_snapshot(location: Path, key: Sequence[str]) -> None:
    from recluster.delta.file_blocks import blocks_from_log_adds

    snapshot = read_snapshot(str(location), settings=SETTINGS, cluster_by=key)
    from_log = blocks_from_log_adds(log_adds(location), snapshot.key, snapshot.partition_columns, snapshot.uri)

    def summary(blocks: Sequence[Any]) -> dict[str, tuple[Any, ...]]:
        return {b.path: (b.rows, b.bytes, b.min_key, b.max_key, b.level, b.partition) for b in blocks}

    assert summary(from_log) == summary(snapshot.blocks)


def test_blocks_from_log_adds_equal_snapshot_blocks(tmp_path: Path) -> None:
    location = tmp_path / "typed"
    for offset in (0, 1):
        data = pa.table(
            {
                "d": pa.array([dt.date(1950 + offset, 1, 1), dt.date(2000, 1, 1)]),
                "ts": pa.array(
                    [dt.datetime(1960, 1, 1, 0, 0, 0, 123_456, UTC), dt.datetime(2020 + offset, 1, 1, tzinfo=UTC)],
                    pa.timestamp("us", "UTC"),
                ),
                "ntz": pa.array([dt.datetime(1969, 12, 31, 23, 59, 59, 999_999), None], pa.timestamp("us")),
                "dec": pa.array([decimal.Decimal("-1.25"), decimal.Decimal(offset)], pa.decimal128(10, 2)),
                "s": ["a", None],
                "i": pa.array([None, None], pa.int64()),
                "f": [1.5, -2.0 - offset],
                "b": [b"a", b"b"],
            }
        )
        append(location, data)
    for key in (["d"], ["ts"], ["ntz"], ["dec"], ["s"], ["i"], ["f"], ["b"], ["d", "ts", "ntz", "dec", "s", "f"]):
        assert_log_blocks_equal_snapshot(location, key)


@pytest.mark.parametrize("footer", [False, True], ids=["log-stats", "footer"])
def test_blocks_from_log_adds_with_escaped_partition_value(tmp_path: Path, footer: bool) -> None:
    location = tmp_path / "escaped"
    config = {"delta.dataSkippingNumIndexedCols": "1"} if footer else None
    data = pa.table({"p": ["a b%/ü"] * 2, "a": [1, 2], "k": [5, 6]})
    append(location, data, partition_by=["p"], configuration=config)
    assert_log_blocks_equal_snapshot(location, ["k"])


def test_blocks_from_log_adds_with_wide_decimal(tmp_path: Path) -> None:
    location = tmp_path / "wide"
    values = [decimal.Decimal("123456789012345678.91"), decimal.Decimal("123456789012345678.99")]
    append(location, pa.table({"dec": pa.array(values, pa.decimal128(38, 2))}))
    snapshot = blocks_by_path(location, ["dec"])
    assert [(b.min_values, b.max_values) for b in snapshot.values()] == [((values[0],), (values[1],))]
    assert_log_blocks_equal_snapshot(location, ["dec"])
