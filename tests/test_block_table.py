"""The columnar block table (issue 23) against the per-file derivations it replaces.

`blocks_from_actions` derives every column with Arrow and numpy (file names by Arrow's regex engine, ages, levels,
partitions, key words, first-key positions); `BlockTable.from_blocks` derives the same columns from `Block`s one
by one with the Python helpers (`parse_data_file_name`, `file_age`, `position`). On random file lists both must
agree column by column, and metrics and plans over either must be identical.
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from recluster.core.block_table import NO_HORIZON, BlockTable
from recluster.core.blocks import LEVEL_CONSTANT, age_run_id, data_file_name, parse_data_file_name
from recluster.core.file_columns import column_positions, position
from recluster.core.keys import ClusterKey, KeyColumn, KeyType
from recluster.core.metrics import clustering_info
from recluster.core.selection import select_merge_tasks, time_like_decisions
from recluster.core.selection.plan import Policy, SelectionBounds
from recluster.delta.file_blocks import blocks_from_actions
from recluster.delta.file_names import parse_file_names

FINGERPRINT = "0123abcd"
EPOCH = dt.datetime(2026, 1, 1)


def bounds(policy: Policy) -> SelectionBounds:
    return SelectionBounds(
        depth_ratio=0.1,
        max_depth_threshold=4.0,
        max_task_bytes=5_000,
        max_task_files=6,
        max_tasks=4,
        key_fingerprint=FINGERPRINT,
        policy=policy,
        beta=0.35,
        target_rows=50,
    )


@st.composite
def file_lists(draw: st.DrawFn) -> tuple[pa.Table, ClusterKey, list[str]]:
    """Add actions of every kind of file a table holds: appended, written by `levels` and by `absorb` (with a
    horizon), constant, of another key; keys with NULLs, all-NULL files; partitioned or not; int or timestamp."""
    count = draw(st.integers(1, 30))
    timestamps = draw(st.booleans())
    partitioned = draw(st.booleans())
    paths, rows, sizes, modified, nulls, lows, highs, parts = [], [], [], [], [], [], [], []
    for index in range(count):
        kind = draw(st.sampled_from(["appended", "levels", "absorb", "constant", "other key", "curve", "near miss"]))
        age = 1_000 + draw(st.integers(0, 8)) * 10
        run = age_run_id(age) if kind == "absorb" else f"{index:012x}"
        horizon = age + draw(st.integers(0, 50)) if kind == "absorb" else None
        level = LEVEL_CONSTANT if kind == "constant" else draw(st.integers(0, 3))
        curve = (draw(st.integers(0, 1 << 30)), draw(st.integers(1 << 30, 1 << 39))) if kind == "curve" else None
        if kind == "curve" and draw(st.booleans()):
            horizon = age + 1
        name = (
            f"part-{index:05d}.parquet"
            if kind == "appended"
            else data_file_name(level, "9999eeee" if kind == "other key" else FINGERPRINT, run, horizon, curve)
        )
        if kind == "near miss":  # one character off: not a name recluster wrote
            name = draw(
                st.sampled_from(
                    [
                        f"x{name}",
                        name.replace(".parquet", ".parquex"),
                        name.replace("-k", "-K"),
                        name.upper(),
                        name[:-9] + "g.parquet",
                        name.replace("part-L", "part-Lx"),
                    ]
                )
            )
        partition = draw(st.sampled_from([None, "a", "b"])) if partitioned else None
        paths.append(f"p={partition}/{name}" if partitioned else name)
        low = draw(st.integers(0, 100))
        high = low if kind == "constant" else low + draw(st.integers(0, 30))
        file_rows = draw(st.integers(1, 40))
        null_count = draw(st.sampled_from([0, 0, 0, 1, file_rows]))
        rows.append(file_rows)
        sizes.append(file_rows * 100)
        modified.append(age if kind != "absorb" else draw(st.integers(5_000, 6_000)))
        nulls.append(null_count)
        lows.append(None if null_count == file_rows else low)
        highs.append(None if null_count == file_rows else high)
        parts.append(partition)
    kind: Any = pa.timestamp("us") if timestamps else pa.int64()
    values = (lambda v: None if v is None else EPOCH + dt.timedelta(hours=v)) if timestamps else (lambda v: v)
    columns: dict[str, Any] = {
        "path": paths,
        "size_bytes": pa.array(sizes, pa.int64()),
        "num_records": pa.array(rows, pa.int64()),
        "modification_time": pa.array(modified, pa.int64()),
        "null_count.k": pa.array(nulls, pa.int64()),
        "min.k": pa.array([values(v) for v in lows], kind),
        "max.k": pa.array([values(v) for v in highs], kind),
    }
    if partitioned:
        columns["partition.p"] = parts
    key = ClusterKey((KeyColumn("k", KeyType.TIMESTAMP if timestamps else KeyType.INTEGER),))
    # several chunks, as delta-rs returns a big file list
    table = pa.table(columns)
    return pa.Table.from_batches(table.to_batches(max_chunksize=7)), key, ["p"] if partitioned else []


@settings(max_examples=200, deadline=None)
@given(file_lists())
def test_columns_from_the_log_equal_those_from_blocks(drawn: tuple[pa.Table, ClusterKey, list[str]]) -> None:
    actions, key, partition_columns = drawn
    table = blocks_from_actions(actions, key, partition_columns, "/nowhere")
    blocks = list(table)
    again = BlockTable.from_blocks(blocks)
    assert [b.path for b in blocks] == actions.column("path").to_pylist()
    for block in blocks:
        written = parse_data_file_name(block.path)
        assert block.level == (written.level if written and block.key_fingerprint else 0)
        assert block.key_fingerprint == (written.fingerprint if written else None)
    names = parse_file_names(actions.column("path"))
    for index, path in enumerate(actions.column("path").to_pylist()):
        written = parse_data_file_name(path)
        assert names.fingerprints[names.fingerprint_codes[index]] == (written.fingerprint if written else None), path
        if written is not None:
            assert names.levels[index] == written.level and names.run_numbers[index] == int(written.run_id, 16)
            assert names.horizons[index] == (NO_HORIZON if written.horizon_ms is None else written.horizon_ms)
            assert (names.curve_lows[index], names.curve_highs[index]) == (written.curve_range or (-1, -1)), path
    assert np.array_equal(table.ages, again.ages) and np.array_equal(table.horizons, again.horizons)
    assert np.array_equal(table.levels, again.levels)
    assert [table.partitions[c] for c in table.partition_codes] == [b.partition for b in blocks]
    assert [table.fingerprints[c] for c in table.fingerprint_codes] == [b.key_fingerprint for b in blocks]
    assert np.array_equal(table.clustered, again.clustered) and np.array_equal(table.ranged, again.ranged)
    # words (one number, partitioned or not) or bytes; from Blocks words only unpartitioned
    assert table.min_keys.dtype == again.min_keys.dtype or table.partition_prefixes is not None
    for ours, theirs in zip(table.key_ranks(), again.key_ranks(), strict=True):
        assert np.array_equal(ours, theirs)
    everything, some = np.arange(len(table)), np.arange(len(table))[::2]
    for ours, theirs in zip(
        (*table.first_positions(everything), *table.first_positions(some)),
        (*again.first_positions(everything), *again.first_positions(some)),
        strict=True,
    ):
        assert np.array_equal(ours, theirs, equal_nan=True)
        expected = [position(v) for v in ours]  # the arrays are numbers already: position is the identity
        assert np.array_equal(ours, np.array(expected, dtype=np.float64), equal_nan=True)
    assert clustering_info(table, key).to_dict() == clustering_info(again, key).to_dict()
    for policy in Policy:
        plan = select_merge_tasks("t", 1, table, bounds(policy))
        assert str(plan) == str(select_merge_tasks("t", 1, again, bounds(policy)))
        assert time_like_decisions(table, bounds(policy)) == time_like_decisions(again, bounds(policy))


def test_column_positions_read_values_as_position_does() -> None:
    """Dates, timestamps with and without a zone, decimals, floats: Arrow's numbers equal `position` of the
    Python values a Block holds (a timestamp without a zone counts as UTC on every machine); strings and
    booleans have no position."""
    moment = dt.datetime(2026, 3, 4, 5, 6, 7, 891_011)
    cases: list[tuple[pa.DataType, list[Any]]] = [
        (pa.date32(), [dt.date(2026, 3, 4), None]),
        (pa.timestamp("us"), [moment, None]),
        (pa.timestamp("ms", "UTC"), [moment.replace(microsecond=891_000, tzinfo=dt.UTC), None]),
        (pa.timestamp("s"), [moment.replace(microsecond=0), None]),
        (pa.int32(), [-7, None]),
        (pa.float64(), [1.5, float("nan")]),
        (pa.decimal128(10, 2), [decimal.Decimal("12.34"), None]),
        (pa.string(), ["a", None]),
        (pa.bool_(), [True, None]),
    ]
    for kind, values in cases:
        column = pa.array(values, kind)
        expected = [position(v) for v in column.to_pylist()]
        assert np.array_equal(column_positions(column), expected, equal_nan=True), kind
        assert np.array_equal(column_positions(pa.chunked_array([column])), expected, equal_nan=True), kind


def test_file_names_read_at_fixed_offsets_equal_the_reference_parser() -> None:
    """Every layout (with and without a horizon and a curve range), in directories or not, and names one
    character off in each part of the layout: the vectorized reader says what `parse_data_file_name` says."""
    ours = [
        data_file_name(level, FINGERPRINT, run, horizon, curve)
        for level in (LEVEL_CONSTANT, 0, 7)
        for run in ("000000000005", "abcdef012345")
        for horizon in (None, 0x1234)
        for curve in (None, (0, (1 << 40) - 1))
    ]
    near = [
        variant
        for name in ours
        for variant in (
            "x" + name,
            name[:-1],
            name + "x",
            name.replace("part-L", "part-l"),
            name.replace("-k", "-K"),
            name.replace("-r", "_r"),
            name[:10] + "g" + name[11:],
            name[:-9] + "G.parquet",
            name[:6] + "x" + name[7:],
        )
    ]
    paths = [*ours, *(f"d=1/{n}" for n in ours), *near, *(f"d/{n}" for n in near), "part-00000.parquet", ""]
    names = parse_file_names(pa.chunked_array([pa.array(paths[:40]), pa.array(paths[40:])]))
    for index, path in enumerate(paths):
        written = parse_data_file_name(path)
        assert names.fingerprints[names.fingerprint_codes[index]] == (written.fingerprint if written else None), path
        if written is not None:
            assert names.levels[index] == written.level and names.run_numbers[index] == int(written.run_id, 16)
            assert names.horizons[index] == (NO_HORIZON if written.horizon_ms is None else written.horizon_ms)
            assert (names.curve_lows[index], names.curve_highs[index]) == (written.curve_range or (-1, -1))
    assert sum(parse_data_file_name(p) is not None for p in paths) == 2 * len(ours)  # the near misses are misses
