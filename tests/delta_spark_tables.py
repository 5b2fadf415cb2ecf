"""Tables as Delta Spark 4.4 writes them, with every table feature of issue 31, made by the referee (tests/referee)
with SQL only.

Every table has the change data feed on (so `table_changes` can show what our commits changed: nothing) and holds
about 10,000 rows in a few dozen files with random keys `a`, `b` (0..99,999), a string and a timestamp.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from recluster.settings import ClusteringSettings, Settings
from tests.referee import Referee
from tests.table_shapes import rows_digest

ROWS_PER_INSERT = 2_500
INSERTS = 4
KEY_DOMAIN = 100_000


@dataclass(frozen=True)
class Recipe:
    """How a feature's table is made: CREATE TABLE's extra clauses, statements between and after the inserts."""

    name: str
    properties: dict[str, str] = field(default_factory=dict)
    extra_columns: str = ""
    clauses: str = ""
    between: tuple[str, ...] = ()
    """Run after the second insert (later inserts name the columns as they are then)."""
    after: tuple[str, ...] = ()
    key: tuple[str, ...] | None = ("a",)
    """What recluster is told to cluster by (None: the table's own clustering columns)."""
    label: str = "s"
    """The string column's name after `between` (a rename changes it)."""
    value_type: str = "BIGINT"
    """The type of `a` at CREATE (type widening starts narrower)."""
    target_rows: int = 500
    """recluster's file target: about 20 files from the 10,000 rows, enough for a predicate on one key to prune
    (two key columns on a curve need more files for each column to prune as well: ~1.3/sqrt(files) of them)."""


DELETION_VECTORS = "deletion-vectors-cdf-ict-v2-checkpoints-type-widening"
"""The recipe with deletion vectors (and the change data feed, in-commit timestamps, v2 checkpoints, type widening)."""
PLAIN = "identity-generated-partition-check-constraint"
"""The recipe without deletion vectors or column mapping: DELETE rewrites its files."""

DML = (
    "DELETE FROM {t} WHERE a % 10 = 0",
    "UPDATE {t} SET {label} = concat({label}, '-u') WHERE a % 10 = 1",
    "MERGE INTO {t} AS target USING (SELECT id * 31 % 100000 AS a, id AS b FROM range(0, 2000)) AS source "
    "ON target.a = source.a WHEN MATCHED AND target.a % 10 = 2 THEN UPDATE SET {label} = 'merged' "
    "WHEN NOT MATCHED AND source.b % 20 = 0 THEN INSERT (a, b, {label}, ts) "
    "VALUES (source.a, source.b, 'new', timestamp_seconds(1700000000))",
)


RECIPES = {
    recipe.name: recipe
    for recipe in (
        # Features combine as on current Delta/Databricks tables: five tables cover every feature of issue 31 (fewer
        # tables, fewer of the referee's statements: each costs about a second of its CPU, docs/getting-started.md).
        Recipe(
            "deletion-vectors-cdf-ict-v2-checkpoints-type-widening",
            {
                "delta.enableDeletionVectors": "true",
                "delta.enableInCommitTimestamps": "true",
                "delta.checkpointPolicy": "v2",
                "delta.checkpointInterval": "2",
                "delta.enableTypeWidening": "true",
            },
            between=("ALTER TABLE {t} ALTER COLUMN a TYPE BIGINT",),
            after=DML,
            value_type="INT",
        ),
        Recipe(
            "identity-generated-partition-check-constraint",
            extra_columns=", id BIGINT GENERATED ALWAYS AS IDENTITY, day DATE GENERATED ALWAYS AS (CAST(ts AS DATE))",
            clauses="PARTITIONED BY (day)",
            between=("ALTER TABLE {t} ADD CONSTRAINT a_in_domain CHECK (a >= 0)",),
        ),
        Recipe(
            "column-mapping-name-row-tracking",
            {
                "delta.columnMapping.mode": "name",
                "delta.enableRowTracking": "true",
                "delta.enableDeletionVectors": "true",
            },
            extra_columns=", dropped STRING",
            between=("ALTER TABLE {t} RENAME COLUMN s TO label", "ALTER TABLE {t} DROP COLUMN dropped"),
            after=DML,
            label="label",
        ),
        Recipe(
            "column-mapping-id-hilbert",
            {"delta.columnMapping.mode": "id"},
            extra_columns=", dropped STRING",
            between=("ALTER TABLE {t} RENAME COLUMN s TO label", "ALTER TABLE {t} DROP COLUMN dropped"),
            label="label",
            key=("a", "b"),  # a Hilbert curve: its range bounds are sampled from the files by physical names
            target_rows=150,
        ),
        Recipe(
            "liquid-clustering",
            # row tracking as on Databricks' liquid tables; a checkpoint at version 3, before the DELETE at 5
            # (tests/test_log_state.py replays from the one `_last_checkpoint` names)
            {"delta.enableDeletionVectors": "true", "delta.enableRowTracking": "true", "delta.checkpointInterval": "3"},
            clauses="CLUSTER BY (a, b)",
            after=DML[:1],
            key=None,
            target_rows=150,
        ),
    )
}


def insert(recipe: Recipe, target: str, batch: int, label: str) -> str:
    low, high = batch * ROWS_PER_INSERT, (batch + 1) * ROWS_PER_INSERT
    return (
        f"INSERT INTO {target} (a, b, {label}, ts) SELECT CAST(id * 7919 % {KEY_DOMAIN} AS {recipe.value_type}), "
        f"id * 104729 % {KEY_DOMAIN}, concat('s', id), timestamp_seconds(1700000000 + id * 6) "
        f"FROM range({low}, {high}, 1, 2)"
    )


def write_table(referee: Referee, location: Path, recipe: Recipe) -> str:
    """Make the recipe's table at `location` with Delta Spark; returns its SQL name."""
    target = f"delta.`{location}`"
    properties = {"delta.enableChangeDataFeed": "true", **recipe.properties}
    listed = ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
    referee.sql(
        f"CREATE TABLE {target} (a {recipe.value_type}, b BIGINT, s STRING, ts TIMESTAMP{recipe.extra_columns}) "
        f"USING delta {recipe.clauses} TBLPROPERTIES ({listed})"
    )
    label = "s"
    for batch in range(INSERTS):
        if batch == INSERTS // 2:
            for statement in recipe.between:
                referee.sql(statement.format(t=target))
            label = recipe.label
        referee.sql(insert(recipe, target, batch, label))
    for statement in recipe.after:
        referee.sql(statement.format(t=target, label=label))
    return target


class FeatureTables(Mapping[str, Path]):
    """Every recipe's table, each written once a run when a test first asks for it: under pytest-xdist the first
    worker to ask writes it into the run's directory while a worker asking for the same one waits on its lock, and
    every worker's tests copy them (none changes them). Written when asked, not all five at once: a test run alone
    (`pytest tests/test_delta_spark.py -k liquid`) waits for its own table only."""

    def __init__(self, referee: Referee, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.referee = referee
        if os.environ.get("PYTEST_XDIST_WORKER") is None:
            self.root = tmp_path_factory.mktemp("delta-spark-tables")
        else:  # each worker's base directory is <the run's>/<worker id>
            self.root = tmp_path_factory.getbasetemp().parent / "delta-spark-tables"
            self.root.mkdir(exist_ok=True)

    def __getitem__(self, name: str) -> Path:
        recipe, location = RECIPES[name], self.root / name
        written = self.root / f"{name}.written"
        with open(self.root / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes, also when writing fails
            if not written.exists():
                shutil.rmtree(location, ignore_errors=True)  # left half-written by a worker that failed
                write_table(self.referee, location, recipe)
                written.touch()
        return location

    def __iter__(self) -> Iterator[str]:
        return iter(RECIPES)

    def __len__(self) -> int:
        return len(RECIPES)


def settings_for(recipe: Recipe) -> Settings:
    return Settings(clustering=ClusteringSettings(target_rows=recipe.target_rows))


def copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def protocol(path: Path) -> tuple[Any, ...]:
    table = DeltaTable(str(path))
    found = table.protocol()
    return (
        found.min_reader_version,
        found.min_writer_version,
        sorted(found.reader_features or []),
        sorted(found.writer_features or []),
    )


ROW_TRACKING_COLUMNS = ("row_id", "row_commit_version")


def read_rows(referee: Referee, path: Path, recipe: Recipe, version: int | None = None) -> pa.Table:
    """The rows Delta Spark reads; with row tracking each row's id and commit version too (ROW_TRACKING_COLUMNS)."""
    source = f"delta.`{path}`" + ("" if version is None else f" VERSION AS OF {version}")
    tracked = recipe.properties.get("delta.enableRowTracking") == "true"
    extra = "".join(f", _metadata.{column} AS {column}" for column in ROW_TRACKING_COLUMNS) if tracked else ""
    return referee.query(f"SELECT *{extra} FROM {source}")


def rows(referee: Referee, path: Path, recipe: Recipe, version: int | None = None) -> tuple[int, str]:
    """The multiset of rows Delta Spark reads; with row tracking each row's id and commit version too."""
    return rows_digest(read_rows(referee, path, recipe, version))


def our_versions(path: Path, after: int) -> list[int]:
    """The versions after `after` that recluster committed, each checked to rewrite only (dataChange=false)."""
    versions = []
    for log_file in sorted((path / "_delta_log").glob("*.json")):
        if not log_file.stem.isdigit() or int(log_file.stem) <= after:
            continue
        actions = [json.loads(line) for line in log_file.read_text().splitlines() if line.strip()]
        info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
        if info.get("recluster.producer") != "recluster":
            continue
        for action in actions:
            for kind in ("add", "remove"):
                if kind in action:
                    assert action[kind]["dataChange"] is False, action
        versions.append(int(log_file.stem))
    return versions
