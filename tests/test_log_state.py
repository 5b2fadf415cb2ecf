"""One replay of the Delta log per snapshot version (issue 42, docs/architecture.md#the-log-state).

A round on a liquid, deletion-vector, row-tracking table Delta Spark wrote replays the log at most once per version
it reads, with the rows (and their row ids) unchanged as Delta Spark reads them; a state advanced by the commits read
since equals a replay at the later version; `_last_checkpoint` is a hint: stale, missing, wrong or beyond the version
wanted, the replay is the same; a commit finds its version without reopening the table with delta-rs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import recluster.delta.replay as replay_module
import recluster.delta.snapshot as snapshot_module
from recluster.delta.log import CommitEntry, read_commits
from recluster.delta.log_writer import commit_next_version, set_table_properties
from recluster.delta.replay import LogState, replay_log, replays
from recluster.engine.rounds import recluster_table, snapshot_loader
from recluster.settings import CommitSettings
from tests.delta_spark_tables import DML, RECIPES, copy, rows, settings_for
from tests.referee import Referee
from tests.s3_server import S3Server

RECIPE = RECIPES["liquid-clustering"]
"""Liquid clustering, deletion vectors from a DELETE, row tracking, and a checkpoint at version 3 (the replay
starts from the one `_last_checkpoint` names): the shared feature table (tests/delta_spark_tables.py), written once
a run."""


@pytest.fixture(scope="module")
def source(sources: Mapping[str, Path]) -> Path:
    return sources[RECIPE.name]


class DeltaRsLoads:
    """Counts the tables recluster opens with delta-rs (every open goes through `snapshot.open_table`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        counter = self

        class CountingTable(DeltaTable):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                counter.count += 1
                super().__init__(*args, **kwargs)

        monkeypatch.setattr(snapshot_module, "DeltaTable", CountingTable)


def no_spark() -> Any:
    raise AssertionError("these merges run in the process")


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("final", [False, True], ids=["round", "final"])
def test_a_round_replays_the_log_at_most_once_per_snapshot_version(
    final: bool, source: Path, referee: Referee, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = copy(source, tmp_path / "t")
    assert json.loads((path / "_delta_log" / "_last_checkpoint").read_text())["version"] == 3
    expected = rows(referee, path, RECIPE)  # every row with its row id and row commit version
    start = DeltaTable(str(path)).version()
    loads, replayed = DeltaRsLoads(monkeypatch), replays()
    loader = snapshot_loader(str(path), settings_for(RECIPE), None)
    result = recluster_table(str(path), loader, settings=settings_for(RECIPE), spark_factory=no_spark, final=final)
    replayed = replays() - replayed
    monkeypatch.undo()
    end = DeltaTable(str(path)).version()
    print(f"final={final} rounds={result.rounds} versions={start}..{end} replays={replayed} delta-rs={loads.count}")
    assert result.totals.tasks >= 1 and result.totals.conflicts == 0 and result.totals.failures == 0
    assert end - start == result.totals.tasks
    assert replayed <= result.rounds + 1  # the versions snapshots were read at: the first and one per round
    assert loads.count <= result.rounds + 2  # one open per snapshot (and the range-bounds reload): none per commit
    assert rows(referee, path, RECIPE) == expected


@pytest.mark.spark
@pytest.mark.slow
def test_a_state_advanced_by_the_commits_since_equals_a_replay(source: Path, referee: Referee, tmp_path: Path) -> None:
    """Delta Spark's OPTIMIZE removes files (and their vectors); a property change logs metaData; UPDATE and MERGE
    re-add files with new deletion vectors and remove them with their old ones, and MERGE's inserts raise the row-id
    high water mark."""
    path = copy(source, tmp_path / "t")
    before = replay_log(str(path), None, DeltaTable(str(path)).version())
    target = f"delta.`{path}`"
    for statement in ("OPTIMIZE {t}", "ALTER TABLE {t} SET TBLPROPERTIES ('k' = 'v')", *DML[1:]):
        referee.sql(statement.format(t=target, label="s"))
    latest = DeltaTable(str(path)).version()
    advanced = before.advanced(list(read_commits(str(path), before.version + 1, latest, None)))
    replayed = replay_log(str(path), None, latest)
    assert advanced.version == replayed.version == latest
    assert advanced.deletion_vectors == replayed.deletion_vectors and replayed.deletion_vectors
    assert advanced.row_ids == replayed.row_ids and replayed.row_ids != before.row_ids
    assert advanced.metadata == replayed.metadata and advanced.metadata["configuration"]["k"] == "v"
    assert advanced.protocol == replayed.protocol
    assert {k: json.loads(d["configuration"]) for k, d in advanced.domains.items()} == {
        k: json.loads(d["configuration"]) for k, d in replayed.domains.items()
    }


@pytest.fixture
def checkpointed(tmp_path: Path) -> Iterator[Path]:
    """Versions 0..6 by delta-rs, checkpoints at 2 and 4 (`_last_checkpoint` names 4), a property set at 5."""
    path = tmp_path / "t"
    for version in range(5):
        write_deltalake(str(path), pa.table({"k": [version]}), mode="append")
        if version in (2, 4):
            DeltaTable(str(path)).create_checkpoint()
    set_table_properties(path, {"recluster.clusterBy": "k"})
    write_deltalake(str(path), pa.table({"k": [5]}), mode="append")
    yield path


def hint(path: Path, version: int | None) -> None:
    last = path / "_delta_log" / "_last_checkpoint"
    if version is None:
        last.unlink()
    elif version < 0:
        last.write_text('{"version": 4, "parts": "many"')
    else:
        last.write_text(json.dumps({"version": version, "size": 1}))


def counted_listings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    listed: list[int] = []
    real: Callable[..., Any] = replay_module._listed_files

    def listing(*args: Any) -> Any:
        listed.append(args[-1])
        return real(*args)

    monkeypatch.setattr(replay_module, "_listed_files", listing)
    return listed


def comparable(state: LogState) -> tuple[Any, ...]:
    return state.version, state.protocol, state.metadata, state.domains


@pytest.mark.parametrize(
    ("hinted", "cleaned", "listed"),
    [
        (4, False, False),  # the hint: checkpoint 4, commits 5 and 6, nothing listed
        (None, False, True),  # no hint: a listing finds checkpoint 4
        (2, False, False),  # a stale hint: checkpoint 2 and the commits after it, all still there
        (2, True, True),  # stale, and the commits before checkpoint 4 cleaned up: the listing decides
        (3, False, True),  # a hint naming a checkpoint that is not there
        (9, False, True),  # a hint beyond the version wanted
        (-1, False, True),  # a malformed hint
    ],
)
def test_last_checkpoint_is_a_hint(
    checkpointed: Path, monkeypatch: pytest.MonkeyPatch, hinted: int | None, cleaned: bool, listed: bool
) -> None:
    expected = replay_log(str(checkpointed), None, 6)
    assert expected.metadata["configuration"] == {"recluster.clusterBy": "k"}
    hint(checkpointed, hinted)
    if cleaned:
        for version in range(4):
            (checkpointed / "_delta_log" / f"{version:020d}.json").unlink()
    listings = counted_listings(monkeypatch)
    assert comparable(replay_log(str(checkpointed), None, 6)) == comparable(expected)
    assert bool(listings) is listed


def test_a_commit_finds_its_version_without_reopening_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer appended twice after the rewrite's read version: the commit reads those two commits by name
    (checks them, advances the state) and creates the version after them; delta-rs opens nothing."""
    from tests.helpers import one_file_table

    path, data, rewrite = one_file_table(tmp_path)
    read = DeltaTable(str(path)).version()
    for _ in range(2):
        write_deltalake(str(path), pa.table({"k": pa.array([9], pa.int64())}), mode="append")
    loads = DeltaRsLoads(monkeypatch)
    assert rewrite("a") == read + 3
    assert loads.count == 0
    monkeypatch.undo()
    table = DeltaTable(str(path))
    assert sorted(table.to_pyarrow_table().column("k").to_pylist()) == sorted([*data.column("k").to_pylist(), 9, 9])
    assert any(uri.endswith("a.parquet") for uri in table.file_uris())


def test_on_s3_a_replay_from_the_hint_and_a_commit_never_list_the_log(s3: S3Server) -> None:
    """A replay reads `_last_checkpoint`, the checkpoint it names and the commits after it; a commit planned on an
    older version reads the two commits another writer made since, one by one, and the absent one after them."""
    uri, options = s3.table_uri("log-state"), s3.options()
    for value in range(3):
        write_deltalake(uri, pa.table({"k": [value]}), mode="append", storage_options=options)
    DeltaTable(uri, storage_options=options).create_checkpoint()
    set_table_properties(uri, {"recluster.clusterBy": "k"}, options)
    version = DeltaTable(uri, storage_options=options).version()
    before = len(s3.requests())
    state = replay_log(uri, options, version)
    replayed = s3.requests()[before:]
    assert state.metadata["configuration"] == {"recluster.clusterBy": "k"}
    assert replayed and not any("list-type" in r for r in replayed), replayed
    for value in range(2):
        write_deltalake(uri, pa.table({"k": [value]}), mode="append", storage_options=options)
    seen: list[list[int]] = []

    def prepare(new: Sequence[CommitEntry], latest: int) -> list[dict[str, Any]]:
        seen.append([entry.version for entry in new])
        return [{"commitInfo": {"operation": "TEST"}}]

    before = len(s3.requests())
    created = commit_next_version(uri, options, prepare, CommitSettings(), read_version=version)
    committed = s3.requests()[before:]
    assert created == version + 3 and seen == [[version + 1, version + 2]]
    assert not any("list-type" in r for r in committed), committed
    assert DeltaTable(uri, storage_options=options).version() == version + 3
