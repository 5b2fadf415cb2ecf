"""Tables named in the standalone Hive Metastore (docs/discovery.md#tables-by-name): a delta-rs table registered by
Spark SQL (`CREATE TABLE db.events USING delta LOCATION`), then `recluster info db.events` and `recluster run
db.events --final` as subprocesses whose Spark uses the metastore as its catalog; the errors of an unknown table, a
table that is not Delta (named in `recluster estimate` and `recluster sql`) and no catalog, one line each;
`recluster info db.events` and `recluster run db.delta_events --final` run by recluster[delta] on pyspark 4.2 with
Delta Spark's jars on the classpath (`./dev delta-extra`); `recluster watch` on a `tables:` entry given by name."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from deltalake import DeltaTable

from tests.helpers import (
    WAIT_SECONDS,
    Run,
    append_random,
    cli_environment,
    run_cli,
    start_logged,
    stop_watch,
    wait_for,
)
from tests.hive_metastore import VENV, Metastore
from tests.referee import REFEREE_JARS, Referee, referee_environment
from tests.table_shapes import rows_digest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DELTA_EXTRA_PYTHON = VENV / "delta-extra" / "bin" / "python"
"""recluster with its `delta` extra on pyspark 4.2 (`./dev delta-extra`, run by `./dev test`)."""
APPENDS = 6


def config_file(path: Path, spark_conf: dict[str, str]) -> Path:
    settings = {"spark": {"master": "local[1]", "conf": spark_conf}, "clustering": {"target_rows": 5_000}}
    path.write_text(yaml.safe_dump(settings))
    return path


def delta_extra(config: Path, work: Path, *args: str) -> Run:
    """`recluster ARGS --config CONFIG -v` by the delta extra's interpreter, its Spark and Python workers its own."""
    missing = f"no recluster[delta] environment at {DELTA_EXTRA_PYTHON} (run ./dev delta-extra)"
    assert DELTA_EXTRA_PYTHON.exists(), missing
    python = str(DELTA_EXTRA_PYTHON)
    environment = {**referee_environment(work), "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python}
    return subprocess.run(
        [python, "-m", "recluster.cli", *args, "--config", str(config), "-v"],
        capture_output=True,
        text=True,
        env=cli_environment(environment),
        cwd=work,
        timeout=WAIT_SECONDS * 2,
        check=False,
    )


@pytest.fixture(scope="module")
def runs(catalog_referee: Referee, metastore: Metastore, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The tables registered, then every run of this module (two at a time: each is mostly a JVM starting)."""
    root = tmp_path_factory.mktemp("names")
    rng = np.random.default_rng(46)
    events = root / "tables" / "events"
    appended = pa.concat_tables([append_random(events, rng, batch) for batch in range(APPENDS)])
    delta_events = root / "tables" / "delta_events"  # the one `run` by recluster[delta] rewrites
    delta_appended = pa.concat_tables([append_random(delta_events, rng, batch) for batch in range(APPENDS)])
    plain = root / "tables" / "plain"
    plain.mkdir(parents=True)
    pq.write_table(pa.table({"k": pa.array([1, 2, 3], pa.int64())}), plain / "part-0.parquet")
    catalog_referee.sql("CREATE DATABASE IF NOT EXISTS db")
    catalog_referee.sql(f"CREATE TABLE db.events USING delta LOCATION '{events}'")
    catalog_referee.sql(f"CREATE TABLE db.delta_events USING delta LOCATION '{delta_events}'")
    catalog_referee.sql(f"CREATE TABLE db.plain (k BIGINT) USING parquet LOCATION '{plain}'")
    before = {"files": set(DeltaTable(str(events)).file_uris()), "rows": rows_digest(appended)}
    delta_before = {"files": set(DeltaTable(str(delta_events)).file_uris()), "rows": rows_digest(delta_appended)}
    conf = {k: v for k, v in metastore.spark_conf().items() if k != "spark.sql.warehouse.dir"}
    config = config_file(root / "catalog.yaml", conf)
    jars = ",".join(str(jar) for jar in sorted(REFEREE_JARS.glob("*.jar")))
    delta_config = config_file(root / "delta.yaml", {**conf, "spark.jars": jars})
    no_catalog = config_file(root / "none.yaml", {})

    def table_runs() -> dict[str, Any]:
        info = run_cli("info", "db.events", "--config", config, "--json", cwd=root)
        return {"info": info, "run": run_cli("run", "db.events", "--final", "--config", config, cwd=root)}

    def error_runs() -> dict[str, Any]:
        return {
            "missing": run_cli("estimate", "db.missing", "--config", config, cwd=root),
            "plain": run_cli("sql", "ALTER TABLE spark_catalog.db.plain RECLUSTER", "--config", config, cwd=root),
            "no_catalog": run_cli("info", "db.events", "--config", no_catalog, cwd=root),
            "delta_extra": delta_extra(delta_config, root, "info", "db.events", "--json"),
            "delta_extra_run": delta_extra(delta_config, root, "run", "db.delta_events", "--final"),
        }

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.submit(table_runs), pool.submit(error_runs)
        done = {**first.result(), **second.result()}
    return {**done, "events": events, "before": before, "delta_events": delta_events, "delta_before": delta_before}


def test_info_names_a_table_of_the_metastore(runs: dict[str, Any]) -> None:
    info = runs["info"]
    assert info.returncode == 0, info.stderr
    assert f"db.events: {runs['events']}" in info.stderr.splitlines()
    measured = json.loads(info.stdout)
    assert measured["total_block_count"] == APPENDS
    assert measured["total_rows"] == runs["before"]["rows"][0]


@pytest.mark.parametrize(
    ("run", "table", "before"), [("run", "events", "before"), ("delta_extra_run", "delta_events", "delta_before")]
)
def test_run_final_reclusters_a_table_of_the_metastore_by_name(
    runs: dict[str, Any], run: str, table: str, before: str
) -> None:
    """`recluster run db.events --final`, and the same by recluster[delta] with Delta Spark's jars present."""
    done, location = runs[run], runs[table]
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"db.{table}: {location}" in done.stderr.splitlines()
    assert "stop=" in done.stdout
    rewritten = DeltaTable(str(location))
    after = set(rewritten.file_uris())
    assert not after & runs[before]["files"], "every file rewritten by the FINAL"
    assert len(after) < APPENDS
    assert rows_digest(rewritten.to_pyarrow_table()) == runs[before]["rows"]


@pytest.mark.parametrize(
    "run,line",
    [
        ("missing", "recluster: error: table db.missing not found in catalog spark_catalog"),
        (
            "plain",
            "recluster: error: spark_catalog.db.plain in catalog spark_catalog is not a Delta table (provider parquet)",
        ),
        (
            "no_catalog",
            "recluster: error: no catalog spark_catalog configured to find db.events in: set spark.conf "
            "spark.sql.catalogImplementation=hive and spark.hadoop.hive.metastore.uris (or "
            "spark.sql.catalog.spark_catalog) in the settings (docs/discovery.md#tables-by-name), or give the "
            "table's path",
        ),
    ],
)
def test_a_name_that_cannot_be_used_is_one_line(runs: dict[str, Any], run: str, line: str) -> None:
    done = runs[run]
    assert done.returncode == 1
    assert [text for text in done.stderr.splitlines() if text.startswith("recluster")] == [line], done.stderr


def test_with_delta_sparks_jars_present_on_pyspark_4_2(runs: dict[str, Any]) -> None:
    """recluster[delta] on pyspark 4.2, Delta Spark 4.4's jars in spark.jars: the session carries Delta's SQL
    extension and catalog (its log line), the name is found through Delta's catalog over the metastore."""
    done = runs["delta_extra"]
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        "Delta Spark on the classpath: spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension, "
        "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog"
    ) in done.stderr
    assert f"db.events: {runs['events']}" in done.stderr.splitlines()
    assert json.loads(done.stdout)["total_rows"] == runs["before"]["rows"][0]


def test_watch_finds_a_tables_entry_given_by_name(
    catalog_referee: Referee, metastore: Metastore, tmp_path: Path
) -> None:
    """`tables: [{uri: db.watched}]`: the job finds the table's location in the metastore once its session runs,
    and reclusters it there; the rows stay the same multiset."""
    rng = np.random.default_rng(47)
    table = tmp_path / "watched"
    appended = [append_random(table, rng, batch) for batch in range(APPENDS)]
    catalog_referee.sql("CREATE DATABASE IF NOT EXISTS db")
    catalog_referee.sql(f"CREATE TABLE db.watched USING delta LOCATION '{table}'")
    conf = {k: v for k, v in metastore.spark_conf().items() if k != "spark.sql.warehouse.dir"}
    config = config_file(tmp_path / "watch.yaml", conf)
    settings = yaml.safe_load(config.read_text())
    settings["tables"] = [{"uri": "db.watched"}]
    settings["stream"] = {
        "checkpoint_location": str(tmp_path / "checkpoint"),
        "trigger_interval_seconds": 0.5,
        "starting_version": "earliest",
    }
    config.write_text(yaml.safe_dump(settings))
    log = tmp_path / "watch.log"
    process = start_logged([sys.executable, "-m", "recluster.cli", "watch", "--config", str(config), "-v"], log)
    try:
        committed = f"table={table} commit status=committed"
        wait_for(lambda: committed in log.read_text(), "the table named db.watched reclustered", process, timeout=300)
    finally:
        if process.poll() is None:
            stop_watch(process, log)
        else:
            print(log.read_text(errors="replace")[-5000:])
    reclustered = DeltaTable(str(table))
    assert rows_digest(reclustered.to_pyarrow_table()) == rows_digest(pa.concat_tables(appended))
    assert len(reclustered.file_uris()) < APPENDS
