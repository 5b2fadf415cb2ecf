"""Tables shaped the way Spark, Databricks and delta-rs write them, through FINAL, minor and major: the multiset of
rows, the schema and the protocol are unchanged, read back by delta-rs AND by DuckDB's delta extension; no live
file keeps a deletion vector a rewrite applied; every live file exists.

The deletion-vector tables are written protocol-exactly by tests/table_shapes.py (inline and file vectors,
RoaringBitmapArray by pyroaring, z85 paths with a prefix) and checked by both readers before any test uses them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import recluster.delta.commit as log_commit
from recluster.cli import main
from recluster.core.scheduling import ProcessType
from recluster.delta.log_writer import set_table_properties
from recluster.delta.replay import replay_log
from recluster.engine.api import table_info
from recluster.engine.optimizer import optimize_table
from recluster.engine.rounds import recluster_table, snapshot_loader
from recluster.settings import CLUSTER_BY_PROPERTY, Settings
from tests.table_shapes import (
    add_deletion_vector,
    read_with_delta_rs,
    read_with_duckdb,
    rows_digest,
    set_protocol_features,
    write_dv_table,
    write_escaped_partition_table,
)

pytestmark = pytest.mark.spark


def shape(path: Path) -> tuple[Any, ...]:
    """What a rewrite must keep: the schema and the protocol."""
    table = DeltaTable(str(path))
    protocol = table.protocol()
    return (
        table.schema().to_json(),
        protocol.min_reader_version,
        protocol.min_writer_version,
        sorted(protocol.reader_features or []),
        sorted(protocol.writer_features or []),
    )


def assert_same_rows_everywhere(path: Path, expected: tuple[int, str]) -> None:
    """delta-rs and DuckDB both read exactly `expected`; every live file exists."""
    assert rows_digest(read_with_delta_rs(str(path))) == expected
    assert rows_digest(read_with_duckdb(str(path))) == expected
    missing = [u for u in DeltaTable(str(path)).file_uris() if not os.path.exists(u.removeprefix("file://"))]
    assert not missing, f"live files missing on disk: {missing[:3]}"


def live_vectors(path: Path) -> dict[str, Any]:
    return dict(replay_log(str(path), None, DeltaTable(str(path)).version()).deletion_vectors)


def final(path: Path, spark: Any, settings: Settings | None = None, cluster_by: list[str] | None = None) -> Any:
    chosen = settings or Settings()
    loader = snapshot_loader(str(path), chosen, cluster_by)
    return recluster_table(str(path), loader, settings=chosen, spark_factory=lambda: spark, final=True)


def optimize(path: Path, spark: Any, kind: ProcessType, cluster_by: list[str] | None = None) -> Any:
    settings = Settings()
    loader = snapshot_loader(str(path), settings, cluster_by)
    return optimize_table(loader, settings=settings, spark_factory=lambda: spark, kind=kind)


@pytest.fixture(scope="module")
def dv_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The issue's table: 40 files x 20,000 rows, vectors on 25 files (12 inline, 13 in files)."""
    location = tmp_path_factory.mktemp("dv") / "source"
    table = write_dv_table(str(location), files=40, rows_per_file=20_000, dv_files=25, inline=12)
    assert rows_digest(read_with_delta_rs(str(location))) == rows_digest(table.expected)
    return location


def copy_table(source: Path, target: Path) -> Path:
    import shutil

    shutil.copytree(source, target)
    return target


def test_final_on_a_deletion_vector_table_writes_only_live_rows(dv_source: Path, tmp_path: Path, spark: Any) -> None:
    path = copy_table(dv_source, tmp_path / "t")
    expected = rows_digest(read_with_delta_rs(str(path)))
    before = shape(path)
    assert len(live_vectors(path)) == 25
    set_table_properties(path, {CLUSTER_BY_PROPERTY: "k"})
    result = final(path, spark)
    assert result.totals.failures == 0 and result.totals.conflicts == 0
    assert_same_rows_everywhere(path, expected)
    assert shape(path) == before
    assert live_vectors(path) == {}
    info = table_info(str(path), settings=Settings())
    assert info.info.table.average_depth <= 1.5
    assert info.info.table.total_rows == expected[0]


