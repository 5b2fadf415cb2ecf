"""`recluster watch` as a process: kill -9 mid-run, restart on the same checkpoint, SIGTERM exits 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from recluster.delta.log_writer import set_table_properties
from recluster.settings import CLUSTER_BY_PROPERTY
from tests.helpers import row_multiset

pytestmark = pytest.mark.slow

WAIT_SECONDS = 180


def start_watch(table: Path, checkpoint: Path, log: Path) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "recluster.cli",
        "watch",
        "--table",
        f"{table}:k",
        "--checkpoint",
        str(checkpoint),
        "--trigger-seconds",
        "0.5",
        "--starting-version",
        "earliest",
        "--set",
        "clustering.target_rows=5000",
        "--set",
        "spark.master=local[1]",
        "-v",
    ]
    with log.open("ab") as output:
        return subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def recluster_commits(table: Path) -> int:
    return sum(1 for entry in DeltaTable(str(table)).history() if entry.get("recluster.producer") == "recluster")


def test_watch_killed_restarted_and_stopped_gracefully(tmp_path):
    table, checkpoint, log = tmp_path / "events", tmp_path / "checkpoint", tmp_path / "watch.log"
    rng = np.random.default_rng(21)
    appended: list[pa.Table] = []

    def append(batch: int) -> None:
        data = pa.table({"k": pa.array(rng.integers(0, 10**6, 3_000), pa.int64()), "batch": [batch] * 3_000})
        write_deltalake(str(table), data, mode="append")
        appended.append(data)

    append(0)
    set_table_properties(table, {CLUSTER_BY_PROPERTY: "k"})
    process = start_watch(table, checkpoint, log)
    try:
        for batch in range(1, 4):
            append(batch)
        wait_for(lambda: recluster_commits(table) >= 1, "a first recluster commit")
        append(4)
        os.killpg(process.pid, signal.SIGKILL)  # no chance to clean up: mid-batch at worst
        process.wait(timeout=30)
        killed_at = recluster_commits(table)

        process = start_watch(table, checkpoint, log)
        for batch in range(5, 9):
            append(batch)
        wait_for(lambda: recluster_commits(table) > killed_at, "a recluster commit after the restart")
        os.killpg(process.pid, signal.SIGTERM)
        assert process.wait(timeout=90) == 0, log.read_text()[-3000:]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    text = log.read_text()
    assert "stopped (SIGTERM)" in text
    final = DeltaTable(str(table))
    assert row_multiset(final.to_pyarrow_table()) == row_multiset(pa.concat_tables(appended))
    # every referenced file exists (the read above would fail otherwise) and none is referenced twice
    assert len(set(final.file_uris())) == len(final.file_uris())
