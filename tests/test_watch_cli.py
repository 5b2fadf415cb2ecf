"""`recluster watch` as a process: kill -9 mid-run, restart on the same checkpoint, SIGTERM exits 0."""

from __future__ import annotations

import subprocess

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from tests.helpers import append_random, kill_tree, recluster_commits, row_multiset, start_watch, stop_watch, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.needs_services]  # recluster watch subprocesses with local Spark


def test_watch_killed_restarted_and_stopped_gracefully(tmp_path):
    table, checkpoint, log = tmp_path / "events", tmp_path / "checkpoint", tmp_path / "watch.log"
    rng = np.random.default_rng(21)
    appended: list[pa.Table] = []

    def append(batch: int) -> None:
        appended.append(append_random(table, rng, batch, rows=3_000, high=10**6))

    def watch() -> subprocess.Popen[bytes]:
        return start_watch([table], checkpoint, log, trigger_seconds=0.5, target_rows=5_000)

    append(0)
    process = watch()
    try:
        for batch in range(1, 4):
            append(batch)
        wait_for(lambda: recluster_commits(table) >= 1, "a first recluster commit", process)
        append(4)
        kill_tree(process)  # no chance to clean up: mid-batch at worst
        killed_at = recluster_commits(table)

        process = watch()
        for batch in range(5, 9):
            append(batch)
        wait_for(lambda: recluster_commits(table) > killed_at, "a recluster commit after the restart", process)
        stop_watch(process, log)
    finally:
        if process.poll() is None:
            kill_tree(process)
    text = log.read_text()
    assert "stopped (SIGTERM)" in text
    final = DeltaTable(str(table))
    assert row_multiset(final.to_pyarrow_table()) == row_multiset(pa.concat_tables(appended))
    # every referenced file exists (the read above would fail otherwise) and none is referenced twice
    assert len(set(final.file_uris())) == len(final.file_uris())
