"""Maintenance (vacuum, a checkpoint, log cleanup: recluster/delta/maintenance.py) on the tables Delta Spark wrote,
one per table feature of the interop suite (tests/delta_spark_tables.py), after recluster rewrote them and Delta
Spark deleted rows on top (live files with a new deletion vector next to the remove of the same file). Then Delta
Spark, on a fresh copy (it reads our checkpoint, not a snapshot it cached), reads the same rows, shows the history,
reads the version maintenance ran at, writes (INSERT, DELETE) with its change feed, and restores that version.
A feature a step was not checked with, or is known to be wrong for, has that step refused (docs/guarantees.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from deltalake import DeltaTable, TableFeatures

from recluster.cli import main
from recluster.core.scheduling import ProcessStatus, ProcessType
from recluster.delta.maintenance import maintain_table
from recluster.delta.maintenance_steps import MaintenanceStep, RefusalReason
from recluster.delta.replay import replay_log
from recluster.settings_optimizing import MaintenanceSettings
from tests.delta_spark_tables import DELETION_VECTORS, PLAIN, RECIPES, Recipe, copy, protocol, rows, settings_for
from tests.helpers import handler_with_tables, run_rounds
from tests.referee import Referee

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SHORT_RETENTION = (
    "ALTER TABLE {t} SET TBLPROPERTIES ('delta.deletedFileRetentionDuration' = 'interval 0 hours', "
    "'delta.logRetentionDuration' = 'interval 0 hours', 'delta.checkpointInterval' = '100')"
)
"""Removed files and old commits expire at once (so this pass has something to vacuum and clean up), and Delta Spark
writes no checkpoint of its own meanwhile (one would drop the expired removes vacuum plans from)."""

EVERY_PASS = MaintenanceSettings(retention_hours=0, checkpoint_every_versions=1, orphan_safety_age_seconds=0)

TIME_TRAVEL_CHECK = "spark.databricks.delta.vacuum.enforceTimeTravelWithinDeletedFileRetentionDuration"
"""Delta Spark refuses any time travel older than delta.deletedFileRetentionDuration (0 here); the versions read
back are those maintenance kept whole."""


@pytest.fixture
def past_retention(referee: Referee) -> Iterator[Referee]:
    referee.sql(f"SET {TIME_TRAVEL_CHECK} = false")
    yield referee
    referee.sql(f"RESET {TIME_TRAVEL_CHECK}")


def left_by_our_vacuum(location: str) -> bool:
    """What Delta Spark's VACUUM may still delete after ours: files no remove names (deletion vectors no live file
    has, change data files), which delta-rs's lite plan never lists, and directories ours emptied (but for the
    hidden checksum files Hadoop's local file system writes beside Delta Spark's files)."""
    path = Path(location.removeprefix("file:"))
    emptied = path.is_dir() and all(child.name.startswith(".") for child in path.iterdir())
    return emptied or path.name.startswith(("deletion_vector_", "cdc-"))


def rewritten(source: Path, target: Path, recipe: Recipe) -> Path:
    """A copy of the recipe's table after a FINAL recluster run (its removes are what vacuum expires)."""
    path = copy(source, target)
    settings = settings_for(recipe)
    result = run_rounds(path, None, settings, list(recipe.key) if recipe.key else None, final=True)
    assert result.totals.files_added > 0 and result.totals.failures == 0, result
    return path


def commits(path: Path) -> list[int]:
    """Versions with a commit file (`<v>.json`; a v2 checkpoint `<v>.checkpoint.<uuid>.json` is none)."""
    return sorted(int(f.stem) for f in (path / "_delta_log").glob("*.json") if f.stem.isdigit())


def live_files(path: Path) -> set[str]:
    """Data files and deletion vector files the current version reads (relative to the table root)."""
    table = DeltaTable(str(path))
    data = {uri.removeprefix(f"file://{path}/").removeprefix(f"{path}/") for uri in table.file_uris()}
    vectors = replay_log(str(path), None, table.version()).deletion_vectors.values()
    return data | {vector.file_path() for vector in vectors if vector.storage_type == "u"}


MORE_FEATURES = f"{DELETION_VECTORS}+timestampNtz+vacuumProtocolCheck+allowColumnDefaults"
"""The deletion vector table with the other features recluster rewrites: a TIMESTAMP_NTZ column holding values."""

ADDING_MORE_FEATURES = (
    "ALTER TABLE {t} SET TBLPROPERTIES ('delta.feature.vacuumProtocolCheck' = 'supported', "
    "'delta.feature.allowColumnDefaults' = 'supported', 'delta.feature.timestampNtz' = 'supported')",
    "ALTER TABLE {t} ADD COLUMN local TIMESTAMP_NTZ",
    "UPDATE {t} SET local = CAST(ts AS TIMESTAMP_NTZ) WHERE a % 3 = 0",
)


@pytest.mark.parametrize("case", [*RECIPES, MORE_FEATURES], ids=str)
def test_maintenance_keeps_every_feature_table_whole_for_delta_spark(
    case: str, sources: Mapping[str, Path], past_retention: Referee, tmp_path: Path
) -> None:
    feature = case.split("+")[0]
    referee, recipe = past_retention, RECIPES[feature]
    path = rewritten(sources[feature], tmp_path / "t", recipe)
    target, label = f"delta.`{path}`", recipe.label
    for statement in (SHORT_RETENTION, *(ADDING_MORE_FEATURES if case == MORE_FEATURES else ())):
        referee.sql(statement.format(t=target))
    assert set(case.split("+")[1:]) <= set(protocol(path)[3])
    referee.sql(f"DELETE FROM {target} WHERE a % 7 = 3")
    before, version, expected = protocol(path), DeltaTable(str(path)).version(), rows(referee, path, recipe)
    live, logged = live_files(path), replay_log(str(path), None, version)
    vectors = {kept for kept in live if Path(kept).name.startswith("deletion_vector_")}
    if vectors:  # delta-rs's full plan would delete them: vacuum never runs it
        full = DeltaTable(str(path)).vacuum(
            retention_hours=0, enforce_retention_duration=False, dry_run=True, full=True
        )
        assert vectors & set(full)

    result = maintain_table(str(path), EVERY_PASS)

    assert result.refused == () and result.version == version, result
    assert result.vacuumed and not live & set(result.vacuumed), result.vacuumed
    assert not any((path / gone).exists() for gone in result.vacuumed)
    assert all((path / kept).exists() for kept in live)  # deletion vector files of live files too
    assert (
        result.checkpoint_version == version and (path / "_delta_log" / f"{version:020d}.checkpoint.parquet").exists()
    )
    assert result.log_cleaned and commits(path) == [version]
    assert replay_log(str(path), None, version) == logged  # now read from our checkpoint alone
    assert protocol(path) == before
    again = maintain_table(str(path), EVERY_PASS)  # the next pass starts from what this one left
    assert again.vacuumed == () and again.orphans.oldest_version == version, again

    fresh = copy(path, tmp_path / "fresh")  # a path Delta Spark never read: it starts from our checkpoint
    fresh_target = f"delta.`{fresh}`"
    left = [row["path"] for row in referee.sql(f"VACUUM {fresh_target} RETAIN 0 HOURS DRY RUN")]
    assert all(map(left_by_our_vacuum, left)), left  # no data file
    assert rows(referee, fresh, recipe) == expected
    assert referee.history(fresh)[0]["version"] == version
    referee.sql(
        f"INSERT INTO {fresh_target} (a, b, {label}, ts) SELECT id, -id - 1, 'after', "
        "timestamp_seconds(1800000000) FROM range(0, 300)"
    )
    referee.sql(f"DELETE FROM {fresh_target} WHERE a % 5 = 4")
    changes = referee.sql(
        f"SELECT _change_type AS kind, count(*) AS n FROM table_changes_by_path('{fresh}', {version + 1}, "
        f"{version + 2}) GROUP BY _change_type"
    )
    assert {c["kind"] for c in changes} >= {"insert", "delete"}, changes
    assert rows(referee, fresh, recipe, version) == expected
    referee.sql(f"RESTORE TABLE {fresh_target} TO VERSION AS OF {version}")
    assert rows(referee, fresh, recipe) == expected


