"""A real Spark standalone cluster (issue 21): a master and two workers started from the pyspark wheel's
`bin/spark-class` on 127.0.0.1, workers without the driver's environment. `recluster run --final` and `optimize`
with `spark.master=spark://...` merge an S3 (moto) table in Spark tasks on both workers, with the credentials given the
way the README shows (AWS_* variables of the driver only), and the rows are unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from tests.helpers import cli_environment, random_batches, row_multiset, wait_for
from tests.s3_server import S3Server
from tests.spark_cluster import Cluster, cluster_config, standalone_cluster, ui_json

pytestmark = [pytest.mark.slow, pytest.mark.spark_cluster]

WORKERS = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with standalone_cluster(tmp_path_factory.mktemp("spark-cluster"), workers=WORKERS) as started:
        yield started


def test_final_on_s3_runs_on_both_workers_with_the_drivers_aws_variables(
    cluster: Cluster,
    s3: S3Server,
    tmp_path: Path,
) -> None:
    uri = s3.table_uri("cluster")
    random_batches(uri, batches=6, rows=3_000, seed=31, options=s3.options())
    expected = row_multiset(DeltaTable(uri, storage_options=s3.options()).to_pyarrow_table())
    config = cluster_config(cluster, tmp_path, target_rows=4000)
    environment = {  # the README's way: credentials in the driver's environment only
        "AWS_ACCESS_KEY_ID": s3.key_id,
        "AWS_SECRET_ACCESS_KEY": s3.secret,
        "AWS_ENDPOINT_URL": s3.endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
        "AWS_CONDITIONAL_PUT": "etag",
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "recluster.cli", "run", uri, "--final", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=cli_environment(environment),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert s3.secret not in done.stdout + done.stderr  # never printed
    result = json.loads(done.stdout)
    assert result["tasks"] >= 1 and result["failures"] == 0 and result["after"]["average_depth"] <= 1.5
    after = pa.table(DeltaTable(uri, storage_options=s3.options()).to_pyarrow_table())
    assert row_multiset(after) == expected
    apps = [a for a in ui_json(cluster.master_ui).get("completedapps", []) if a.get("name") == "recluster"]
    assert apps, "the master saw no recluster application"
    app_id = apps[-1]["id"]

    random_batches(uri, batches=3, rows=3_000, seed=33, options=s3.options())  # then a full optimize on the cluster too
    expected = row_multiset(DeltaTable(uri, storage_options=s3.options()).to_pyarrow_table())
    done = subprocess.run(
        [sys.executable, "-m", "recluster.cli", "optimize", uri, "--type", "full", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=cli_environment(environment),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    optimized = json.loads(done.stdout)
    assert optimized["outcome"] == "done" and optimized["failures"] == 0, optimized
    after = pa.table(DeltaTable(uri, storage_options=s3.options()).to_pyarrow_table())
    assert row_multiset(after) == expected
    for worker_ui in cluster.worker_uis:  # executors of the application ran on both workers
        finished = ui_json(worker_ui).get("finishedexecutors", [])
        assert any(e.get("appid") == app_id for e in finished), (worker_ui, finished)


def test_watch_on_the_cluster_merges_live_appends_in_spark_tasks(cluster: Cluster, tmp_path: Path) -> None:
    """The streaming job with spark.master=spark://...: its merges run as Spark tasks on the workers (local tables,
    which the workers on this machine reach), rows unchanged; a graceful stop exits 0. (Before the driver's thread
    stack was raised, the query's thread died here with a StackOverflowError in java.util.regex.)"""
    import numpy as np

    from recluster.delta.log import PRODUCER, PRODUCER_KEY
    from tests.helpers import append_random, stop_watch

    table = tmp_path / "events"
    rng = np.random.default_rng(34)
    appended = [append_random(table, rng, 0)]
    config = cluster_config(cluster, tmp_path, target_rows=4000)
    apps_before = recluster_apps(cluster)
    log = tmp_path / "watch.log"
    command = [sys.executable, "-m", "recluster.cli", "watch", "--table", f"{table}:k", "--config", str(config),
               "--checkpoint", str(tmp_path / "checkpoint"), "--trigger-seconds", "0.5", "--starting-version",
               "earliest", "--set", "selection.policy=levels"]  # fmt: skip
    with log.open("ab") as output:
        process = subprocess.Popen(
            command,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=cli_environment({"XDG_STATE_HOME": str(tmp_path / "state")}),
        )
    try:

        def merged() -> bool:  # a rewrite commit of ours (the CLUSTER BY commit is ours too, but not OPTIMIZE)
            infos = [
                json.loads(line)["commitInfo"]
                for path in (table / "_delta_log").glob("*.json")
                for line in path.read_text().splitlines()
                if line.startswith('{"commitInfo"')
            ]
            return any(i.get(PRODUCER_KEY) == PRODUCER and i.get("operation") == "OPTIMIZE" for i in infos)

        appended += [append_random(table, rng, batch) for batch in range(1, 7)]
        wait_for(merged, "the job's first merge on the cluster", process, timeout=240)
    finally:
        stop_watch(process, log)
    assert "StackOverflowError" not in log.read_text()
    assert row_multiset(DeltaTable(str(table)).to_pyarrow_table()) == row_multiset(pa.concat_tables(appended))

    def ran_executors() -> bool:  # the job's application (new since the test began) had executors on the workers
        new = recluster_apps(cluster) - apps_before
        states = [ui_json(ui) for ui in cluster.worker_uis]
        executors = [e for w in states for key in ("executors", "finishedexecutors") for e in w.get(key, [])]
        return any(e.get("appid") in new for e in executors)

    wait_for(ran_executors, "the job's executors in the workers' status", timeout=60)


def recluster_apps(cluster: Cluster) -> set[str]:
    """Ids of the master's applications named recluster, running or completed."""
    status = ui_json(cluster.master_ui)
    apps = status.get("activeapps", []) + status.get("completedapps", [])
    return {a["id"] for a in apps if a.get("name") == "recluster"}


def _kill_worker(cluster: Cluster, index: int) -> None:
    """SIGKILL worker `index` and the executors it launched (they name the worker's address in their arguments)."""
    worker_id = ui_json(cluster.worker_uis[index])["id"]  # worker-<date>-127.0.0.1-<port>
    port = worker_id.rsplit("-", 1)[1]
    cluster.processes[1 + index].kill()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            arguments = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"Worker@127.0.0.1:{port}" in arguments:
            os.kill(int(entry.name), 9)


def test_a_worker_killed_during_a_merge_loses_nothing(
    cluster: Cluster,
    s3: S3Server,
    tmp_path: Path,
) -> None:
    """Runs last in this module: it leaves one worker. The merge either completes on the other worker (Spark
    reruns the lost tasks) or fails and commits nothing; either way the table holds exactly its rows."""
    uri = s3.table_uri("kill")
    random_batches(uri, batches=8, rows=20_000, seed=32, options=s3.options())
    options = s3.options()
    expected = row_multiset(DeltaTable(uri, storage_options=options).to_pyarrow_table())
    version = DeltaTable(uri, storage_options=options).version()
    config = cluster_config(cluster, tmp_path, target_rows=10000)
    environment = {k: v for k, v in options.items() if k.startswith("AWS_")} | {
        "AWS_CONDITIONAL_PUT": "etag",
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "recluster.cli", "run", uri, "--final", "--config", str(config), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_environment(environment),
    )
    try:
        wait_for(
            lambda: bool(ui_json(cluster.worker_uis[1]).get("executors")) or process.poll() is not None,
            "an executor of the merge on the second worker",
            timeout=120,
        )
        assert process.poll() is None, "the merge ended before the worker could be killed"
        _kill_worker(cluster, 1)
        out, err = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
    print(f"the merge after the kill: exit {process.returncode}")
    table = DeltaTable(uri, storage_options=options)
    assert row_multiset(table.to_pyarrow_table()) == expected, err[-2000:]
    if process.returncode == 0:
        result = json.loads(out)
        assert result["failures"] == 0 and result["after"]["average_depth"] <= 1.5
    else:  # failed cleanly: nothing committed
        assert table.version() == version, err[-2000:]
