"""The streaming job end to end: a real Structured Streaming query over real Delta logs, real merges."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from jobs.autorecluster import source_module, start_job, warm_python_worker
from recluster.core.errors import TableError
from recluster.core.metrics import clustering_info
from recluster.core.selection.plan import Policy, level_threshold
from recluster.engine.api import read_snapshot
from recluster.settings import Settings
from tests.helpers import append_random, job_settings, log_actions_after, row_multiset, running_job

pytestmark = [pytest.mark.spark, pytest.mark.slow]
# The levels policy throughout: assert_within_thresholds checks its thresholds.


def assert_within_thresholds(path: Path, settings: Settings, slack_files: int = 1) -> None:
    """Every level's average depth is within its threshold, allowing the last in-flight append."""
    from recluster.engine.api import selection_bounds

    snapshot = read_snapshot(str(path), settings=settings)
    bounds = selection_bounds(settings, snapshot, None)
    info = clustering_info(snapshot.blocks)
    for level, metrics in info.levels.items():
        if level < 0:
            continue
        allowed = level_threshold(metrics.total_block_count, bounds) + (slack_files if level == 0 else 0)
        assert metrics.average_depth <= allowed, (level, metrics)


def test_job_keeps_appends_clustered_and_survives_restart(tmp_path, spark):
    table = tmp_path / "events"
    rng = np.random.default_rng(11)
    appended = [append_random(table, rng, 0)]
    settings = job_settings(tmp_path / "checkpoint", [str(table)], Policy.LEVELS)
    with running_job(spark, settings) as (query, handler):
        for batch in range(1, 15):
            appended.append(append_random(table, rng, batch))
            query.processAllAvailable()
        merges_first_run = handler.status[str(table)].tasks
        assert merges_first_run > 0
    # Restart on the same checkpoint: the state is rebuilt from the log, no committed merge is redone.
    with running_job(spark, settings) as (query, handler):
        for batch in range(15, 30):
            appended.append(append_random(table, rng, batch))
            query.processAllAvailable()
        status = handler.status[str(table)]
    expected = row_multiset(pa.concat_tables(appended))
    assert row_multiset(DeltaTable(str(table)).to_pyarrow_table()) == expected
    assert_within_thresholds(table, settings)
    assert status.conflicts == 0 and status.failures == 0
    write_amplification = status.bytes_written / max(status.bytes_appended, 1)
    print(f"write amplification over the second run: {write_amplification:.2f}")
    info = clustering_info(read_snapshot(str(table), settings=settings).blocks)
    assert info.table.average_depth < 30 / 3  # far below the 30 overlapping appends it would have without us


def test_job_with_concurrent_delete_two_tables_and_bad_tables(tmp_path, spark):
    first, second = tmp_path / "a", tmp_path / "b"
    no_key = tmp_path / "nokey"
    missing = tmp_path / "does-not-exist-yet"
    rng = np.random.default_rng(12)
    appended = {first: [append_random(first, rng, 0)], second: [append_random(second, rng, 0)]}
    write_deltalake(str(no_key), pa.table({"x": [1, 2, 3]}))
    settings = job_settings(tmp_path / "checkpoint", [first, second, no_key, missing], Policy.LEVELS)
    with running_job(spark, settings) as (query, handler):
        for batch in range(1, 8):
            for path in (first, second):
                appended[path].append(append_random(path, rng, batch))
            if batch == 4:
                DeltaTable(str(first)).delete("batch = 2")
            query.processAllAvailable()
        statuses = dict(handler.status)
    assert "no cluster key" in (statuses[str(no_key)].error or "")
    assert statuses[str(first)].tasks > 0 and statuses[str(second)].tasks > 0
    survivors = pa.concat_tables(appended[first])
    survivors = survivors.filter(pa.compute.not_equal(survivors["batch"], 2))
    assert row_multiset(DeltaTable(str(first)).to_pyarrow_table()) == row_multiset(survivors)
    assert row_multiset(DeltaTable(str(second)).to_pyarrow_table()) == row_multiset(pa.concat_tables(appended[second]))


def test_unwritable_checkpoint_is_a_clear_error(tmp_path, spark):
    table = tmp_path / "t"
    append_random(table, np.random.default_rng(1), 0)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    settings = job_settings(blocker / "checkpoint", [str(table)], Policy.LEVELS)
    with pytest.raises(TableError, match=r"checkpoint location .* is not writable"):
        start_job(spark, settings, settings.tables)
    assert not os.path.exists(blocker / "checkpoint")


def test_job_puts_appends_on_a_hilbert_curve(tmp_path, spark):
    """A two-column key is a Hilbert curve by default: the job's first merge samples the range bounds (stored under
    `_recluster/`, no metaData commit: the job reloads its state when our commit comes back on the new curve), every
    later append is merged onto the same curve."""
    from recluster.core.blocks import parse_data_file_name
    from recluster.delta.log_writer import set_table_properties
    from recluster.settings import CLUSTER_BY_PROPERTY

    table = tmp_path / "events"
    rng = np.random.default_rng(12)
    appended = [append_random(table, rng, 0)]
    users = set_table_properties(table, {CLUSTER_BY_PROPERTY: "k,batch"})
    settings = job_settings(tmp_path / "checkpoint", [str(table)], Policy.LEVELS)
    with running_job(spark, settings) as (query, handler):
        for batch in range(1, 12):
            appended.append(append_random(table, rng, batch))
            query.processAllAvailable()
        status = handler.status[str(table)]
        tracked_key = handler.tracked[str(table)].key
    assert status.error is None and status.failures == 0
    assert row_multiset(DeltaTable(str(table)).to_pyarrow_table()) == row_multiset(pa.concat_tables(appended))
    snapshot = read_snapshot(str(table), settings=settings)
    assert snapshot.key.bounds is not None
    assert tracked_key == snapshot.key  # the job's state moved onto the bounds its first merge sampled
    assert not [a for a in log_actions_after(table, users) if "metaData" in a or "protocol" in a]
    ours = [b for b in snapshot.blocks if parse_data_file_name(b.path)]
    assert ours and all(b.curve_range is not None for b in ours)
    assert sum(b.key_fingerprint is None for b in snapshot.blocks) <= 3  # a few appends not absorbed yet
    info = clustering_info(snapshot.blocks, snapshot.key)
    assert set(info.column_scan) == {"k", "batch"}


def test_the_source_reader_is_imported_in_a_python_worker_at_the_start_and_a_failure_is_one_line(
    spark: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The warm-up the job runs as it starts (docs/streaming.md#starting): a task that imports the source's reader in a
    Python worker; a module that cannot be imported is one line and nothing raised."""
    assert source_module(job_settings(Path("/tmp/cp"), [])) == "triggers.delta_log"
    with caplog.at_level("WARNING", logger="recluster.job"):
        warm_python_worker(spark, "triggers.kafka_commits")
        assert not caplog.records
        warm_python_worker(spark, "triggers.no_such_reader")
    (line,) = [r.getMessage() for r in caplog.records]
    assert "reason=warm_up_failed module=triggers.no_such_reader" in line and "\n" not in line