def test_log_cleanup_is_refused_on_a_table_with_checkpoint_protection(
    sources: Mapping[str, Path], past_retention: Referee, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Delta Spark's DROP FEATURE protects the history before it (writer feature checkpointProtection), which
    delta-rs's log cleanup ignores: vacuum and a checkpoint run, log cleanup is refused."""
    feature = DELETION_VECTORS
    referee, recipe = past_retention, RECIPES[feature]
    path = rewritten(sources[feature], tmp_path / "t", recipe)
    target = f"delta.`{path}`"
    referee.sql(f"ALTER TABLE {target} DROP FEATURE deletionVectors")
    referee.sql(SHORT_RETENTION.format(t=target))
    assert "checkpointProtection" in protocol(path)[3]
    version, expected, kept = DeltaTable(str(path)).version(), rows(referee, path, recipe), commits(path)
    every_pass = ("--set", "self_optimizing.maintenance.retention_hours=0")
    every_pass += ("--set", "self_optimizing.maintenance.checkpoint_every_versions=1")

    assert main(["maintain", str(path), *every_pass]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert "log_cleanup refused: checkpoint_protection (checkpointProtection)" in printed, printed
    assert "checkpoint: version" in printed[0] and "log cleanup: refused" in printed[0], printed
    assert commits(path) == kept  # every commit kept
    assert (path / "_delta_log" / f"{version:020d}.checkpoint.parquet").exists()
    fresh = copy(path, tmp_path / "fresh")
    assert rows(referee, fresh, recipe) == expected
    assert [entry["version"] for entry in referee.history(fresh)] == kept[::-1]


def test_vacuum_of_a_shallow_clone_never_touches_the_files_of_its_source(
    sources: Mapping[str, Path], referee: Referee, tmp_path: Path
) -> None:
    """A shallow clone's removes name its source's files by absolute path; delta-rs plans them for vacuum."""
    recipe = RECIPES[PLAIN]  # no deletion vectors: the clone's DELETE removes files of its source
    source = copy(sources[PLAIN], tmp_path / "source")
    clone = tmp_path / "clone"
    referee.sql(f"CREATE TABLE delta.`{clone}` SHALLOW CLONE delta.`{source}`")
    referee.sql(f"DELETE FROM delta.`{clone}` WHERE a % 3 = 0")
    referee.sql(SHORT_RETENTION.format(t=f"delta.`{clone}`"))
    planned = DeltaTable(str(clone)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=True)
    assert any(str(source) in path for path in planned)  # what delta-rs would report as vacuumed
    files = sorted(source.rglob("*.parquet"))
    expected = rows(referee, source, recipe)

    result = maintain_table(str(clone), EVERY_PASS)

    assert result.vacuumed == () and result.refused == ()
    assert sorted(source.rglob("*.parquet")) == files
    assert rows(referee, copy(source, tmp_path / "fresh"), recipe) == expected


def test_every_step_is_refused_on_a_feature_never_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No Delta Spark: delta-rs adds a writer feature recluster does not know (icebergCompatV1) to a job's table;
    the job's maintenance record and `recluster maintain` say what was refused and why, and nothing is touched."""
    handler = handler_with_tables(tmp_path, 1, appends=2)
    (uri,) = handler.tracked
    DeltaTable(uri).alter.add_feature(TableFeatures.IcebergCompatV1, allow_protocol_versions_increase=True)
    stored = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file() and uri in str(p))

    assert main(["maintain", uri, "--json", "--set", "self_optimizing.maintenance.retention_hours=0"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(r["step"], r["reason"], r["features"]) for r in report["refused"]] == [
        (str(step), str(RefusalReason.UNCHECKED_FEATURE), ["icebergCompatV1"]) for step in MaintenanceStep
    ]
    assert report["checkpoint_version"] is None and not report["log_cleaned"] and report["vacuumed_files"] == []

    handler.tick()
    assert handler.history is not None
    (done,) = [r for r in handler.history.records() if r.type is ProcessType.MAINTENANCE and r.end is not None]
    assert done.status is ProcessStatus.SUCCESS and done.detail is not None
    assert done.detail.split("; ") == [
        f"{step} refused: unchecked_feature (icebergCompatV1)" for step in MaintenanceStep
    ]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file() and uri in str(p)) == stored
