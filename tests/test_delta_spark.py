"""Delta Spark 4.4 as the referee (issue 31): tables Delta Spark writes, one per table feature, go through an
incremental round, a minor and a major optimize and FINAL; then Delta Spark itself reads identical rows (row ids
and row commit versions too), prunes files on the key, shows our commits as OPTIMIZE rewrites with nothing in the
change feed, streams across them without a duplicate, and writes after them (INSERT, DELETE, MERGE, OPTIMIZE,
RESTORE, VACUUM) exactly as on a copy that never saw recluster. The protocol is unchanged by our commits.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from recluster.cli import main
from recluster.core.scheduling import ProcessType
from recluster.engine.optimizer import optimize_table
from recluster.engine.rounds import recluster_table, snapshot_loader
from tests.delta_spark_tables import (
    KEY_DOMAIN,
    RECIPES,
    ROW_TRACKING_COLUMNS,
    Recipe,
    copy,
    our_versions,
    protocol,
    read_rows,
    rows,
    settings_for,
)
from tests.referee import Referee
from tests.table_shapes import rows_digest

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def rewrite_every_way(path: Path, spark: Any, recipe: Recipe) -> None:
    """An incremental round, a minor and a major optimize, then FINAL: all with recluster's defaults."""
    key = list(recipe.key) if recipe.key else None
    settings = settings_for(recipe)
    loader = snapshot_loader(str(path), settings, key)
    for kind in (None, ProcessType.MINOR, ProcessType.MAJOR, "final"):
        if kind is None or kind == "final":
            result = recluster_table(
                str(path), loader, settings=settings, spark_factory=lambda: spark, final=kind == "final"
            )
        else:
            result = optimize_table(loader, settings=settings, spark_factory=lambda: spark, kind=kind)
        assert result.totals.failures == 0 and result.totals.conflicts == 0, (kind, result)


def files_read(referee: Referee, path: Path, column: str) -> tuple[int, int]:
    """Files a predicate covering 0.5% of a key column's range reads, and the live files."""
    low = KEY_DOMAIN // 3
    answer, files = referee.scan(
        f"SELECT count(*) AS n FROM delta.`{path}` WHERE {column} BETWEEN {low} AND {low + KEY_DOMAIN // 200}"
    )
    assert answer[0]["n"] > 0
    return files, len(DeltaTable(str(path)).file_uris())


AFTER_OURS = (
    "INSERT INTO {t} (a, b, {label}, ts) SELECT id, -id - 1, 'after', timestamp_seconds(1800000000) FROM range(0, 300)",
    "DELETE FROM {t} WHERE a % 7 = 3",
    "MERGE INTO {t} AS target USING (SELECT id * 13 % 100000 AS a FROM range(0, 500)) AS source "
    "ON target.a = source.a WHEN MATCHED THEN UPDATE SET {label} = 'merged-after' "
    "WHEN NOT MATCHED THEN INSERT (a, b, {label}, ts) VALUES (source.a, 7, 'inserted', timestamp_seconds(1800000000))",
    "OPTIMIZE {t}",
)


@pytest.mark.parametrize("feature", list(RECIPES))
def test_delta_spark_reads_streams_and_writes_after_our_rewrites(
    feature: str, sources: Mapping[str, Path], referee: Referee, spark: Any, tmp_path: Path
) -> None:
    recipe = RECIPES[feature]
    path = copy(sources[feature], tmp_path / "t")
    shadow = copy(sources[feature], tmp_path / "shadow")
    read = read_rows(referee, path, recipe)
    expected = rows_digest(read)
    # the rows as plain data (the shadow's too: it is a copy)
    original = read.drop_columns([c for c in ROW_TRACKING_COLUMNS if c in read.column_names])
    before = protocol(path)
    start = DeltaTable(str(path)).version()
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"
    streamed = referee.stream(path, checkpoint, sink)
    assert rows_digest(streamed) == rows_digest(original)

    rewrite_every_way(path, spark, recipe)

    ours = our_versions(path, start)
    assert ours, "recluster committed nothing"
    assert rows(referee, path, recipe) == expected
    assert protocol(path) == before
    history = {entry["version"]: entry for entry in referee.history(path)}
    assert all(history[v]["operation"] == "OPTIMIZE" for v in ours)
    changes = referee.sql(f"SELECT count(*) AS n FROM table_changes_by_path('{path}', {ours[0]}, {ours[-1]})")
    assert changes[0]["n"] == 0
    for column in recipe.key or ("a", "b"):
        read, live = files_read(referee, path, column)
        assert read * 4 <= live, f"a 0.5% range on {column} read {read} of {live} files"

    target, label = f"delta.`{path}`", recipe.label
    referee.sql(AFTER_OURS[0].format(t=target, label=label))
    streamed = referee.stream(path, checkpoint, sink)
    appended = referee.query(f"SELECT * FROM {target} WHERE ts = timestamp_seconds(1800000000) AND b < 0")
    assert appended.num_rows == 300
    assert rows_digest(streamed) == rows_digest(pa.concat_tables([original, appended]))

    for statement in AFTER_OURS[:-1]:  # OPTIMIZE changes no row: the shadow's rows are the same without it
        referee.sql(statement.format(t=f"delta.`{shadow}`", label=label))
    for statement in AFTER_OURS[1:]:
        referee.sql(statement.format(t=target, label=label))
    assert rows_digest(referee.read(path)) == rows_digest(referee.read(shadow))
    if recipe.properties.get("delta.enableRowTracking") == "true":  # rows written after ours got fresh ids
        ids = referee.sql(f"SELECT count(*) AS n, count(DISTINCT _metadata.row_id) AS ids FROM {target}")[0]
        assert ids["n"] == ids["ids"]
    referee.sql(f"RESTORE TABLE {target} TO VERSION AS OF {start}")
    assert rows(referee, path, recipe) == expected
    referee.sql(f"VACUUM {target} RETAIN 0 HOURS")
    assert rows(referee, path, recipe) == expected
    assert protocol(path) == before


def test_cluster_by_on_a_liquid_table_changes_the_clustering_columns_delta_sees(
    sources: Mapping[str, Path], referee: Referee, spark: Any, tmp_path: Path
) -> None:
    path = copy(sources["liquid-clustering"], tmp_path / "t")
    assert referee.sql(f"DESCRIBE DETAIL delta.`{path}`")[0]["clusteringColumns"] == ["a", "b"]
    before = protocol(path)
    assert main(["sql", f"ALTER TABLE '{path}' CLUSTER BY (b, s)"]) == 0
    assert referee.sql(f"DESCRIBE DETAIL delta.`{path}`")[0]["clusteringColumns"] == ["b", "s"]
    assert protocol(path) == before
    expected = rows(referee, path, RECIPES["liquid-clustering"])
    settings = settings_for(RECIPES["liquid-clustering"])
    loader = snapshot_loader(str(path), settings, None)
    assert loader().key.names == ("b", "s") and loader().key.liquid
    result = recluster_table(str(path), loader, settings=settings, spark_factory=lambda: spark, final=True)
    assert result.totals.files_added > 0
    assert rows(referee, path, RECIPES["liquid-clustering"]) == expected
    referee.sql(f"OPTIMIZE delta.`{path}`")
    assert rows(referee, path, RECIPES["liquid-clustering"]) == expected
