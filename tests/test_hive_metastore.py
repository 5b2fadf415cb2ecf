"""The standalone Hive Metastore (tests/hive_metastore, `./dev metastore`) as the discovery tests use it: Delta Spark
registers Delta tables in it, by Spark SQL over an existing table's location and by its own CREATE TABLE AS SELECT,
and a Spark session on the metastore lists them with their locations."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from tests.referee import Referee


def test_delta_tables_registered_in_the_metastore_are_listed_with_their_locations(
    catalog_referee: Referee, tmp_path: Path
) -> None:
    path_table = tmp_path / "events"
    write_deltalake(str(path_table), pa.table({"id": pa.array(range(100), pa.int64())}))
    catalog_referee.sql("CREATE DATABASE IF NOT EXISTS registered")
    catalog_referee.sql(f"CREATE TABLE registered.events USING delta LOCATION '{path_table}'")
    catalog_referee.sql(
        "CREATE TABLE registered.made USING delta TBLPROPERTIES ('recluster.enabled' = 'true') "
        "AS SELECT id, id % 7 AS k FROM range(50)"
    )
    rows = catalog_referee.sql("SHOW TABLE EXTENDED IN registered LIKE '*'")
    listed = {row["tableName"]: row["information"] for row in rows}
    assert set(listed) == {"events", "made"}
    assert all("Provider: delta" in info for info in listed.values())
    assert f"Location: file:{path_table}" in listed["events"]
    made = next(line for line in listed["made"].splitlines() if line.startswith("Location: "))
    location = made.removeprefix("Location: ")
    assert DeltaTable(location).metadata().configuration == {"recluster.enabled": "true"}
    assert DeltaTable(location).to_pyarrow_table().num_rows == 50
    assert catalog_referee.sql("SELECT count(*) AS n FROM registered.events") == [{"n": 100}]
