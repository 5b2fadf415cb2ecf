"""`./dev cluster-demo` (issue 21): the demo's live append + recluster loop on a Spark standalone cluster the script
starts from the pyspark wheel, the table on S3 (the moto server of the S3 tests, given as DEMO_TABLE with the
credentials in the script's AWS_* variables only), merges in Spark tasks. The rows afterwards are exactly the demo
batches the seed generates."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from recluster.engine.demo import demo_batch
from tests.helpers import cli_environment, descendants, row_multiset, wait_for
from tests.s3_server import S3Server
from tests.spark_cluster import free_port

pytestmark = [pytest.mark.slow, pytest.mark.spark_cluster]

ROOT = Path(__file__).resolve().parents[1]


def test_dev_cluster_demo_reclusters_live_appends_on_s3_in_spark_tasks(
    s3: S3Server,
    tmp_path: Path,
) -> None:
    """Ctrl-C (SIGINT to `recluster demo`, the script's foreground command) stops the demo as soon as the table holds
    a merge of the job and two appends of the demo's writer, rather than after a fixed time."""
    uri = s3.table_uri("cluster-demo")
    rows, seed = 2_000, 3
    environment = {
        **{name: value for name, value in s3.options().items() if name.startswith("AWS_")},
        "AWS_CONDITIONAL_PUT": "etag",
        "DEMO_TABLE": uri,
        "RECLUSTER_VENV": sys.prefix,
        "SPARK_MASTER_PORT": str(free_port()),
        "SPARK_MASTER_WEBUI_PORT": str(free_port()),
        "TMPDIR": str(tmp_path),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    demo = ["--seconds", "600", "--interval", "2", "--rows", str(rows), "--target-rows", "5000", "--seed", str(seed)]
    out, err = tmp_path / "demo.out", tmp_path / "demo.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        script = subprocess.Popen(
            [str(ROOT / "dev"), "cluster-demo", *demo, "--json"],
            stdout=stdout,
            stderr=stderr,
            env=cli_environment(environment),
            start_new_session=True,  # the script stops its own background processes (cluster) at exit
        )
    checked = [0.0]

    def merged_and_appended() -> bool:  # asks the S3 server at most twice a second
        if time.monotonic() - checked[0] < 0.5:
            return False
        checked[0] = time.monotonic()
        try:
            operations = [entry.get("operation") for entry in DeltaTable(uri, storage_options=s3.options()).history()]
        except Exception:  # no table yet
            return False
        return "OPTIMIZE" in operations and operations.count("WRITE") >= 3

    try:
        wait_for(merged_and_appended, "a merge of the demo table and two appends of its writer", script, timeout=300)
        (demo_pid,) = [pid for pid in descendants(script.pid) if "demo" in _arguments(pid)]
        os.kill(demo_pid, signal.SIGINT)
        assert script.wait(timeout=300) == 0, err.read_text()[-3000:]
    finally:
        if script.poll() is None:
            os.killpg(script.pid, signal.SIGTERM)  # the script's trap stops the cluster
            script.wait(timeout=60)
    stdout_text, stderr_text = out.read_text(), err.read_text()
    assert s3.secret not in stdout_text + stderr_text
    summary = json.loads(stdout_text)
    assert summary["appends"] >= 3 and summary["merges"] >= 1, summary
    rng = np.random.default_rng(seed)
    expected = pa.concat_tables(demo_batch(rng, rows, batch) for batch in range(summary["appends"]))
    after = DeltaTable(uri, storage_options=s3.options()).to_pyarrow_table()
    assert row_multiset(after) == row_multiset(expected)
    assert summary["rows"] == expected.num_rows
    assert (tmp_path / "recluster-cluster-demo" / "checkpoint").is_dir()  # the checkpoint stays local


def _arguments(pid: int) -> list[str]:
    """A process's command line (none once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []
