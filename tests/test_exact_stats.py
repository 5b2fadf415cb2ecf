"""Exact statistics (issue 41 item 3): on the files of every write path — FINAL, incremental rounds, a minor optimize,
a keyless compaction and the Spark-task placement — Delta Spark answers each predicate with data skipping and its
Parquet filter pushdown on exactly as a full scan does (nothing to skip by) of the same rows, in a table Delta Spark
alone wrote (one for the file: every write path holds the same rows, checked by their digest).

Delta Spark writes the appends (its own files are read right: a wrong answer is ours), every column type Delta
collects stats for holds its extremes: DECIMAL(38,18) ±99999999999999999999.999999999999999999, -0.0 beside 0.0,
NaN, ±inf, the integer limits, strings sharing a 32-character prefix (one continuing with U+10FFFF), timestamps
with sub-millisecond parts, the first and last dates, NULLs. The predicates hit those values: equality on the
extremes and on either zero, ranges touching them, `>= double('inf')`, `isnan`.
"""

from __future__ import annotations

import decimal
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from recluster.core.block_table import BlockTable
from recluster.core.scheduling import ProcessType
from recluster.delta.file_blocks import blocks_from_log_adds
from recluster.delta.file_stats import delta_stats, parse_stats, stats_text
from recluster.engine.optimizer import optimize_table
from recluster.engine.rounds import recluster_table, snapshot_loader
from recluster.merge.kernel import float_column_options
from recluster.settings import CLUSTER_BY_PROPERTY, Settings
from tests.delta_spark_tables import our_versions
from tests.extreme_values import (
    BATCHES,
    COLUMNS,
    D38_MAX,
    D38_MIN,
    D38_ODD,
    INF,
    NAN,
    ROWS,
    TIMES,
    D,
    P,
    batch,
)
from tests.referee import Referee
from tests.table_shapes import rows_digest

INPUT_FILES = 12
TARGET_ROWS = 40
"""About 15 output files of 600 rows: enough for a value to be in some files and not others."""


def sql_floats(column: str, cast: str) -> list[str]:
    return [
        f"{column} = 0.0",
        f"{column} = {cast}('-0.0')",
        f"{column} IN (0.0, 1.5)",
        f"{column} >= 0.0",
        f"{column} <= {cast}('-0.0')",
        f"{column} > 0.0",
        f"{column} < 0.0",
        f"{column} >= {cast}('inf')",
        f"{column} > {cast}('1e30')",
        f"{column} <= {cast}('-inf')",
        f"{column} = {cast}('NaN')",
        f"isnan({column})",
        f"{column} IS NULL",
    ]


def timestamps(column: str, kind: str) -> list[str]:
    return [
        f"{column} = {kind}'2026-01-01 12:00:00.123456'",
        f"{column} = {kind}'2026-01-01 12:00:00.123999'",
        f"{column} >= {kind}'2026-01-01 12:00:00.999999'",
        f"{column} > {kind}'2026-01-01 12:00:00.123998'",
        f"{column} BETWEEN {kind}'2026-01-01 12:00:00.123457' AND {kind}'2026-01-01 12:00:00.123999'",
        f"{column} <= {kind}'1900-01-01 00:00:00.000001'",
        f"{column} = {kind}'1969-12-31 23:59:59.999999'",
        f"{column} = {kind}'0001-01-01 00:00:00.000001'",
        f"{column} >= {kind}'9999-12-31 23:59:59.999999'",
        f"{column} IS NULL",
    ]


