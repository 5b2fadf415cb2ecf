"""`./dev cluster-demo` (issue 21): the demo's live append + recluster loop on a Spark standalone cluster the script
starts from the pyspark wheel, the table on S3 (the moto server of the S3 tests, given as DEMO_TABLE with the
credentials in the script's AWS_* variables only), merges in Spark tasks. The rows afterwards are exactly the demo
batches the seed generates."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from bench.spark_cluster import free_port
from recluster.engine.demo import demo_batch
from tests.helpers import cli_environment, row_multiset
from tests.test_s3 import S3Server, s3  # noqa: F401  (s3: the moto server fixture)

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]


def test_dev_cluster_demo_reclusters_live_appends_on_s3_in_spark_tasks(
    s3: S3Server,  # noqa: F811
    tmp_path: Path,
) -> None:
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
    demo = ["--seconds", "30", "--interval", "2", "--rows", str(rows), "--target-rows", "5000", "--seed", str(seed)]
    done = subprocess.run(
        [str(ROOT / "dev"), "cluster-demo", *demo, "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=cli_environment(environment),
        start_new_session=True,  # the script stops its own background processes (cluster) at exit
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert s3.secret not in done.stdout + done.stderr
    summary = json.loads(done.stdout)
    assert summary["appends"] >= 3 and summary["merges"] >= 1, summary
    rng = np.random.default_rng(seed)
    expected = pa.concat_tables(demo_batch(rng, rows, batch) for batch in range(summary["appends"]))
    after = DeltaTable(uri, storage_options=s3.options()).to_pyarrow_table()
    assert row_multiset(after) == row_multiset(expected)
    assert summary["rows"] == expected.num_rows
    assert (tmp_path / "recluster-cluster-demo" / "checkpoint").is_dir()  # the checkpoint stays local
