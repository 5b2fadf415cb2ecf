"""`recluster advise` on event logs of real Delta Spark runs (docs/advise.md): three applications (zstd rolling
logs, an lz4 single file, a snappy one) query a table clustered on the wrong column, by path and by catalog name,
with known frequencies. The advice ranks the most used column first; once applied and the table reclustered, the
same queries re-run by Delta Spark read fewer files by the factor it predicted (+-25%), and no row changed."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from recluster.core.errors import TableError
from recluster.engine.advise import read_scans, table_uri
from tests.event_log_files import execution, lz4_java, run_spark_applications
from tests.helpers import main_json, row_multiset, run_main
from tests.referee import Referee

pytestmark = [pytest.mark.needs_services, pytest.mark.slow]

ROWS, APPENDS, TARGET_ROWS = 40_000, 20, 2_000


def make_table(path: Path) -> pa.Table:
    """APPENDS appends of random rows: `a` (200 values, what most queries filter on), `b`, `s` and `d`."""
    rng = np.random.default_rng(45)
    pieces = []
    for _ in range(APPENDS):
        rows = ROWS // APPENDS
        piece = pa.table(
            {
                "a": pa.array(rng.integers(0, 200, rows), pa.int64()),
                "b": pa.array(rng.integers(0, 1_000_000, rows), pa.int64()),
                "s": pa.array([f"s{v:03d}" for v in rng.integers(0, 500, rows)]),
                "d": pa.array(rng.integers(19_000, 19_365, rows).astype("int32"), pa.int32()).cast(pa.date32()),
            }
        )
        write_deltalake(str(path), piece, mode="append")
        pieces.append(piece)
    return pa.concat_tables(pieces)


def queries(table: Path) -> list[list[str]]:
    """Per application, its queries: 21 on `a` (equality and IN), 4 ranges on `b`, 2 on `s` (by the catalog name)."""
    by_path = f"delta.`{table}`"
    first = [
        f"SELECT count(*) FROM {by_path} WHERE a = {v}" for v in (3, 17, 44, 90, 121, 150, 199, 7, 60, 133, 171, 88)
    ]
    first += [
        f"SELECT * FROM {by_path} WHERE b BETWEEN {v} AND {v + 20_000}" for v in (1_000, 300_000, 520_000, 900_000)
    ]
    second = [f"CREATE TABLE IF NOT EXISTS events USING delta LOCATION '{table}'"]
    second += [f"SELECT count(*) FROM events WHERE a IN ({v}, {v + 50})" for v in (10, 23, 36, 49, 62, 75)]
    second += ["SELECT * FROM events WHERE s = 's010'", "SELECT * FROM events WHERE s = 's255'"]
    third = [f"SELECT sum(b) FROM {by_path} WHERE a = {v}" for v in (5, 100, 190)]
    return [first, second, third]


def write_event_logs(table: Path, work: Path) -> Path:
    logs = work / "event-logs"
    logs.mkdir()
    codecs = (
        {},  # Spark's default: zstd, rolling event log directories
        {"spark.eventLog.compression.codec": "lz4", "spark.eventLog.rolling.enabled": "false"},
        {"spark.eventLog.compression.codec": "snappy", "spark.eventLog.rolling.enabled": "false"},
    )
    applications = [
        {"conf": {"spark.eventLog.dir": logs.as_uri(), **codec}, "sql": sql}
        for sql, codec in zip(queries(table), codecs, strict=True)
    ]
    run_spark_applications(applications, work)
    return logs


def files_read(referee: Referee, statements: list[str], table: Path) -> int:
    total = 0
    for statement in statements:
        if statement.startswith("SELECT"):
            _, files = referee.scan(statement.replace("FROM events", f"FROM delta.`{table}`"))
            total += files
    return total


def run_command(capsys: pytest.CaptureFixture[str], *arguments: str | Path) -> None:
    """`recluster ARGUMENTS` in this process (no interpreter started per command); it must exit 0."""
    code, _, err = run_main(capsys, *arguments)
    assert code == 0, err


def test_advise_ranks_the_most_used_column_first_and_its_predicted_factor_holds(referee, tmp_path, capsys) -> None:
    table = tmp_path / "events"
    rows = make_table(table)
    settings = ("--set", f"clustering.target_rows={TARGET_ROWS}")
    run_command(capsys, "sql", f"ALTER TABLE '{table}' CLUSTER BY (b)")
    run_command(capsys, "run", table, "--final", *settings)  # clustered on the wrong column
    logs = write_event_logs(table, tmp_path)
    assert {p.suffix for p in logs.rglob("*") if p.is_file()} >= {".zstd", ".lz4", ".snappy"}
    statements = [s for application in queries(table) for s in application]

    advice = main_json(capsys, "advise", logs, "--apply", "--no-cost", *settings)
    assert advice["problems"] == [] and len(advice["tables"]) == 1, advice["problems"]
    found = advice["tables"][0]
    assert found["table"] == str(table) and found["queries"] == 27, found
    assert found["names"] == ["spark_catalog.default.events"]
    assert found["columns"] == {"a": 21, "b": 4, "s": 2}
    assert found["current_key"] == ["b"]
    best = found["candidates"][0]
    assert best["columns"][0] == "a", found["candidates"]  # the column most queries filter on comes first
    assert found["applied"] == best["key"]
    assert found["now_files_read"] == pytest.approx(found["observed_files_read"], rel=0.05)

    before = found["observed_files_read"] * found["queries"]  # Delta Spark's own scan metrics, in the logs
    run_command(capsys, "run", table, "--final", *settings)  # reclustered on the advice
    after = files_read(referee, statements, table)
    measured = before / after
    print(f"files read {before} -> {after}: measured factor {measured:.2f}, predicted {found['predicted_factor']:.2f}")
    assert measured == pytest.approx(found["predicted_factor"], rel=0.25), (before, after, found)
    assert found["predicted_factor"] > 2
    assert row_multiset(DeltaTable(str(table)).to_pyarrow_table()) == row_multiset(rows)


def test_event_logs_under_an_object_store_prefix(s3) -> None:
    """The logs on S3 (moto): a rolling zstd directory and an lz4 file are read, a broken file is one line naming
    its URI, and a prefix with no event log is one clear error."""
    text = "".join(json.dumps(e) + "\n" for e in execution(1, "PreparedDeltaFileIndex(1 paths)[s3a://lake/t]", 3))
    prefix = f"spark-events-{uuid.uuid4().hex[:8]}"
    client = s3.client()
    for key, body in (
        ("eventlog_v2_app-1/events_1_app-1.zstd", pa.compress(text.encode(), "zstd", asbytes=True)),
        ("eventlog_v2_app-1/appstatus_app-1", b""),
        ("app-2.lz4", lz4_java(text.encode())),
        ("app-3", b"{broken"),
    ):
        client.put_object(Bucket=s3.bucket, Key=f"{prefix}/{key}", Body=body)
    location = f"s3://{s3.bucket}/{prefix}"
    scans, problems, files = read_scans([location], s3.options())
    assert files == 3 and [(s.location, s.files_read) for s in scans] == [("s3a://lake/t", 3)] * 2
    assert problems == [f"event log {location}/app-3: cut short at its last line (JSONDecodeError)"]
    assert {table_uri(s.location) for s in scans} == {"s3://lake/t"}
    with pytest.raises(TableError, match="no event log files found"):
        read_scans([f"s3://{s3.bucket}/nothing-here"], s3.options())