PREDICATES = (
    f"d38 = {D38_MAX}",
    f"d38 = {D38_MIN}",
    f"d38 >= {D38_MAX}",
    f"d38 <= {D38_MIN}",
    f"d38 = {D38_ODD}",
    "d38 > 12345678901234567890.123456789012351674",
    f"d38 BETWEEN {D38_ODD} AND {D38_MAX}",
    "d38 = 0.000000000000000001",
    "d38 = 0",
    "d38 IS NULL",
    "d18 = 999999999999.999999",
    "d18 <= -999999999999.999999",
    "d9 = 9999999.99",
    "d9 = 0.01",
    "d9 <= -9999999.99",
    f"d0 = {10**38 - 1}",
    f"d0 <= {-(10**38) + 1}",
    *sql_floats("f", "double"),
    "f = 1.7976931348623157E308",
    "f = 4.9E-324",
    "r = 0.0",
    "r = float('-0.0')",
    "r >= 0.0",
    "r >= float('inf')",
    "r <= float('-inf')",
    "r = float('NaN')",
    "r = float('3.4028235E38')",
    "i8 = 127",
    "i16 <= -32768",
    "i32 = 2147483647",
    f"i64 = {2**63 - 1}",
    f"i64 <= {-(2**63)}",
    "b = true",
    "b = false",
    f"s = '{P}zzz'",
    f"s = '{P}aaa'",
    f"s = '{P}\U0010ffffx'",
    f"s = '{P}\u00e9'",
    f"s = '{P}'",
    f"s > '{P}'",
    f"s >= '{P}\U0010ffff'",
    f"s LIKE '{P}z%'",
    "s = ''",
    f"s = '{'q' * 40}'",
    "s IS NULL",
    *timestamps("ts", "timestamp"),
    *timestamps("tn", "timestamp_ntz")[::2],
    "dt = date'0001-01-01'",
    "dt = date'9999-12-31'",
    "dt <= date'1969-12-31'",
    "dt >= date'1970-01-01' AND dt < date'1970-01-02'",
    "bin = X'FF'",
    "st.x = 0.0",
    "st.x >= double('inf')",
    "isnan(st.x)",
    f"st.y = '{P}y'",
)


def full_scan(referee: Referee, path: Path) -> list[list[int]]:
    """Every predicate's row ids from one read of every row, the predicates evaluated as columns: nothing to skip
    files or row groups by (Spark's own semantics, as in a WHERE clause)."""
    columns = ", ".join(f"coalesce({p}, false) AS p{n}" for n, p in enumerate(PREDICATES))
    rows = referee.sql(f"SELECT i, {columns} FROM delta.`{path}`")
    return [sorted(row["i"] for row in rows if row[f"p{n}"]) for n in range(len(PREDICATES))]


def filtered_scans(referee: Referee, path: Path) -> tuple[list[list[int]], int]:
    """Every predicate's row ids as a filter, with Delta's data skipping and Spark's Parquet pushdown (both on by
    default), and the files the scans read."""
    queries = " UNION ALL ".join(
        f"SELECT {n} AS q, sort_array(collect_list(i)) AS ids FROM delta.`{path}` WHERE {p}"
        for n, p in enumerate(PREDICATES)
    )
    rows, files = referee.scan(queries)
    by_query = {row["q"]: row["ids"] for row in rows}
    return [by_query[n] for n in range(len(PREDICATES))], files


@dataclass(frozen=True)
class WritePath:
    """How one table's files are written: its cluster key, what runs between the appends and after them."""

    key: str | None
    settings: Settings
    after_append: Callable[[Path, Settings, Any], None] | None = None
    after_all: Callable[[Path, Settings, Any], None] | None = None


def final(path: Path, settings: Settings, spark: Any) -> None:
    loader = snapshot_loader(str(path), settings, None)
    result = recluster_table(str(path), loader, settings=settings, spark_factory=lambda: spark, final=True)
    assert result.totals.failures == 0 and result.totals.files_added > 0, result


def incremental_round(path: Path, settings: Settings, spark: Any) -> None:
    loader = snapshot_loader(str(path), settings, None)
    result = recluster_table(str(path), loader, settings=settings, spark_factory=lambda: spark)
    assert result.totals.failures == 0, result


def minor_optimize(path: Path, settings: Settings, spark: Any) -> None:
    """A minor optimize of the appended files (all fragments), its outputs cut at a quarter of their bytes."""
    sizes = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))["size_bytes"].to_pylist()
    target = sum(sizes) // 4
    optimizing = {"target_size": target, "fragment_ratio": target / (max(sizes) + 1)}
    settings = settings.model_copy(update={"self_optimizing": settings.self_optimizing.model_copy(update=optimizing)})
    loader = snapshot_loader(str(path), settings, None, keyless=True)
    result = optimize_table(loader, settings=settings, spark_factory=lambda: spark, kind=ProcessType.MINOR)
    assert result.totals.failures == 0 and result.totals.files_added >= 3, result


def settings(**merge: Any) -> Settings:
    return Settings(clustering={"target_rows": TARGET_ROWS}, merge=merge)  # type: ignore[arg-type]


WRITE_PATHS = {
    "final": WritePath("d38", settings(), after_all=final),
    "incremental": WritePath("f", settings(), after_append=incremental_round),
    "minor-optimize": WritePath("s", settings(), after_all=minor_optimize),
    "keyless-compaction": WritePath(None, settings(), after_all=minor_optimize),
    "spark-placement": WritePath("ts", settings(in_process_max_bytes=0, placement="spark"), after_all=final),
}


