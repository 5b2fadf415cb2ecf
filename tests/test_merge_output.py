"""Merge outputs are written like the best writers: ZSTD by default, codec/level/row groups/dictionary settable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from recluster.core.blocks import parse_data_file_name
from recluster.delta.log_writer import set_table_properties
from recluster.engine.rounds import recluster_table, snapshot_loader
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
