"""Our own log commits: create-if-absent, metadata-only property changes, column lists that survive any name."""

from __future__ import annotations

import datetime as dt
import json
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import given
from hypothesis import strategies as st

from recluster.core.keys import format_columns, parse_columns
from recluster.delta.log_writer import set_table_properties, write_commit
from recluster.delta.storage import put_if_absent


def test_put_if_absent_lets_exactly_one_of_racing_writers_create_a_file(tmp_path: Path) -> None:
    results: list[bool] = []
    barrier = threading.Barrier(8)

    def write(i: int) -> None:
        barrier.wait()
        results.append(put_if_absent(str(tmp_path), "commit.json", f"writer {i}".encode(), None))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [False] * 7 + [True]
    assert (tmp_path / "commit.json").read_text().startswith("writer ")
    assert [p.name for p in tmp_path.iterdir()] == ["commit.json"]  # no temporary file left behind


def test_a_commit_version_is_never_overwritten(tmp_path: Path) -> None:
    write_deltalake(str(tmp_path), pa.table({"k": [1, 2]}))
    before = (tmp_path / "_delta_log" / f"{0:020d}.json").read_bytes()
    assert not write_commit(str(tmp_path), None, 0, [{"commitInfo": {"operation": "X"}}])
    assert (tmp_path / "_delta_log" / f"{0:020d}.json").read_bytes() == before


def _protocol(path: Path) -> tuple[int, int, list[str] | None, list[str] | None]:
    p = DeltaTable(str(path)).protocol()
    return p.min_reader_version, p.min_writer_version, p.reader_features, p.writer_features


@pytest.mark.parametrize("ntz", [True, False], ids=["reader3-writer7", "legacy-1-2"])
def test_cluster_by_property_commits_metadata_alone_and_keeps_the_protocol(tmp_path: Path, ntz: bool) -> None:
    rows = {"k": [3, 1, 2], "s": ["a", "b", "c"]}
    if ntz:  # delta-rs writes a timestamp_ntz column at reader 3 / writer 7 with the timestampNtz feature
        rows["t"] = [dt.datetime(2024, 1, i) for i in (1, 2, 3)]  # type: ignore[list-item]
    write_deltalake(str(tmp_path), pa.table(rows), configuration={"delta.appendOnly": "false"})
    protocol = _protocol(tmp_path)
    assert (protocol[0] == 3) is ntz
    version = set_table_properties(
        tmp_path, {"recluster.clusterBy": "k", "delta.logRetentionDuration": "interval 9 days"}
    )
    table = DeltaTable(str(tmp_path))
    assert version == table.version() == 1
    assert _protocol(tmp_path) == protocol
    assert table.metadata().configuration["recluster.clusterBy"] == "k"
    assert table.metadata().configuration["delta.appendOnly"] == "false"  # earlier properties kept
    actions = [json.loads(line) for line in (tmp_path / "_delta_log" / f"{1:020d}.json").read_text().splitlines()]
    assert [next(iter(a)) for a in actions] == ["commitInfo", "metaData"]
    assert table.to_pyarrow_table().num_rows == 3


def test_column_lists_with_commas_backquotes_dots_and_spaces() -> None:
    assert parse_columns("a, b") == ["a", "b"]
    assert parse_columns("`x,y`, my key,a.b") == ["x,y", "my key", "a.b"]
    assert parse_columns("`a``b`") == ["a`b"]


@given(st.lists(st.text(min_size=1).filter(lambda n: n == n.strip() and n.strip()), min_size=1, max_size=4))
def test_format_columns_round_trips(names: list[str]) -> None:
    assert parse_columns(format_columns(names)) == names


def test_property_change_after_a_checkpoint_keeps_the_metadata_exactly(tmp_path: Path) -> None:
    """The metaData we commit is replayed from a Parquet checkpoint: maps stay objects, every field is kept."""
    write_deltalake(str(tmp_path), pa.table({"k": [1, 2], "p": ["a", "b"]}), partition_by=["p"])
    write_deltalake(str(tmp_path), pa.table({"k": [3], "p": ["a"]}), mode="append")
    DeltaTable(str(tmp_path)).create_checkpoint()
    before = DeltaTable(str(tmp_path)).metadata()
    set_table_properties(tmp_path, {"recluster.clusterBy": "k"})
    logged = json.loads((tmp_path / "_delta_log" / f"{2:020d}.json").read_text().splitlines()[1])["metaData"]
    assert logged["format"] == {"provider": "parquet", "options": {}}
    after = DeltaTable(str(tmp_path)).metadata()
    assert (after.id, after.partition_columns, after.created_time) == (
        before.id,
        before.partition_columns,
        before.created_time,
    )
    assert after.configuration == {**before.configuration, "recluster.clusterBy": "k"}
    assert DeltaTable(str(tmp_path)).to_pyarrow_table().num_rows == 3


def test_set_table_properties_never_writes_a_metadata_action_it_could_not_replay(tmp_path, monkeypatch):
    """A store whose reads come back wrong (seen with a GCS emulator) once gave a replay without metaData: the
    property commit must then fail, not write `{"metaData": {"configuration": ...}}` and make the table unreadable."""
    import pyarrow as pa
    import pytest
    from deltalake import DeltaTable, write_deltalake

    from recluster.core.errors import TableError
    from recluster.delta import log_writer
    from recluster.delta.replay import LogState

    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"k": [1, 2, 3]}))
    monkeypatch.setattr(log_writer, "replay_log", lambda *args, **kwargs: LogState(0, {}, {}, {}))
    with pytest.raises(TableError, match=r"lacks id, format, schemaString, partitionColumns"):
        log_writer.set_table_properties(path, {"recluster.clusterBy": "k"})
    assert DeltaTable(str(path)).version() == 0
    assert DeltaTable(str(path)).to_pyarrow_table().num_rows == 3