@pytest.mark.parametrize("ratio", ["0.1", "0.000001"], ids=["default-ratio", "any-deleted-row"])
def test_major_purges_files_whose_vectors_hide_more_than_the_duplicate_ratio(
    dv_source: Path, tmp_path: Path, spark: Any, ratio: str
) -> None:
    path = copy_table(dv_source, tmp_path / "t")
    expected = rows_digest(read_with_delta_rs(str(path)))
    rows = {
        a["path"]: a["num_records"] for a in pa.table(DeltaTable(str(path)).get_add_actions(flatten=True)).to_pylist()
    }
    light = {p for p, v in live_vectors(path).items() if v.cardinality <= rows[p] * float(ratio)}
    set_table_properties(path, {CLUSTER_BY_PROPERTY: "k", "self-optimizing.major.trigger.duplicate-ratio": ratio})
    result = optimize(path, spark, ProcessType.MAJOR)
    assert result.totals.tasks >= 1 and result.totals.failures == 0
    assert_same_rows_everywhere(path, expected)
    assert set(live_vectors(path)) == light  # only the files at or below the ratio keep their vectors
    if ratio != "0.1":
        assert not light


def test_minor_on_a_deletion_vector_table(dv_source: Path, tmp_path: Path, spark: Any) -> None:
    path = copy_table(dv_source, tmp_path / "t")
    expected = rows_digest(read_with_delta_rs(str(path)))
    set_table_properties(path, {CLUSTER_BY_PROPERTY: "k"})
    before = len(DeltaTable(str(path)).file_uris())
    result = optimize(path, spark, ProcessType.MINOR)
    assert result.totals.tasks >= 1
    assert len(DeltaTable(str(path)).file_uris()) < before
    assert_same_rows_everywhere(path, expected)
    assert live_vectors(path) == {}  # every file was a fragment: all rewritten


def test_partitioned_deletion_vector_table(tmp_path: Path, spark: Any) -> None:
    path = tmp_path / "t"
    table = write_dv_table(str(path), files=12, rows_per_file=2_000, dv_files=8, inline=3, partitioned=True)
    expected = rows_digest(table.expected)
    assert rows_digest(read_with_delta_rs(str(path))) == expected
    set_table_properties(path, {CLUSTER_BY_PROPERTY: "k"})
    final(path, spark)
    assert_same_rows_everywhere(path, expected)
    assert live_vectors(path) == {}


