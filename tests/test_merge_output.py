"""Merge outputs are written like the best writers: ZSTD by default, codec/level/row groups/dictionary settable."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st

from recluster.core.blocks import parse_data_file_name
from recluster.delta.log_writer import set_table_properties
from recluster.engine.rounds import recluster_table, snapshot_loader
from recluster.merge.kernel import file_segments, files_for_rows
from recluster.settings import CLUSTER_BY_PROPERTY, Settings
from tests.helpers import row_multiset

pytestmark = pytest.mark.spark


def overlapping_table(path: Path) -> pa.Table:
    rng = np.random.default_rng(5)
    for _ in range(4):
        write_deltalake(
            str(path), pa.table({"k": rng.integers(0, 10_000, 3_000), "s": ["x" * 10] * 3_000}), mode="append"
        )
    set_table_properties(path, {CLUSTER_BY_PROPERTY: "k"})
    return DeltaTable(str(path)).to_pyarrow_table()


def outputs(path: Path) -> list[pq.FileMetaData]:
    files = [u.removeprefix("file://") for u in DeltaTable(str(path)).file_uris() if parse_data_file_name(u)]
    assert files, "FINAL wrote no file of ours"
    return [pq.ParquetFile(f).metadata for f in files]


@pytest.mark.parametrize(
    ("parquet", "codec", "max_group_rows"),
    [({}, "ZSTD", 1_048_576), ({"codec": "snappy", "row_group_rows": 1_000, "dictionary": False}, "SNAPPY", 1_000)],
    ids=["default-zstd", "snappy-small-row-groups"],
)
def test_outputs_use_the_configured_parquet_settings(
    tmp_path: Path, spark: Any, parquet: dict[str, Any], codec: str, max_group_rows: int
) -> None:
    path = tmp_path / "t"
    expected = overlapping_table(path)
    settings = Settings(merge={"parquet": parquet})  # type: ignore[arg-type]
    loader = snapshot_loader(str(path), settings, None)
    recluster_table(str(path), loader, settings=settings, spark_factory=lambda: spark, final=True)
    for metadata in outputs(path):
        groups = [metadata.row_group(i) for i in range(metadata.num_row_groups)]
        assert {g.column(c).compression for g in groups for c in range(g.num_columns)} == {codec}
        assert max(g.num_rows for g in groups) <= max_group_rows
        encodings = {e for g in groups for e in g.column(1).encodings}
        dictionary = "RLE_DICTIONARY" in encodings or "PLAIN_DICTIONARY" in encodings
        assert dictionary == parquet.get("dictionary", True)
    assert row_multiset(DeltaTable(str(path)).to_pyarrow_table()) == row_multiset(expected)


@pytest.mark.parametrize("deletion_vectors", [False, True], ids=["plain", "with-deletion-vectors"])
def test_both_kernel_placements_give_the_same_rows_and_cuts(tmp_path: Path, spark: Any, deletion_vectors: bool) -> None:
    """The same merge task through Spark tasks and in the process: equal output rows, and for a task that fits
    one range partition equal files (rows and stats per file). Small tasks take the in-process path by default."""
    import shutil

    from recluster.core.selection import select_merge_tasks
    from recluster.engine.api import selection_bounds
    from recluster.engine.rounds import write_task
    from tests.table_shapes import add_deletion_vector, read_with_delta_rs, rows_digest, set_protocol_features

    source = tmp_path / "source"
    overlapping_table(source)
    if deletion_vectors:
        set_protocol_features(str(source), ["deletionVectors"], ["deletionVectors"])
        first = sorted(a["path"] for a in pa.table(DeltaTable(str(source)).get_add_actions(True)).to_pylist())[0]
        add_deletion_vector(str(source), first, list(range(0, 3_000, 7)))
    results = []
    for placement in ("spark", "process", "auto"):  # Spark tasks, in-process ranges, in-process in one piece
        path = tmp_path / placement
        shutil.copytree(source, path)
        settings = Settings(
            clustering={"target_rows": 20_000},  # type: ignore[arg-type]
            merge={"in_process_max_bytes": 1 << 30 if placement == "auto" else 0, "placement": placement},  # type: ignore[arg-type]
        )
        snapshot = snapshot_loader(str(path), settings, None)()
        plan = select_merge_tasks(
            str(path), snapshot.version, snapshot.blocks, selection_bounds(settings, snapshot, None), final=True
        )
        (task,) = plan.tasks
        written = write_task(spark, task, snapshot, settings=settings, run_id="000000000abc")
        files = sorted((f.rows, json.dumps(f.stats, sort_keys=True), f.level) for f in written)
        rows = pa.concat_tables([pq.read_table(path / f.path) for f in written])
        results.append((files, rows_digest(rows)))
        assert rows_digest(rows) == rows_digest(read_with_delta_rs(str(path)).select(rows.column_names))
    assert results[0] == results[1] == results[2]


@settings(max_examples=200, deadline=None)
@given(
    rows=st.integers(1, 400),
    target=st.integers(5, 120),
    extra_files=st.integers(0, 3),
    forced=st.lists(st.integers(-5, 405), max_size=6),
)
def test_forced_cuts_share_the_files_out_and_leave_no_sliver(
    rows: int, target: int, extra_files: int, forced: list[int]
) -> None:
    """Distinct keys: every forced cut is kept, and each stretch between forced cuts gets its own even pieces
    (`files_for_rows` at the partition's rows per file): an even cut is never made right beside a forced one."""
    files = files_for_rows(rows, target) + extra_files
    segments = file_segments(np.arange(rows, dtype=np.int64), rows, target, files, forced=forced)
    assert segments[0][0] == 0 and segments[-1][1] == rows
    assert all(stop == start for (_, stop), (start, _) in itertools.pairwise(segments)), "pieces are contiguous"
    edges = [0, *sorted({c for c in forced if 0 < c < rows}), rows]
    starts = {start for start, _ in segments}
    assert set(edges[:-1]) <= starts, "a forced cut was dropped"
    per_file = -(-rows // files) if len(edges) > 2 else None
    for low, high in itertools.pairwise(edges):
        inside = [s for s in segments if low <= s[0] < high]
        assert all(stop <= high for _, stop in inside), "a piece crosses a forced cut"
        expected = min(files_for_rows(high - low, per_file) if per_file else files, high - low)
        assert len(inside) == expected
        sizes = [stop - start for start, stop in inside]
        assert max(sizes) - min(sizes) <= 1, "pieces of one stretch are even"


def test_a_watermark_cut_beside_an_even_cut_leaves_no_sliver() -> None:
    """90,000 sorted rows, target 50,000 (two files), a forced cut at row 50,500: two files of 50,500 and 39,500 rows
    (an even cut at 45,000 beside it made a 5,500-row sliver)."""
    segments = file_segments(np.arange(90_000, dtype=np.int64), 90_000, 50_000, 2, forced=[50_500])
    assert segments == [(0, 50_500), (50_500, 90_000)]