def write_batches(scratch: Path) -> None:
    """The appends' rows, the same for every table of this file (a fixed seed)."""
    rng = np.random.default_rng(41)
    for number in range(BATCHES):
        pq.write_table(batch(rng, number), scratch / f"batch-{number}.parquet")


def write(referee: Referee, path: Path, scratch: Path, how: WritePath, spark: Any) -> None:
    """Delta Spark creates the table and appends the batches (in one commit of INPUT_FILES files when nothing runs
    between them); recluster writes between and after them."""
    key = f" TBLPROPERTIES ('{CLUSTER_BY_PROPERTY}' = '{how.key}')" if how.key else ""
    referee.sql(f"CREATE TABLE delta.`{path}` ({COLUMNS}) USING delta{key}")
    write_batches(scratch)
    if how.after_append is None:
        insert = f"SELECT /*+ REPARTITION({INPUT_FILES}) */ * FROM parquet.`{scratch}/batch-*.parquet`"
        referee.sql(f"INSERT INTO delta.`{path}` {insert}")
    for number in range(BATCHES) if how.after_append is not None else ():
        referee.sql(f"INSERT INTO delta.`{path}` SELECT * FROM parquet.`{scratch}/batch-{number}.parquet`")
        if number:
            how.after_append(path, how.settings, spark)
    if how.after_all is not None:
        how.after_all(path, how.settings, spark)


@dataclass(frozen=True)
class FullScan:
    """The rows every table of this file must hold (their digest) and each predicate's row ids over them, from one
    Delta table of the batches that Delta Spark alone wrote: a table holding the same rows answers the same."""

    digest: str
    answers: list[list[int]]


@pytest.fixture(scope="module")
def full_scan_answers(referee: Referee, tmp_path_factory: pytest.TempPathFactory) -> FullScan:
    scratch = tmp_path_factory.mktemp("full-scan")
    write_batches(scratch)
    path = scratch / "t"
    referee.sql(f"CREATE TABLE delta.`{path}` ({COLUMNS}) USING delta")
    referee.sql(f"INSERT INTO delta.`{path}` SELECT * FROM parquet.`{scratch}/batch-*.parquet`")
    answers = full_scan(referee, path)
    assert all(answers), [p for p, ids in zip(PREDICATES, answers, strict=True) if not ids]  # each matches rows
    return FullScan(rows_digest(referee.read(path)), answers)


def our_live_adds(path: Path) -> list[dict[str, Any]]:
    """The add actions of the live files recluster wrote, as logged."""
    live = set(DeltaTable(str(path)).file_uris())
    adds = []
    for version in our_versions(path, -1):
        lines = (path / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
        adds += [json.loads(line)["add"] for line in lines if '"add"' in line]
    return [add for add in adds if f"file://{path}/{add['path']}" in live or str(path / add["path"]) in live]


def assert_planner_reads_our_ranges(path: Path, how: WritePath, elsewhere: Path) -> None:
    """Every file of ours has its key range from the log, none from its footer (which holds no min/max of a column
    with NaN), both as delta-rs's snapshot and as the commit's JSON give it; a DECIMAL(38,18) range is exact."""
    snapshot = snapshot_loader(str(path), how.settings, None)()
    adds = our_live_adds(path)
    ours = {add["path"] for add in adds}
    table = snapshot.blocks
    assert isinstance(table, BlockTable)
    every = list(table)
    footers = {every[i].path for i in table.stats_overrides}
    assert not ours & footers, sorted(ours & footers)
    # the commit's JSON with the table elsewhere: a footer read would fail
    logged = blocks_from_log_adds(adds, snapshot.key, (), str(elsewhere))
    for blocks in ([b for b in every if b.path in ours], logged):
        assert len(blocks) == len(ours) and all(b.min_key is not None for b in blocks)
        if how.key == "d38":  # (a file with NULLs has no minimum here: they sort first)
            assert max(b.column_range(0)[1] for b in blocks if b.column_range(0)[1] is not None) == D38_MAX
    if how.key == "d38":
        logged = [json.loads(add["stats"], parse_float=decimal.Decimal) for add in adds]
        assert min(stats["minValues"]["d38"] for stats in logged) == D38_MIN
        assert max(stats["maxValues"]["d38"] for stats in logged) == D38_MAX


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("name", list(WRITE_PATHS))
def test_skipping_and_pushdown_answer_like_a_full_scan(
    name: str, referee: Referee, full_scan_answers: FullScan, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    path = tmp_path / "t"
    how = WRITE_PATHS[name]
    spark = request.getfixturevalue("spark") if how.settings.merge.placement == "spark" else None
    write(referee, path, tmp_path, how, spark)

    rows = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))["num_records"].to_pylist()
    ours = sum(json.loads(add["stats"])["numRecords"] for add in our_live_adds(path))
    assert sum(rows) == BATCHES * ROWS and ours >= sum(rows) // 2, (ours, rows)
    if how.key is not None:
        assert_planner_reads_our_ranges(path, how, tmp_path / "elsewhere")
    assert rows_digest(referee.read(path)) == full_scan_answers.digest
    got, files_read = filtered_scans(referee, path)
    expected = full_scan_answers.answers
    wrong = [(p, len(want), len(ids)) for p, want, ids in zip(PREDICATES, expected, got, strict=True) if want != ids]
    assert not wrong, "predicate, rows of a full scan, rows read:\n" + "\n".join(map(str, wrong))
    live = len(DeltaTable(str(path)).file_uris())
    assert files_read < len(PREDICATES) * live  # the stats are there and used


