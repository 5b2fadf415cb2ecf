"""Recluster rounds end to end: real Delta tables (deltalake), real local Spark, rows checked read back."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from recluster.core.blocks import parse_data_file_name
from recluster.core.outcomes import CommitStatus
from recluster.core.selection import select_merge_tasks
from recluster.delta.commit import commit_task
from recluster.delta.log_writer import set_table_properties
from recluster.engine.rounds import snapshot_loader, write_task
from recluster.settings import CLUSTER_BY_PROPERTY, CURVE_PROPERTY, MergeSettings
from tests.helpers import LEVELS_SETTINGS, append_clustered, random_batches, row_multiset, run_rounds

pytestmark = pytest.mark.spark


def live_files(path: Path) -> list[str]:
    return list(DeltaTable(str(path)).file_uris())


@pytest.mark.parametrize(
    ("in_process_max_bytes", "placement"),
    [(0, "spark"), (0, "process"), (256 << 20, "auto")],
    ids=["spark-placement", "in-process-ranges", "in-process"],
)
def test_final_on_random_appends_then_incremental_round(tmp_path, spark, in_process_max_bytes, placement):
    table = tmp_path / "events"
    random_batches(table, batches=40, rows=1_000, seed=1)
    before_rows = row_multiset(DeltaTable(str(table)).to_pyarrow_table())
    version_before = DeltaTable(str(table)).version()
    settings = LEVELS_SETTINGS.model_copy(
        update={"merge": MergeSettings(in_process_max_bytes=in_process_max_bytes, placement=placement)}
    )

    result = run_rounds(table, spark, settings, final=True)

    assert result.before.table.average_depth == 40.0
    assert result.after.table.average_depth <= 2.0
    assert result.after.table.p99_depth <= 4
    assert result.stop_reason == "within_threshold"
    assert result.totals.conflicts == 0 and result.totals.failures == 0
    after = DeltaTable(str(table))
    assert row_multiset(after.to_pyarrow_table()) == before_rows
    # Spark reads the same rows from the live files (no Delta jar needed: plain Parquet of the snapshot)
    spark_rows = pa.Table.from_pylist(
        [r.asDict() for r in spark.read.parquet(*live_files(table)).select("k", "batch", "s").collect()],
        schema=pa.schema([("k", pa.int64()), ("batch", pa.int32()), ("s", pa.string())]),
    )
    assert row_multiset(spark_rows) == before_rows
    # outputs carry our names, a level and full stats; time travel to before the rewrite still works
    adds = pa.table(after.get_add_actions(flatten=True)).to_pylist()
    assert all(parse_data_file_name(a["path"]) is not None for a in adds)
    assert all(a["min.k"] is not None and a["max.k"] is not None and a["null_count.s"] == 0 for a in adds)
    old = DeltaTable(str(table))
    old.load_as_version(version_before)
    assert row_multiset(old.to_pyarrow_table()) == before_rows
    history = after.history(1)[0]
    assert history["recluster.producer"] == "recluster"

    # Incremental: 5 more appends, one round rewrites just the new level-0 files.
    random_batches(table, batches=5, rows=1_000, seed=2)
    grown = DeltaTable(str(table))
    expected = row_multiset(grown.to_pyarrow_table())
    table_bytes = sum(pa.table(grown.get_add_actions(flatten=True))["size_bytes"].to_pylist())
    new_files = {
        a["path"]
        for a in pa.table(grown.get_add_actions(flatten=True)).to_pylist()
        if not parse_data_file_name(a["path"])
    }
    incremental = run_rounds(table, spark, settings)
    assert incremental.rounds == 1 and incremental.totals.files_removed == len(new_files) == 5
    assert incremental.totals.bytes_written < table_bytes / 3
    remaining = {a["path"] for a in pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).to_pylist()}
    assert not new_files & remaining
    assert row_multiset(DeltaTable(str(table)).to_pyarrow_table()) == expected


def test_final_on_well_clustered_table_does_nothing(tmp_path, spark):
    table = tmp_path / "sorted"
    for start in range(0, 5_000, 1_000):
        append_clustered(table, pa.table({"k": pa.array(range(start, start + 1_000), pa.int64())}))
    version = DeltaTable(str(table)).version()
    result = run_rounds(table, spark, LEVELS_SETTINGS, final=True)
    assert result.rounds == 0 and result.totals.tasks == 0
    assert DeltaTable(str(table)).version() == version


def test_concurrent_delete_during_merge_wins(tmp_path, spark):
    table = tmp_path / "conflict"
    random_batches(table, batches=4, rows=500, seed=3)
    loader = snapshot_loader(str(table), LEVELS_SETTINGS, None)
    snapshot = loader()
    plan = select_merge_tasks(
        str(table),
        snapshot.version,
        snapshot.blocks,
        _bounds(snapshot),
    )
    (task,) = plan.tasks
    written = write_task(spark, task, snapshot, settings=LEVELS_SETTINGS, run_id="000000000001")
    assert written and all(os.path.exists(os.path.join(table, f.path)) for f in written)
    # A writer deletes rows of an input file after the merge read it and before it commits.
    DeltaTable(str(table)).delete("batch = 1")
    expected = row_multiset(DeltaTable(str(table)).to_pyarrow_table())
    outcome = commit_task(
        task,
        written,
        table_uri=snapshot.uri,
        storage_options=None,
        read_version=snapshot.version,
        run_id="000000000001",
        task_id="t-conflict",
        settings=LEVELS_SETTINGS.commit,
    )
    assert outcome.status is CommitStatus.CONFLICT
    after = DeltaTable(str(table))
    assert row_multiset(after.to_pyarrow_table()) == expected
    assert not any(parse_data_file_name(p) for p in after.file_uris())
    assert not any(os.path.exists(os.path.join(table, f.path)) for f in written)
    # the next round re-plans on the new snapshot and succeeds
    result = run_rounds(table, spark, LEVELS_SETTINGS, final=True)
    assert result.totals.conflicts == 0 and result.totals.tasks >= 1
    assert row_multiset(DeltaTable(str(table)).to_pyarrow_table()) == expected


def _bounds(snapshot):
    from recluster.engine.api import selection_bounds

    return selection_bounds(LEVELS_SETTINGS, snapshot, None)


@pytest.mark.parametrize(
    "name,make",
    [
        ("constant", lambda i: pa.table({"k": pa.array([7] * 4_000, pa.int64()), "i": pa.array(range(4_000))})),
        ("nulls", lambda i: pa.table({"k": pa.array([None] * 4_000, pa.int64()), "i": pa.array(range(4_000))})),
        ("huge", lambda i: pa.table({"k": pa.array(range(i * 30_000, (i + 1) * 30_000), pa.int64())})),
    ],
)
def test_final_terminates_on_degenerate_keys(tmp_path, spark, name, make):
    table = tmp_path / name
    batches = 1 if name == "huge" else 4
    for i in range(batches):
        append_clustered(table, make(i))
    expected = row_multiset(DeltaTable(str(table)).to_pyarrow_table())
    result = run_rounds(table, spark, LEVELS_SETTINGS, final=True)
    assert result.stop_reason in ("within_threshold", "no_progress")
    assert result.rounds <= 2
    assert row_multiset(DeltaTable(str(table)).to_pyarrow_table()) == expected
    if name in ("constant", "nulls"):
        # 16,000 rows of one value at target 6,000: constant files of >= 6,000 rows, final at level -1
        levels = [parse_data_file_name(p).level for p in DeltaTable(str(table)).file_uris()]
        assert levels == [-1, -1]
        assert run_rounds(table, spark, LEVELS_SETTINGS, final=True).rounds == 0


def test_final_one_row_per_file(tmp_path, spark):
    table = tmp_path / "tiny"
    for i in range(30):
        append_clustered(table, pa.table({"k": pa.array([i % 5], pa.int64()), "i": pa.array([i])}))
    expected = row_multiset(DeltaTable(str(table)).to_pyarrow_table())
    result = run_rounds(table, spark, LEVELS_SETTINGS, final=True)
    assert result.before.table.average_depth == 6.0
    # five disjoint key values: five independent tasks, one file per value (disjoint ranges are never bridged)
    assert result.after.table.total_block_count == 5
    assert result.after.table.average_depth == 1.0
    assert row_multiset(DeltaTable(str(table)).to_pyarrow_table()) == expected


def test_partitioned_merge_stays_in_partition(tmp_path, spark):
    table = tmp_path / "parted"
    rng = np.random.default_rng(5)
    for _ in range(4):
        part = pa.table(
            {
                "k": pa.array(rng.integers(0, 1000, 600), pa.int64()),
                "p": pa.array(["a"] * 300 + ["b"] * 300),
            }
        )
        write_deltalake(str(table), part, mode="append", partition_by=["p"])
    set_table_properties(table, {CLUSTER_BY_PROPERTY: "k"})
    expected = row_multiset(DeltaTable(str(table)).to_pyarrow_table())
    result = run_rounds(table, spark, LEVELS_SETTINGS, final=True)
    assert result.after.table.average_depth == 1.0
    after = DeltaTable(str(table))
    assert row_multiset(after.to_pyarrow_table()) == expected
    for action in pa.table(after.get_add_actions(flatten=True)).to_pylist():
        assert action["path"].startswith(f"p={action['partition.p']}/")


def test_cluster_key_change_leaves_old_files_until_final(tmp_path, spark):
    table = tmp_path / "rekey"
    random_batches(table, batches=4, rows=500, seed=7)
    run_rounds(table, spark, LEVELS_SETTINGS, final=True)
    expected = row_multiset(DeltaTable(str(table)).to_pyarrow_table())
    set_table_properties(table, {CLUSTER_BY_PROPERTY: "s,k", CURVE_PROPERTY: "linear"})  # lexicographic
    random_batches(table, batches=2, rows=500, seed=8)
    expected_after_appends = row_multiset(DeltaTable(str(table)).to_pyarrow_table())
    assert expected_after_appends != expected
    old_files = {p for p in DeltaTable(str(table)).file_uris() if parse_data_file_name(p)}

    incremental = run_rounds(table, spark, LEVELS_SETTINGS)
    plan = incremental.plans[0]
    assert any(s.reason == "older_key_fingerprint" for s in plan.skipped)
    assert old_files <= set(DeltaTable(str(table)).file_uris())  # untouched

    final = run_rounds(table, spark, LEVELS_SETTINGS, final=True)
    assert final.totals.tasks >= 1
    live = DeltaTable(str(table)).file_uris()
    assert not old_files & set(live)
    new_fingerprint = {parse_data_file_name(p).fingerprint for p in live}
    assert len(new_fingerprint) == 1 and new_fingerprint != {parse_data_file_name(next(iter(old_files))).fingerprint}
    assert row_multiset(DeltaTable(str(table)).to_pyarrow_table()) == expected_after_appends


def test_where_limits_candidates_by_stats(tmp_path, spark):
    table = tmp_path / "where"
    for start in (0, 1_000, 2_000):  # three overlapping pairs in disjoint key ranges
        for _ in range(2):
            append_clustered(table, pa.table({"k": pa.array(range(start, start + 500), pa.int64())}))
    from recluster.core.sql_predicates import parse_predicate

    snapshot = snapshot_loader(str(table), LEVELS_SETTINGS, None)()
    predicate = parse_predicate("k >= 1000 AND k < 1500", snapshot.key, snapshot.partition_columns)
    result = run_rounds(table, spark, LEVELS_SETTINGS, final=True, block_filter=predicate.may_match)
    assert result.totals.files_removed == 2
    levels = sorted(parse_data_file_name(p).level if parse_data_file_name(p) else 0 for p in live_files(table))
    assert levels == [0, 0, 0, 0, 1]


def test_append_only_and_schema_evolution_and_column_mapping(tmp_path, spark):
    from recluster.core.errors import TableError
    from recluster.engine.api import read_snapshot

    append_only = tmp_path / "append_only"
    write_deltalake(str(append_only), pa.table({"k": [3, 1]}), configuration={"delta.appendOnly": "true"})
    write_deltalake(str(append_only), pa.table({"k": [2, 0]}), mode="append")
    set_table_properties(append_only, {CLUSTER_BY_PROPERTY: "k"})
    assert run_rounds(append_only, spark, LEVELS_SETTINGS, final=True).after.table.average_depth == 1.0
    assert sorted(DeltaTable(str(append_only)).to_pyarrow_table()["k"].to_pylist()) == [0, 1, 2, 3]

    evolved = tmp_path / "evolved"
    write_deltalake(str(evolved), pa.table({"k": [3, 1]}))
    write_deltalake(str(evolved), pa.table({"k": [2, 0], "extra": ["x", "y"]}), mode="append", schema_mode="merge")
    set_table_properties(evolved, {CLUSTER_BY_PROPERTY: "k"})
    expected = row_multiset(DeltaTable(str(evolved)).to_pyarrow_table())
    assert run_rounds(evolved, spark, LEVELS_SETTINGS, final=True).totals.tasks == 1
    assert row_multiset(DeltaTable(str(evolved)).to_pyarrow_table()) == expected

    mapped = tmp_path / "mapped"  # column mapping on a partitioned table: partition values by physical names
    write_deltalake(
        str(mapped),
        pa.table({"k": [1, 2], "p": [1, 1]}),
        partition_by=["p"],
        configuration={"delta.columnMapping.mode": "name"},
    )
    with pytest.raises(TableError, match="column mapping mode 'name' on a partitioned table is not supported"):
        read_snapshot(str(mapped), settings=LEVELS_SETTINGS, cluster_by=["k"])


def test_two_column_key_outputs_never_overlap_and_rounds_settle(tmp_path, spark):
    """Per-column min/max ranges: files splitting one value of the first key column would always overlap."""
    table = tmp_path / "twocol"
    rng = np.random.default_rng(9)
    for _ in range(6):
        a = rng.integers(0, 40, 6_000)
        b = [f"s{x:05d}" for x in rng.integers(0, 100_000, 6_000)]
        append_clustered(table, pa.table({"a": pa.array(a, pa.int64()), "b": pa.array(b)}))
    set_table_properties(table, {CLUSTER_BY_PROPERTY: "a,b"})
    expected = row_multiset(DeltaTable(str(table)).to_pyarrow_table())
    result = run_rounds(table, spark, LEVELS_SETTINGS, final=True)
    assert result.stop_reason == "within_threshold"
    assert result.after.table.average_depth == 1.0
    assert result.after.table.total_block_count >= 4  # 36,000 rows at target 6,000: really cut into files
    assert row_multiset(DeltaTable(str(table)).to_pyarrow_table()) == expected
    version = DeltaTable(str(table)).version()
    assert run_rounds(table, spark, LEVELS_SETTINGS).rounds == 0  # no new data: nothing to rewrite, ever
    assert DeltaTable(str(table)).version() == version
