"""Delta Spark as the other writer (issue 31): the streaming job over every feature's table while Delta Spark
appends; Delta Spark's DELETE/UPDATE/MERGE/OPTIMIZE committed between our merge and our commit, and racing our
commit; tables whose features recluster still refuses, made by Delta Spark itself. After each, Delta Spark reads
exactly the rows of a copy that saw the same writes without recluster (after the appends: the rows before and
those appended).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

import recluster.engine.rounds
from jobs.autorecluster import start_job, stop_gracefully
from recluster.cli import main
from recluster.core.outcomes import CommitStatus
from recluster.engine.rounds import recluster_table, snapshot_loader
from recluster.settings import ClusteringSettings, Settings, TableSettings
from recluster.settings_job import StreamSettings
from tests.delta_spark_tables import DELETION_VECTORS, RECIPES, copy, our_versions, protocol
from tests.helpers import wait_for
from tests.referee import Referee, RefereeError
from tests.table_shapes import rows_digest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

APPENDED = (
    "SELECT id * 37 % 100000 AS a, -id - 1 AS b, 'job' AS {label}, timestamp_seconds(1800000000) AS ts "
    "FROM range({low}, {high}, 1, 2)"
)
"""The rows Delta Spark appends while the job runs (`a`, `b`, the label and `ts`: every job table's columns)."""
APPEND = "INSERT INTO {t} (a, b, {label}, ts) " + APPENDED
BATCHES, BATCH_ROWS = 2, 100


JOB_TABLES = (
    DELETION_VECTORS,
    "column-mapping-name-row-tracking",
    "column-mapping-id-hilbert",
    "liquid-clustering",
)
"""The tables the job watches at once: every feature but those of the plain table (identity, generated and CHECK
columns; a generated partition column), which the other suite takes through the same code."""


def test_the_job_reclusters_the_feature_tables_while_delta_spark_appends(
    sources: Mapping[str, Path], referee: Referee, spark: Any, tmp_path: Path
) -> None:
    tables = {name: copy(sources[name], tmp_path / name) for name in JOB_TABLES}
    before = {name: protocol(path) for name, path in tables.items()}
    start = {name: DeltaTable(str(path)).version() for name, path in tables.items()}
    settings = Settings(
        clustering=ClusteringSettings(target_rows=500),
        stream=StreamSettings(
            checkpoint_location=str(tmp_path / "checkpoint"), trigger_interval_seconds=0.2, starting_version="earliest"
        ),
        tables=[
            TableSettings(uri=str(path), cluster_by=list(RECIPES[name].key) if RECIPES[name].key else None)
            for name, path in tables.items()
        ],
    )
    query, handler = start_job(spark, settings, settings.tables)
    try:
        for batch in range(BATCHES):
            for name, path in tables.items():
                low, high = batch * BATCH_ROWS, (batch + 1) * BATCH_ROWS
                referee.sql(APPEND.format(t=f"delta.`{path}`", label=RECIPES[name].label, low=low, high=high))
        wait_for(lambda: all(our_versions(path, start[name]) for name, path in tables.items()), "a rewrite of each")
        query.processAllAvailable()
    finally:
        stop_gracefully(query, handler)
    errors = {uri: status.error for uri, status in handler.status.items() if status.error or status.failures}
    assert not errors
    for name, path in tables.items():  # the rows of the table before, and those appended
        appended = APPENDED.format(label=RECIPES[name].label, low=0, high=BATCHES * BATCH_ROWS)
        expected = referee.query(f"SELECT * FROM delta.`{sources[name]}` UNION ALL {appended}")
        assert rows_digest(referee.read(path)) == rows_digest(expected), name
        assert protocol(path) == before[name], name
    tracked = tables["column-mapping-name-row-tracking"]  # the rows Delta Spark wrote before the job kept their ids
    original = "SELECT *, _metadata.row_id AS i, _metadata.row_commit_version AS v FROM delta.`{}` WHERE b >= 0"
    assert rows_digest(referee.query(original.format(tracked))) == rows_digest(
        referee.query(original.format(sources["column-mapping-name-row-tracking"]))
    )


DML_TABLE = DELETION_VECTORS
"""The table Delta Spark's statements race ours on: deletion vectors, so theirs add vectors to our inputs."""

THEIRS = {
    "delete": "DELETE FROM {t} WHERE a % 9 = 4",
    "update": "UPDATE {t} SET s = 'theirs' WHERE a % 9 = 5",
    "merge": "MERGE INTO {t} AS target USING (SELECT id * 11 % 100000 AS a FROM range(0, 300)) AS source "
    "ON target.a = source.a WHEN MATCHED THEN UPDATE SET s = 'merged' "
    "WHEN NOT MATCHED THEN INSERT (a, b, s, ts) VALUES (source.a, 1, 'new', timestamp_seconds(1800000000))",
    "optimize": "OPTIMIZE {t}",
}


def between_merge_and_commit(monkeypatch: pytest.MonkeyPatch, change: Any) -> list[CommitStatus]:
    """Run `change` once, between the first merge's write and its commit; returns that commit's outcome."""
    real_commit = recluster.engine.rounds.commit_task
    statuses: list[CommitStatus] = []

    def commit_after_change(*args: Any, **kwargs: Any) -> Any:
        first = not statuses
        ours = change(lambda: real_commit(*args, **kwargs)) if first else real_commit(*args, **kwargs)
        if first:
            statuses.append(ours.status)
        return ours

    monkeypatch.setattr(recluster.engine.rounds, "commit_task", commit_after_change)
    return statuses


@pytest.fixture(scope="module")
def shadow_rows(
    sources: Mapping[str, Path], referee: Referee, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], tuple[int, str]]:
    """The rows Delta Spark reads after a statement of THEIRS on a copy of the DML table that never saw recluster:
    made once a statement, for both tests that check it."""
    made: dict[str, tuple[int, str]] = {}

    def rows_after(statement: str) -> tuple[int, str]:
        if statement not in made:
            shadow = copy(sources[DML_TABLE], tmp_path_factory.mktemp("shadow") / "t")
            referee.sql(THEIRS[statement].format(t=f"delta.`{shadow}`"))
            made[statement] = rows_digest(referee.read(shadow))
        return made[statement]

    return rows_after


