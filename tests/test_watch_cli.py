"""`recluster watch` as a process: kill -9 mid-run, restart on the same checkpoint, SIGTERM exits 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from tests.helpers import (
    append_random,
    http_get,
    kill_tree,
    recluster_commits,
    row_multiset,
    seen_version,
    start_logged,
    start_watch,
    stop_watch,
    wait_for,
)
from tests.spark_cluster import free_port

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


def test_sigterm_while_spark_starts_stops_the_job_gracefully(tmp_path):
    """A pod deleted while its job starts: the signal lands after the HTTP server is up (before Spark starts), and
    the job stops as gracefully as a running one, exit 0, once its query runs."""
    table = tmp_path / "events"
    appended = append_random(table, np.random.default_rng(5), 0, rows=3_000, high=10**6)
    port = free_port()
    command = [sys.executable, "-m", "recluster.cli", "watch", "--table", f"{table}:k", "--http-port", str(port)]
    command += ["--checkpoint", str(tmp_path / "checkpoint"), "--set", "spark.master=local[1]"]
    log = tmp_path / "watch.log"
    process = start_logged(command, log)
    try:
        wait_for(lambda: http_get(f"http://127.0.0.1:{port}/healthz", timeout=1)[0] != 0, "the HTTP server", process)
        os.killpg(process.pid, signal.SIGTERM)
        assert process.wait(timeout=120) == 0, log.read_text()[-3000:]
    finally:
        if process.poll() is None:
            kill_tree(process)
    assert "stopped (SIGTERM)" in log.read_text()
    assert row_multiset(DeltaTable(str(table)).to_pyarrow_table()) == row_multiset(appended)


def test_a_source_worker_too_slow_to_connect_back_is_started_again(tmp_path):
    """Spark gives the Delta-log source's Python worker a fixed 10 s to connect back; a busy host can miss it. Here
    the first source worker's interpreter is held 12 s (a wrapper named by PYSPARK_PYTHON): the query fails to
    start, the job starts it again from its checkpoint, the restarted query brings a later append, the table is
    reclustered, and no row is lost or duplicated."""
    table, log = tmp_path / "events", tmp_path / "watch.log"
    rng = np.random.default_rng(23)
    appended = [append_random(table, rng, batch, rows=3_000, high=10**6) for batch in range(3)]
    marker, wrapper = tmp_path / "held-once", tmp_path / "python"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$2" = pyspark.sql.streaming.python_streaming_source_runner ] && [ ! -e {marker} ]; then\n'
        f"  touch {marker}; sleep 12\n"
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    process = start_watch([table], tmp_path / "checkpoint", log, env={**os.environ, "PYSPARK_PYTHON": str(wrapper)})
    try:
        wait_for(lambda: "reason=source_start_failed attempt=1" in log.read_text(), "the query started again", process)
        # The job may recluster the tables it takes up before its query runs: a commit made after the restart, seen
        # by the job, is what proves the restarted query delivers.
        appended.append(append_random(table, rng, 3, rows=3_000, high=10**6))
        version = DeltaTable(str(table)).version()
        wait_for(lambda: seen_version(log) >= version, f"the restarted query to bring version {version}", process)
        wait_for(lambda: recluster_commits(table) >= 1, "a recluster commit", process)
        stop_watch(process, log)
    finally:
        if process.poll() is None:
            kill_tree(process)
    text = log.read_text()
    assert marker.exists(), "the wrapper never held a source worker: the test proved nothing"
    assert "reason=source_start_failed attempt=1" in text and "Python worker failed to connect back" in text
    assert "attempt=2" not in text
    assert row_multiset(DeltaTable(str(table)).to_pyarrow_table()) == row_multiset(pa.concat_tables(appended))
