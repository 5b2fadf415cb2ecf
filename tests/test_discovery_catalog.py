"""The job finding its tables in a catalog (docs/discovery.md): the standalone Hive Metastore with Delta tables
registered by Delta Spark, a `recluster watch` process whose Spark session uses the metastore as its catalog (no Delta
jars: SHOW TABLE EXTENDED reads the catalog's entries only). A database's DBPROPERTIES reach its tables, a table's own
property overrides them, the `recluster.enabled` filter keeps exactly the enabled tables (50 registered, 10 of them
disabled: the job clusters exactly the 40, their rows whole, and commits nothing to the others), a table registered
later is taken up within the interval and a dropped one let go without errors."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable, write_deltalake

from recluster.delta.log_writer import set_table_properties
from tests.helpers import append_random, row_multiset, start_logged, stop_watch, wait_for
from tests.hive_metastore import Metastore
from tests.referee import Referee
from tests.spark_cluster import free_port

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TABLES, DISABLED = 50, 10


def register(referee: Referee, path: Path, name: str, rng: np.random.Generator, **properties: str) -> None:
    """A table written by delta-rs (three appends), registered in the metastore by Spark SQL over its location."""
    for _ in range(3):
        keys = rng.integers(0, 10**6, 500)
        write_deltalake(str(path), pa.table({"k": pa.array(keys, pa.int64())}), mode="append")
    if properties:
        set_table_properties(path, properties)
    referee.sql(f"CREATE TABLE shop.{name} USING delta LOCATION '{path}'")


def job_status(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=10) as response:
        tables = json.load(response)["tables"]
    return {table["table"]: table for table in tables}


def statuses_when(port: int, condition: Any, what: str, process: subprocess.Popen[bytes]) -> dict[str, Any]:
    seen: list[dict[str, Any]] = []

    def holds() -> bool:
        time.sleep(1)  # each request asks the driver's JVM for the query's progress: not 20 times a second
        try:
            seen[:] = [job_status(port)]
        except OSError:
            return False
        return bool(condition(seen[0]))

    wait_for(holds, what, process, timeout=300)
    return seen[0]


def test_a_catalog_database_is_watched_with_its_inherited_settings(
    catalog_referee: Referee, metastore: Metastore, tmp_path: Path
) -> None:
    rng = np.random.default_rng(44)
    catalog_referee.sql(
        "CREATE DATABASE shop WITH DBPROPERTIES "
        "('recluster.enabled' = 'true', 'recluster.clusterBy' = 'k', 'recluster.policy' = 'levels')"
    )
    paths = {f"t{index:02d}": tmp_path / "tables" / f"t{index:02d}" for index in range(TABLES)}
    for index, (name, path) in enumerate(paths.items()):
        own = {"recluster.enabled": "false"} if index < DISABLED else {}
        if index == DISABLED:
            own = {"recluster.policy": "absorb"}
        register(catalog_referee, path, name, rng, **own)
    enabled = {str(path) for name, path in paths.items() if int(name[1:]) >= DISABLED}
    registered = {str(path): DeltaTable(str(path)).version() for path in paths.values()}
    rows = {uri: row_multiset(DeltaTable(uri).to_pyarrow_table()) for uri in enabled}
    plain = f"t{DISABLED + 1:02d}"  # enabled, with no property of its own
    port = free_port()
    config = tmp_path / "recluster.yaml"
    catalog = {"databases": "shop", "where": {"recluster.enabled": "true"}}
    spark_conf = {k: v for k, v in metastore.spark_conf().items() if k != "spark.sql.warehouse.dir"}
    config.write_text(
        yaml.safe_dump(
            {
                "discovery": {"interval_seconds": 2, "catalogs": [catalog]},
                "spark": {"master": "local[1]", "conf": spark_conf},
                "stream": {"checkpoint_location": str(tmp_path / "checkpoint"), "trigger_interval_seconds": 0.5},
                "http": {"port": port},
            }
        )
    )
    log = tmp_path / "watch.log"
    process = start_logged([sys.executable, "-m", "recluster.cli", "watch", "--config", str(config), "-v"], log)
    try:
        found = statuses_when(port, lambda s: set(s) == enabled, f"the {len(enabled)} enabled tables", process)
        database = "database spark_catalog.shop"
        inherited = {s["key"]: (s["value"], s["origin"]) for s in found[str(paths[plain])]["settings"]}
        assert inherited == {
            "recluster.clusterBy": ("k", database),
            "recluster.enabled": ("true", database),
            "recluster.policy": ("levels", database),
        }
        assert found[str(paths[plain])]["policy"] == "levels"
        clustered = statuses_when(
            port,
            lambda s: all(s[uri]["totals"]["merges"] >= 1 for uri in enabled),
            f"the {len(enabled)} enabled tables clustered",
            process,
        )
        assert set(clustered) == enabled
        overridden = found[str(paths[f"t{DISABLED:02d}"])]
        assert {"key": "recluster.policy", "value": "absorb", "origin": "table"} in overridden["settings"]
        assert overridden["policy"] == "absorb"

        later = tmp_path / "tables" / "later"
        register(catalog_referee, later, "later", rng)
        statuses_when(port, lambda s: str(later) in s, "a table registered later", process)
        catalog_referee.sql(f"DROP TABLE shop.{plain}")  # external: the files stay, the catalog forgets it
        after = statuses_when(port, lambda s: str(paths[plain]) not in s, "a dropped table let go", process)
        assert set(after) == (enabled - {str(paths[plain])}) | {str(later)}
        assert all(status["error"] is None for status in after.values()), after
    finally:
        if process.poll() is None:
            stop_watch(process, log)
        else:
            print(log.read_text(errors="replace")[-5000:])
    assert "reason=source_failed" not in log.read_text()
    untouched = {uri: DeltaTable(uri).version() for uri in registered if uri not in enabled}
    assert untouched == {uri: version for uri, version in registered.items() if uri not in enabled}  # no commit of ours
    for uri in enabled:  # each enabled table clustered, its rows whole
        table = DeltaTable(uri)
        assert table.version() > registered[uri] and row_multiset(table.to_pyarrow_table()) == rows[uri]


def test_a_bad_catalog_address_is_one_line_and_the_path_tables_go_on(tmp_path: Path) -> None:
    """Discovery from a metastore nothing listens on, next to a table named by its path: the catalog's source
    fails on one line (Hive's client retries bounded by recluster.spark.session.HIVE_CLIENT_DEFAULTS) and the path
    table is reclustered with its rows whole."""
    rng = np.random.default_rng(45)
    table = tmp_path / "tables" / "by_path"
    appended = [append_random(table, rng, batch) for batch in range(6)]
    port = free_port()
    address = f"thrift://127.0.0.1:{free_port()}"
    config = tmp_path / "recluster.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "discovery": {"interval_seconds": 2, "catalogs": [{"databases": "shop"}]},
                "tables": [{"uri": str(table)}],
                "clustering": {"target_rows": 5_000},
                "spark": {
                    "master": "local[1]",
                    "conf": {
                        "spark.sql.catalogImplementation": "hive",
                        "spark.hadoop.hive.metastore.uris": address,
                        "spark.sql.warehouse.dir": str(tmp_path / "warehouse"),
                    },
                },
                "stream": {
                    "checkpoint_location": str(tmp_path / "checkpoint"),
                    "trigger_interval_seconds": 0.5,
                    "starting_version": "earliest",
                },
                "http": {"port": port},
            }
        )
    )
    log = tmp_path / "watch.log"
    process = start_logged([sys.executable, "-m", "recluster.cli", "watch", "--config", str(config), "-v"], log)
    try:
        committed = f"table={table} commit status=committed"
        wait_for(lambda: committed in log.read_text(), "the path table reclustered", process, timeout=300)
        wait_for(lambda: "reason=source_failed" in log.read_text(), "the catalog's failure logged", process)
    finally:
        if process.poll() is None:
            stop_watch(process, log)
        else:
            print(log.read_text(errors="replace")[-5000:])
    failures = [line for line in log.read_text().splitlines() if "reason=source_failed" in line]
    assert failures and all("source=spark_catalog" in line for line in failures), failures
    assert row_multiset(DeltaTable(str(table)).to_pyarrow_table()) == row_multiset(pa.concat_tables(appended))
    assert len(DeltaTable(str(table)).file_uris()) < len(appended)
