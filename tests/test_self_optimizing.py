"""Self-optimizing end to end on real tables: the job's minor optimizing, disabled tables, `recluster
optimize/status/maintain`, full optimizing of partitions, vacuum and time travel, FAIR pools."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from recluster.core.metrics import clustering_info
from recluster.core.scheduling import ProcessStatus, ProcessType
from recluster.delta.history import records_from_arrow
from recluster.delta.log_writer import set_table_properties
from recluster.delta.maintenance import maintain_table
from recluster.engine.api import read_snapshot
from recluster.settings import CLUSTER_BY_PROPERTY, Settings, history_location
from recluster.settings_optimizing import MaintenanceSettings, SelfOptimizingSettings
from tests.helpers import (
    job_settings,
    main_json,
    maintained_at_once,
    recluster_commits,
    row_multiset,
    run_main,
    running_job,
    timelike_append,
)

pytestmark = pytest.mark.spark

SMALL = {
    "self-optimizing.target-size": str(256 * 1024),
    "self-optimizing.minor.trigger.file-count": "4",
}
"""Fragments below 32 KiB, minor at 4 of them: tiny test appends behave like a stream of small files."""


def test_job_compacts_small_appends_and_leaves_disabled_tables_alone(tmp_path, spark):
    small, off = tmp_path / "small", tmp_path / "off"
    disabled = {**SMALL, "self-optimizing.enabled": "false", "recluster.enabled": "false"}
    appended: dict[Path, list[pa.Table]] = {small: [timelike_append(small, 0, properties=SMALL)], off: []}
    appended[off].append(timelike_append(off, 0, properties=disabled))
    settings = maintained_at_once(job_settings(tmp_path / "checkpoint", [small, off]))
    most_files = 0
    with running_job(spark, settings) as (query, handler):
        for batch in range(1, 13):
            for path in (small, off):
                appended[path].append(timelike_append(path, batch))
            query.processAllAvailable()
            most_files = max(most_files, len(DeltaTable(str(small)).file_uris()))
        handler.tick()  # time-based triggers run too, without new commits
    # minor at 4 fragments: the file count never grows past the trigger plus the append of one batch
    assert most_files <= 5
    assert len(DeltaTable(str(small)).file_uris()) < 13 / 2
    assert recluster_commits(small) and not recluster_commits(off)  # the disabled table was never rewritten
    assert len(DeltaTable(str(off)).file_uris()) == 13
    for path in (small, off):
        assert row_multiset(DeltaTable(str(path)).to_pyarrow_table()) == row_multiset(pa.concat_tables(appended[path]))
    history = records_from_arrow(DeltaTable(history_location(settings)).to_pyarrow_table())
    minors = [r for r in history if r.type is ProcessType.MINOR and r.status is ProcessStatus.SUCCESS]
    assert minors and all(r.table == str(small) and r.files_in >= 2 and r.files_out >= 1 for r in minors)
    assert max(r.files_in for r in minors) >= 4
    assert not [r for r in history if r.table == str(off)]
    # the tick also ran scheduled maintenance: the enabled table only, and compacted the history table itself
    maintained = [r for r in history if r.type is ProcessType.MAINTENANCE and r.status is ProcessStatus.SUCCESS]
    assert [r.table for r in maintained] == [str(small)]
    assert len(DeltaTable(history_location(settings)).file_uris()) == 1
    # compacted outputs stay one sorted run at level 0: depth 1 whatever the file count
    info = clustering_info(read_snapshot(str(small), settings=settings).blocks)
    assert info.table.average_depth == pytest.approx(1.0)


def test_turning_a_table_off_takes_effect_at_the_next_batch(tmp_path, spark):
    path = tmp_path / "t"
    appended = [timelike_append(path, 0, properties=SMALL)]
    settings = job_settings(tmp_path / "checkpoint", [path])
    with running_job(spark, settings) as (query, _):
        set_table_properties(path, {"self-optimizing.enabled": "false"})
        query.processAllAvailable()
        for batch in range(1, 9):
            appended.append(timelike_append(path, batch))
            query.processAllAvailable()
    assert not recluster_commits(path)
    assert row_multiset(DeltaTable(str(path)).to_pyarrow_table()) == row_multiset(pa.concat_tables(appended))


def test_optimize_and_status_commands(tmp_path, spark, capsys):
    path = tmp_path / "t"
    appended = [timelike_append(path, b, rows=300, properties=SMALL) for b in range(8)]
    config = ["--set", f"self_optimizing.history_location={tmp_path / 'history'}"]
    (before,) = main_json(capsys, "status", path, *config)
    assert (before["state"], before["pending"], before["pending_reason"]) == ("pending", "minor", "fragment_count")
    assert before["health"]["fragments"] == 8 and before["last"] == {}

    planned = main_json(capsys, "optimize", path, "--dry-run", *config)
    assert planned["outcome"] == "dry_run" and "minor_optimizing" in planned["plan"]
    assert not recluster_commits(path)

    done = main_json(capsys, "optimize", path, *config)
    assert (done["type"], done["outcome"], done["files_removed"]) == ("minor", "done", 8)
    assert done["after"]["fragments"] < 8
    assert row_multiset(DeltaTable(str(path)).to_pyarrow_table()) == row_multiset(pa.concat_tables(appended))

    (after,) = main_json(capsys, "status", path, *config)
    assert after["state"] == "idle" and "minor" in after["last"] and after["quota_occupation"] > 0

    nothing = main_json(capsys, "optimize", path, *config)
    assert nothing["outcome"] == "nothing_due"

    set_table_properties(path, {"self-optimizing.enabled": "false", "recluster.enabled": "false"})
    (off,) = main_json(capsys, "status", path, *config)
    assert off["state"] == "disabled"
    assert main_json(capsys, "optimize", path, "--type", "full", *config)["outcome"] == "disabled"

    set_table_properties(path, {"self-optimizing.quota": "lots"})
    code, _, err = run_main(capsys, "status", path, *config)
    assert code == 2
    assert "self-optimizing.quota='lots'" in err
    assert main_json(capsys, "status") == []  # no tables: an empty list for scripts


def test_full_rewrites_each_partition_as_one_sorted_run(tmp_path, spark, capsys):
    path = tmp_path / "p"
    rng = np.random.default_rng(5)
    appended = []
    for _ in range(6):
        data = pa.table(
            {
                "k": pa.array(rng.integers(0, 10**6, 500), pa.int64()),
                "region": pa.array(rng.choice(["eu", "us", None], 500)),
            }
        )
        write_deltalake(str(path), data, mode="append", partition_by=["region"])
        appended.append(data)
    set_table_properties(path, {CLUSTER_BY_PROPERTY: "k"})
    done = main_json(capsys, "optimize", path, "--type", "full", "--set", f"stream.checkpoint_location={tmp_path}")
    assert done["outcome"] == "done" and done["failures"] == 0
    snapshot = read_snapshot(str(path), settings=Settings())
    assert len(snapshot.blocks) == 3  # one file per partition (eu, us, NULL)
    assert clustering_info(snapshot.blocks).table.average_depth == 1.0
    assert row_multiset(DeltaTable(str(path)).to_pyarrow_table()) == row_multiset(pa.concat_tables(appended))


def test_vacuum_keeps_every_file_of_retained_versions(tmp_path, spark, capsys):
    path = tmp_path / "v"
    appended = [timelike_append(path, b, rows=200) for b in range(4)]
    rng = np.random.default_rng(3)
    for b in range(4, 7):  # overlapping appends, then a FINAL recluster removes files
        data = pa.table(
            {"k": pa.array(rng.integers(0, 1400, 200), pa.int64()), "batch": pa.array([b] * 200, pa.int32())}
        )
        write_deltalake(str(path), data, mode="append")
        appended.append(data)
    assert run_main(capsys, "run", path, "--final")[0] == 0
    latest = DeltaTable(str(path)).version()
    expected = {v: row_multiset(DeltaTable(str(path), version=v).to_pyarrow_table()) for v in range(latest + 1)}

    # Asked for no retention at all: the table's own (default 7 days) wins; nothing reachable is deleted.
    kept = maintain_table(str(path), MaintenanceSettings(retention_hours=0, checkpoint_every_versions=1))
    assert kept.retention_hours == 168.0 and kept.vacuumed == ()
    assert kept.checkpoint_version == latest
    for version, rows in expected.items():
        assert row_multiset(DeltaTable(str(path), version=version).to_pyarrow_table()) == rows

    # The table itself allows expiring removed files at once: vacuum deletes exactly the removed files.
    set_table_properties(path, {"delta.deletedFileRetentionDuration": "interval 0 hours"})
    live = set(DeltaTable(str(path)).file_uris())
    dry = main_json(capsys, "maintain", path, "--dry-run", "--set", "self_optimizing.maintenance.retention_hours=0")
    assert dry["vacuumed_files"] and dry["dry_run"]
    swept = maintain_table(str(path), MaintenanceSettings(retention_hours=0))
    assert sorted(swept.vacuumed) == sorted(dry["vacuumed_files"])
    assert not live & {str(path / f) for f in swept.vacuumed}
    assert row_multiset(DeltaTable(str(path)).to_pyarrow_table()) == row_multiset(pa.concat_tables(appended))


def test_the_session_has_one_fair_pool_per_optimizer_group(spark):
    groups = SelfOptimizingSettings().groups
    scheduler = spark.sparkContext._jsc.sc()
    for name, group in groups.items():
        pool = scheduler.getPoolForName(name)
        assert pool.isDefined() and pool.get().minShare() == group.cores