def final(path: Path, spark: Any) -> Any:
    settings = Settings(clustering=ClusteringSettings(target_rows=500))
    loader = snapshot_loader(str(path), settings, ["a"])
    return recluster_table(str(path), loader, settings=settings, spark_factory=lambda: spark, final=True)


@pytest.mark.parametrize("statement", list(THEIRS))
def test_delta_spark_dml_committed_between_our_merge_and_commit_wins(
    statement: str,
    sources: Mapping[str, Path],
    referee: Referee,
    spark: Any,
    shadow_rows: Callable[[str], tuple[int, str]],
    tmp_path: Path,
    monkeypatch: Any,
) -> None:
    path = copy(sources[DML_TABLE], tmp_path / "t")

    def theirs_first(commit: Any) -> Any:
        referee.sql(THEIRS[statement].format(t=f"delta.`{path}`"))
        return commit()

    statuses = between_merge_and_commit(monkeypatch, theirs_first)
    result = final(path, spark)
    assert statuses == [CommitStatus.CONFLICT], "their commit touched our inputs: ours must conflict"
    assert result.totals.failures == 0 and result.stop_reason == "within_threshold"  # the next round re-planned
    assert rows_digest(referee.read(path)) == shadow_rows(statement)


@pytest.mark.parametrize("statement", list(THEIRS))
def test_delta_spark_dml_racing_our_commit_is_decided_never_silent(
    statement: str,
    sources: Mapping[str, Path],
    referee: Referee,
    spark: Any,
    shadow_rows: Callable[[str], tuple[int, str]],
    tmp_path: Path,
    monkeypatch: Any,
) -> None:
    """Their statement starts as our commit is written: whichever commits second sees the other. If Delta refuses
    theirs (a concurrent-modification error), it is run again as a user would; it never applies silently twice
    or not at all."""
    path = copy(sources[DML_TABLE], tmp_path / "t")
    refused: list[str] = []

    def racing(commit: Any) -> Any:
        def run() -> None:
            try:
                referee.sql(THEIRS[statement].format(t=f"delta.`{path}`"))
            except RefereeError as error:
                refused.append(str(error))

        thread = threading.Thread(target=run)
        thread.start()
        try:
            return commit()
        finally:
            thread.join()

    between_merge_and_commit(monkeypatch, racing)
    result = final(path, spark)
    assert result.totals.failures == 0
    for error in refused:
        assert "Concurrent" in error or "conflict" in error.lower(), error
        referee.sql(THEIRS[statement].format(t=f"delta.`{path}`"))
    assert rows_digest(referee.read(path)) == shadow_rows(statement)


@pytest.mark.parametrize(
    ("properties", "clauses", "refusal"),
    [
        (
            "'delta.columnMapping.mode' = 'name', 'delta.enableIcebergCompatV2' = 'true'",
            "",
            "unsupported Delta writer features: icebergCompatV2",
        ),
        ("'delta.columnMapping.mode' = 'id'", "PARTITIONED BY (p)", "column mapping mode 'id' on a partitioned table"),
    ],
    ids=["iceberg-compat-v2", "column-mapping-partitioned"],
)
def test_tables_we_refuse_are_refused_in_one_line_and_left_alone(
    properties: str,
    clauses: str,
    refusal: str,
    referee: Referee,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "t"
    referee.sql(f"CREATE TABLE delta.`{path}` (a BIGINT, p INT) USING delta {clauses} TBLPROPERTIES ({properties})")
    for batch in range(3):
        referee.sql(f"INSERT INTO delta.`{path}` SELECT id * 7 % 100, {batch} FROM range(0, 50)")
    commits = sorted((path / "_delta_log").glob("*.json"))
    capsys.readouterr()
    assert main(["run", str(path), "--cluster-by", "a", "--final"]) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and refusal in error[0], error
    assert sorted((path / "_delta_log").glob("*.json")) == commits  # no commit of ours