@pytest.mark.parametrize("point", ["before-merge", "before-check", "after-check"])
def test_a_delete_adding_a_vector_to_an_input_during_a_rewrite_wins(
    tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    """A DELETE that adds (or replaces) the vector of an input between plan and commit: our commit is refused at
    whichever point of the commit path it lands, the next round re-plans, and the deleted rows stay deleted."""
    path = tmp_path / "t"
    write_dv_table(str(path), files=6, rows_per_file=1_000, dv_files=2, inline=1)
    set_table_properties(path, {CLUSTER_BY_PROPERTY: "k"})
    victim = sorted(a["path"] for a in pa.table(DeltaTable(str(path)).get_add_actions(flatten=True)).to_pylist())[0]
    fired: list[str] = []

    def delete_now() -> None:
        if not fired:
            fired.append(point)
            add_deletion_vector(str(path), victim, [0, 1, 2, 3, 4])

    if point == "before-merge":
        import recluster.engine.rounds as rounds

        real_write = rounds.write_task

        def write_after_delete(*args: Any, **kwargs: Any) -> Any:
            delete_now()
            return real_write(*args, **kwargs)

        monkeypatch.setattr(rounds, "write_task", write_after_delete)
    else:
        real_check = log_commit.rewrite_conflict

        def check(*args: Any, **kwargs: Any) -> Any:
            if point == "before-check":
                delete_now()
                return real_check(*args, **kwargs)
            problem = real_check(*args, **kwargs)
            delete_now()
            return problem

        monkeypatch.setattr(log_commit, "rewrite_conflict", check)
    settings = Settings()
    loader = snapshot_loader(str(path), settings, None)
    result = recluster_table(str(path), loader, settings=settings, spark_factory=lambda: spark, final=True)
    assert fired and result.totals.conflicts >= 1
    expected = rows_digest(read_with_delta_rs(str(path)))  # the delete's view: five more rows gone
    monkeypatch.undo()
    final(path, spark)
    assert_same_rows_everywhere(path, expected)
    assert live_vectors(path) == {}


def test_escaped_partition_values_through_final_and_minor(tmp_path: Path, spark: Any) -> None:
    path = tmp_path / "t"
    table = write_escaped_partition_table(str(path))
    expected = rows_digest(table)
    assert_same_rows_everywhere(path, expected)
    set_table_properties(path, {CLUSTER_BY_PROPERTY: "k"})
    before = shape(path)
    files = len(DeltaTable(str(path)).file_uris())
    optimize(path, spark, ProcessType.MINOR)
    assert_same_rows_everywhere(path, expected)
    assert len(DeltaTable(str(path)).file_uris()) < files
    final(path, spark)
    assert_same_rows_everywhere(path, expected)
    assert shape(path) == before
    for uri in DeltaTable(str(path)).file_uris():  # outputs sit in their partition's directory, as named on disk
        assert os.path.exists(uri.removeprefix("file://"))


@pytest.mark.parametrize("key", [["a.b"], ["my key"], ["x,y", "a.b"]])
def test_column_names_with_dots_spaces_and_commas(tmp_path: Path, spark: Any, key: list[str]) -> None:
    path = tmp_path / "t"
    for batch in range(4):
        rows = {"a.b": [(batch * 7919 + i * 104_729) % 1000 for i in range(200)], "my key": [i % 9 for i in range(200)]}
        rows["x,y"] = [(i * 37 + batch * 11) % 500 for i in range(200)]
        write_deltalake(str(path), pa.table(rows), mode="append")
    expected = rows_digest(read_with_delta_rs(str(path)))
    result = final(path, spark, cluster_by=key)
    assert result.totals.tasks >= 1
    assert_same_rows_everywhere(path, expected)


def test_cluster_by_statement_keeps_the_protocol_of_a_reader3_writer7_table(tmp_path: Path) -> None:
    import datetime as dt

    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"k": [1, 2], "t": [dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2)]}))
    set_protocol_features(str(path), ["timestampNtz", "v2Checkpoint"], ["timestampNtz", "v2Checkpoint"])
    before = shape(path)
    assert before[1:3] == (3, 7)
    assert main(["sql", f"ALTER TABLE '{path}' CLUSTER BY (k)"]) == 0
    assert shape(path) == before
    assert DeltaTable(str(path)).metadata().configuration[CLUSTER_BY_PROPERTY] == "k"


@pytest.mark.parametrize("feature", ["icebergCompatV1", "icebergCompatV2"])
def test_unsupported_writer_features_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], feature: str
) -> None:
    path = tmp_path / "t"
    for batch in range(3):
        write_deltalake(str(path), pa.table({"k": [3 - batch, batch]}), mode="append")
    set_protocol_features(str(path), [], [feature, "domainMetadata"])
    version = DeltaTable(str(path)).version()
    capsys.readouterr()
    assert main(["run", str(path), "--cluster-by", "k", "--final"]) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert error == [
        f"recluster: error: unsupported Delta writer features: {feature} (recluster cannot rewrite "
        f"files of such a table correctly)"
    ]
    assert DeltaTable(str(path)).version() == version


def test_our_vector_decoding_matches_delta_rs_and_the_fixture_matches_duckdb(dv_source: Path) -> None:
    """The fixture is read identically by delta-rs and DuckDB, and recluster's own decoder (inline and file vectors,
    one under a prefix, each file holding a decoy vector before it) keeps exactly delta-rs's rows."""
    from recluster.core.deletion_vectors import keep_mask
    from recluster.delta.replay import read_deleted_positions

    expected = rows_digest(read_with_delta_rs(str(dv_source)))
    assert rows_digest(read_with_duckdb(str(dv_source))) == expected
    vectors = live_vectors(dv_source)
    kinds = {v.storage_type for v in vectors.values()}
    assert kinds == {"i", "u"} and any(
        v.path_or_inline_dv[:2] == "ab" for v in vectors.values() if v.storage_type == "u"
    )
    masks = pa.table(DeltaTable(str(dv_source)).deletion_vectors()).to_pylist()
    assert len(masks) == len(vectors) == 25
    for entry in masks:
        path = next(p for p in vectors if entry["filepath"].endswith(p))
        theirs = entry["selection_vector"]
        ours = keep_mask(len(theirs), read_deleted_positions(str(dv_source), None, vectors[path]))
        assert ours.tolist() == theirs
