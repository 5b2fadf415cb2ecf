"""Tables without a cluster key: optimizing compacts them (bin-packing, like delta-rs compact), status reports them;
reclustering still needs a key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from tests.helpers import main_json, row_multiset, run_main

pytestmark = pytest.mark.spark


def keyless_table(path: Path, partitioned: bool = False) -> pa.Table:
    rng = np.random.default_rng(9)
    for batch in range(6):
        rows = {"k": rng.integers(0, 10**6, 500), "batch": [batch] * 500}
        if partitioned:
            rows["p"] = ["a", "b"] * 250  # type: ignore[list-item]
        write_deltalake(str(path), pa.table(rows), mode="append", partition_by=["p"] if partitioned else None)
    return DeltaTable(str(path)).to_pyarrow_table()


@pytest.mark.parametrize("kind", ["minor", "major", "full", "minor-in-spark", "minor-in-ranges"])
def test_optimizing_compacts_a_table_without_a_key(tmp_path: Path, spark: Any, capsys: Any, kind: str) -> None:
    path = tmp_path / "t"
    expected = keyless_table(path, partitioned=kind == "full")
    before = len(DeltaTable(str(path)).file_uris())
    settings = ["--set", f"self_optimizing.history_location={tmp_path / 'history'}"]
    if kind == "major":  # the 500-row appends are fragments; as segments they are undersized
        settings += ["--set", "self_optimizing.fragment_ratio=100000"]
    if kind == "minor-in-spark":  # the kernel's Spark placement: repartitioned, not sorted
        settings += ["--set", "merge.in_process_max_bytes=0", "--set", "merge.placement=spark"]
    if kind == "minor-in-ranges":  # the in-process kernel range-partitioned through spill files
        settings += ["--set", "merge.in_process_max_bytes=0", "--set", "merge.placement=process"]
    result = main_json(capsys, "optimize", str(path), "--type", kind.split("-in-")[0], *settings)
    after = DeltaTable(str(path)).file_uris()
    assert result["outcome"] == "done" and result["failures"] == 0, result  # type: ignore[index]
    assert len(after) < before
    assert len(after) == (2 if kind == "full" else 1)  # one file per partition
    assert row_multiset(DeltaTable(str(path)).to_pyarrow_table()) == row_multiset(expected)


def test_status_on_a_keyless_table_and_refusal_to_recluster_it(tmp_path: Path, spark: Any, capsys: Any) -> None:
    path = tmp_path / "t"
    keyless_table(path)
    settings = ["--set", f"self_optimizing.history_location={tmp_path / 'history'}"]
    (report,) = main_json(capsys, "status", str(path), *settings)  # type: ignore[misc]
    assert report["recluster_pending"] is False and report["health"]["fragments"] == 6
    code, _, err = run_main(capsys, "run", str(path), "--final")
    assert code == 1 and "has no cluster key" in err