def test_stats_of_the_extremes_in_delta_form_and_read_back_digit_for_digit() -> None:
    table = pa.table(
        {
            "d": pa.array([D38_MIN, D38_ODD, D("1E-18"), None], pa.decimal128(38, 18)),
            "zeros": [0.0, -0.0, 0.0, None],
            "nan": [NAN, -INF, 1.0, None],
            "s": [P + "\U0010ffff" * 2 + "x", P + "\U0010ffff", P + "a", None],
            "ts": pa.array([TIMES[0], TIMES[1], TIMES[4], None], pa.timestamp("us", "UTC")),
            "last": pa.array([TIMES[6], TIMES[0], None, None], pa.timestamp("us")),
        }
    )
    stats = delta_stats(table, table.column_names)
    assert stats["minValues"] == {
        "d": D38_MIN,
        "zeros": -0.0,
        "nan": "-Infinity",
        "s": P,
        "ts": "1969-12-31T23:59:59.999Z",
    }
    assert math.copysign(1, stats["minValues"]["zeros"]) == -1
    assert stats["maxValues"] == {
        "d": D38_ODD,
        "zeros": 0.0,
        "nan": "NaN",
        "s": P + "\U0010ffff" * 3,  # the tie-breaker after the U+10FFFF that follow the prefix: above the x
        "ts": "2026-01-01T12:00:00.124Z",  # .123999 rounded up
    }  # and `last`, whose max 9999-12-31T23:59:59.999999 cannot be rounded up: no range
    assert math.copysign(1, stats["maxValues"]["zeros"]) == 1
    text = stats_text(stats)
    assert f'"d":{D38_MIN}' in text and '"d":12345678901234567890.123456789012351675' in text
    assert stats_text(parse_stats(text)) == text
    again = parse_stats(stats_text({"f": [1e16, 0.1, 1e-300, -0.0]} | {"e": {"x": 1e308}}))
    assert stats_text(again) == '{"f":[1e+16,0.1,1e-300,-0.0],"e":{"x":1e+308}}'


def test_float_columns_with_nan_or_zero_lose_statistics_or_dictionary_in_that_file_only() -> None:
    piece = pa.table(
        {
            "nan": [NAN, 1.0],
            "zero": pa.array([-0.0, 2.0], pa.float32()),
            "plain": [1.0, 2.0],
            "st": pa.array([{"x": 0.0, "y": NAN}, None], pa.struct([("x", pa.float64()), ("y", pa.float64())])),
            "l": pa.array([[NAN, 0.0], []], pa.list_(pa.float64())),
        }
    )
    options = float_column_options(piece, dictionary=True)
    assert options == {
        "write_statistics": ["zero", "plain", "st.x", "l.list.element"],
        "use_dictionary": ["nan", "plain", "st.y", "l.list.element"],
    }
    sink = pa.BufferOutputStream()
    pq.write_table(piece, sink, **options)
    footer = pq.read_metadata(pa.BufferReader(sink.getvalue())).row_group(0)
    columns = {footer.column(i).path_in_schema: footer.column(i) for i in range(footer.num_columns)}
    assert columns["nan"].statistics is None and columns["zero"].statistics.has_min_max
    assert "PLAIN_DICTIONARY" not in columns["zero"].encodings and "RLE_DICTIONARY" not in columns["zero"].encodings
    assert "RLE_DICTIONARY" in columns["plain"].encodings
    assert float_column_options(piece.select(["plain"]), dictionary=True) == {
        "write_statistics": True,
        "use_dictionary": True,
    }
    assert float_column_options(piece, dictionary=False)["use_dictionary"] is False
