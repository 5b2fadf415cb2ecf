"""Orphan cleanup on real tables: removes exactly the uncommitted outputs, never a reachable file."""

from __future__ import annotations

import os

import pytest
from deltalake import DeltaTable

from recluster.core.blocks import data_file_name, parse_data_file_name
from recluster.core.selection import select_merge_tasks
from recluster.delta.maintenance import clean_orphans, find_orphans
from recluster.engine.api import selection_bounds
from recluster.engine.rounds import snapshot_loader, write_task
from tests.helpers import LEVELS_SETTINGS, cli_json, random_batches, row_multiset, run_rounds

pytestmark = pytest.mark.spark


def test_crash_between_write_and_commit_leaves_only_cleanable_orphans(tmp_path, spark):
    table = tmp_path / "crash"
    random_batches(table, batches=3, rows=500, seed=41)
    run_rounds(table, spark, LEVELS_SETTINGS, final=True)  # committed outputs of ours: live
    random_batches(table, batches=3, rows=500, seed=42)
    run_rounds(table, spark, LEVELS_SETTINGS, final=True)  # the first outputs: removed, reachable by time travel
    old_version = DeltaTable(str(table)).version() - 1
    expected_old = row_multiset(DeltaTable(str(table), version=old_version).to_pyarrow_table())
    random_batches(table, batches=2, rows=500, seed=43)
    expected = row_multiset(DeltaTable(str(table)).to_pyarrow_table())

    # A merge writes its outputs, then the process dies before the commit.
    snapshot = snapshot_loader(str(table), LEVELS_SETTINGS, None)()
    bounds = selection_bounds(LEVELS_SETTINGS, snapshot, None)
    (task,) = select_merge_tasks(str(table), snapshot.version, snapshot.blocks, bounds).tasks[:1]
    written = write_task(spark, task, snapshot, settings=LEVELS_SETTINGS, run_id="0000000000cc")
    uncommitted = {f.path for f in written}
    stray = table / "notes.parquet"  # not ours: never touched
    stray.write_bytes(b"x")
    young = table / data_file_name(1, snapshot.key.fingerprint, "0000000000dd")  # ours, but too young
    young.write_bytes(b"y")

    assert {o.path for o in find_orphans(str(table), safety_age_seconds=3600).orphans} == set()
    for path in uncommitted:  # age the crashed outputs past the safety age
        os.utime(table / path, (1, 1))
    found = find_orphans(str(table), safety_age_seconds=3600)
    assert {o.path for o in found.orphans} == uncommitted
    assert clean_orphans(str(table), safety_age_seconds=3600, dry_run=True).deleted is False
    assert all((table / p).exists() for p in uncommitted)

    listed = cli_json("clean", table, "--safety-age-hours", "1", "--dry-run")
    assert {o["path"] for o in listed["orphans"]} == uncommitted

    result = clean_orphans(str(table), safety_age_seconds=3600)
    assert {o.path for o in result.orphans} == uncommitted
    assert not any((table / p).exists() for p in uncommitted)
    assert stray.exists() and young.exists()
    # every file of every retained version is still there
    assert row_multiset(DeltaTable(str(table)).to_pyarrow_table()) == expected
    assert row_multiset(DeltaTable(str(table), version=old_version).to_pyarrow_table()) == expected_old
    ours_on_disk = [p for p in os.listdir(table) if parse_data_file_name(p)]
    live = set(DeltaTable(str(table)).file_uris())
    assert any(str(table / p) not in live for p in ours_on_disk)  # removed-but-reachable outputs were kept


def test_clean_refuses_a_path_that_is_not_a_table(tmp_path):
    from recluster.core.errors import TableError

    with pytest.raises(TableError):
        find_orphans(str(tmp_path))
