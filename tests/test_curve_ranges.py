"""Where a curve key's range bounds live (issue 41 item 4): under `_recluster/`, named by put-if-absent pointer
files, never by a metaData commit of ours (it would fail every concurrent Delta Spark transaction). Tables whose
bounds an older recluster named in the table property `recluster.curveRanges` keep them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from recluster.core.blocks import parse_data_file_name
from recluster.core.key_bounds import bounds_drifted
from recluster.delta.log_writer import set_table_properties
from recluster.delta.ranges import (
    CurrentRanges,
    current_range_bounds,
    publish_range_bounds,
    sample_range_bounds,
    store_range_bounds,
)
from recluster.delta.storage import read_log_actions
from recluster.engine.api import read_snapshot
from recluster.engine.ranges import prepare_range_bounds
from recluster.engine.rounds import recluster_table, snapshot_loader
from recluster.settings import CLUSTER_BY_PROPERTY, RANGES_PROPERTY, Settings
from tests.helpers import SMALL_FILES, log_actions_after, main_json, our_add_actions, random_pairs, row_multiset
from tests.s3_server import S3Server

SETTINGS = Settings(clustering={"target_rows": 3000})  # type: ignore[arg-type]


def append_drifted(path: Path, rows: int, seed: int) -> None:
    """Rows whose keys lie past the bounds of both key columns (new ids, new names)."""
    rng = np.random.default_rng(seed)
    a = pa.array(rng.integers(5_000_000, 6_000_000, rows))
    b = [f"t{v:07d}" for v in rng.integers(0, 1_000_000, rows)]
    day = pa.array(rng.integers(0, 3_000, rows).astype("datetime64[D]"), pa.date32())
    write_deltalake(str(path), pa.table({"a": a, "b": b, "day": day, "batch": [99] * rows}), mode="append")


def pointers(path: Path) -> list[str]:
    return sorted(p.name for p in (path / "_recluster").glob("current-ranges-*.json"))


def test_final_incremental_rounds_and_a_drift_commit_no_metadata_or_protocol(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "t"
    random_pairs(path, appends=6)
    main_json(capsys, "sql", f"ALTER TABLE '{path}' CLUSTER BY (a, b)")  # the user's metaData commit
    users = DeltaTable(str(path)).version()
    main_json(capsys, "run", str(path), "--final", *SMALL_FILES)
    first = read_snapshot(str(path), settings=SETTINGS)
    assert first.key.bounds is not None and len(pointers(path)) == 1
    random_pairs(path, appends=3, rows=2_000, seed=8)
    main_json(capsys, "run", str(path), *SMALL_FILES)
    assert read_snapshot(str(path), settings=SETTINGS).key.bounds == first.key.bounds  # no drift: kept
    append_drifted(path, rows=12_000, seed=9)
    expected = DeltaTable(str(path)).to_pyarrow_table()
    result = main_json(capsys, "run", str(path), *SMALL_FILES)
    assert result["tasks"] > 0
    after = read_snapshot(str(path), settings=SETTINGS)
    assert after.key.bounds is not None and after.key.bounds != first.key.bounds  # drifted: sampled anew
    assert after.key.bounds.columns == ("a", "b") and not bounds_drifted(list(after.blocks), after.key)
    assert [p[-15:] for p in pointers(path)] == ["0000000001.json", "0000000002.json"]
    written = [parse_data_file_name(a["path"]) for a in our_add_actions(path)]
    assert any(w is not None and w.fingerprint == after.key.fingerprint for w in written)  # on the new curve
    actions = log_actions_after(path, users)
    assert len(actions) > 10 and not [a for a in actions if "metaData" in a or "protocol" in a]
    assert RANGES_PROPERTY not in DeltaTable(str(path)).metadata().configuration
    assert row_multiset(DeltaTable(str(path)).to_pyarrow_table()) == row_multiset(expected)


def test_a_table_with_bounds_in_the_legacy_property_keeps_them_until_they_drift(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "t"
    random_pairs(path, appends=6)
    set_table_properties(path, {CLUSTER_BY_PROPERTY: "a,b"})
    unbounded = read_snapshot(str(path), settings=SETTINGS)
    legacy = sample_range_bounds(unbounded.uri, {}, unbounded.blocks, unbounded.key, ranges=50)
    store_range_bounds(unbounded.uri, {}, legacy)
    set_table_properties(path, {RANGES_PROPERTY: legacy.id})  # as recluster wrote it before issue 41
    version = DeltaTable(str(path)).version()
    main_json(capsys, "run", str(path), "--final", *SMALL_FILES)
    kept = read_snapshot(str(path), settings=SETTINGS)
    assert kept.key.bounds == legacy and pointers(path) == []
    fingerprints = {w.fingerprint for a in our_add_actions(path) if (w := parse_data_file_name(a["path"]))}
    assert fingerprints == {kept.key.fingerprint}
    append_drifted(path, rows=12_000, seed=3)
    expected = DeltaTable(str(path)).to_pyarrow_table()
    main_json(capsys, "run", str(path), *SMALL_FILES)
    drifted = read_snapshot(str(path), settings=SETTINGS)
    assert drifted.key.bounds not in (None, legacy) and [p[-15:] for p in pointers(path)] == ["0000000001.json"]
    assert DeltaTable(str(path)).metadata().configuration[RANGES_PROPERTY] == legacy.id  # left as it was
    assert not [a for a in log_actions_after(path, version) if "metaData" in a or "protocol" in a]
    assert row_multiset(DeltaTable(str(path)).to_pyarrow_table()) == row_multiset(expected)


def test_of_two_processes_publishing_bounds_at_once_one_wins_and_the_other_reloads(tmp_path: Path) -> None:
    path = tmp_path / "t"
    random_pairs(path, appends=4)
    set_table_properties(path, {CLUSTER_BY_PROPERTY: "a,b"})
    snapshot = read_snapshot(str(path), settings=SETTINGS)
    uri, key = snapshot.uri, snapshot.key
    none = current_range_bounds(uri, {}, key.names)
    assert none.bounds is None and none.sequence == 0
    mine = sample_range_bounds(uri, {}, snapshot.blocks, key, ranges=40)
    theirs = sample_range_bounds(uri, {}, snapshot.blocks, key, ranges=60)
    assert publish_range_bounds(uri, {}, theirs, none, snapshot.version)
    assert not publish_range_bounds(uri, {}, mine, none, snapshot.version)  # sequence 1 is taken: theirs win
    current = current_range_bounds(uri, {}, key.names)
    assert current.bounds == theirs and current.sequence == 1
    assert prepare_range_bounds(snapshot)  # the snapshot's (none) are not current: reload, publish nothing
    assert len(pointers(path)) == 1
    reloaded = read_snapshot(str(path), settings=SETTINGS)
    assert reloaded.key.bounds == theirs and not prepare_range_bounds(reloaded)  # current, not drifted
    assert current_range_bounds(uri, {}, ("b", "a")).bounds is None  # another key's columns: none yet


def test_clean_and_vacuum_keep_the_bounds(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "t"
    random_pairs(path, appends=4)
    set_table_properties(path, {CLUSTER_BY_PROPERTY: "a,b"})
    main_json(capsys, "run", str(path), "--final", *SMALL_FILES)
    stored = sorted(p.name for p in (path / "_recluster").iterdir())
    assert len(stored) == 2  # the bounds and their pointer
    main_json(capsys, "clean", str(path), "--safety-age-hours", "0")
    DeltaTable(str(path)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert sorted(p.name for p in (path / "_recluster").iterdir()) == stored
    assert read_snapshot(str(path), settings=SETTINGS).key.bounds is not None


def test_on_s3_bounds_are_published_put_if_absent_and_read_with_one_listing_per_load(s3: S3Server) -> None:
    uri, options = s3.table_uri("curve"), s3.options()
    rng = np.random.default_rng(5)
    for _ in range(4):
        data = pa.table({"a": rng.integers(0, 10**6, 3000), "b": rng.integers(0, 10**6, 3000)})
        write_deltalake(uri, data, mode="append", storage_options=options)
    expected = DeltaTable(uri, storage_options=options).to_pyarrow_table()
    version = set_table_properties(uri, {CLUSTER_BY_PROPERTY: "a,b"}, options)
    settings = Settings(storage_options=options, clustering={"target_rows": 2000})  # type: ignore[arg-type]
    loader = snapshot_loader(uri, settings, None)
    recluster_table(uri, loader, settings=settings, spark_factory=lambda: None, final=True)
    before = len(s3.requests())
    snapshot = loader()
    listings = [r for r in s3.requests()[before:] if r.startswith("GET") and "list-type=2" in r]
    assert len([r for r in listings if "_recluster" in r]) == 1, listings
    current = current_range_bounds(snapshot.uri, options, ("a", "b"))
    assert snapshot.key.bounds is not None and current.bounds == snapshot.key.bounds and current.sequence == 1
    assert not publish_range_bounds(snapshot.uri, options, snapshot.key.bounds, CurrentRanges(None, 0), 0)
    stored = s3.client().list_objects_v2(Bucket=s3.bucket, Prefix=uri.split("/", 3)[3] + "/_recluster/")
    assert len(stored["Contents"]) == 2  # the bounds and their one pointer
    table = DeltaTable(uri, storage_options=options)
    assert RANGES_PROPERTY not in table.metadata().configuration
    commits = range(version + 1, table.version() + 1)
    assert commits and all(
        "metaData" not in action and "protocol" not in action
        for commit in commits
        for action in read_log_actions(uri, commit, options)
    )
    assert row_multiset(table.to_pyarrow_table()) == row_multiset(expected)
