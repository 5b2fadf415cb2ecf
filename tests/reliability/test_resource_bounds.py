"""Scenario 7: no committed merge task ever read more than its byte and file budget, checked from the Delta log.

Peak driver memory of planning on a 100,000-file table is measured by bench/memory_bench.py (`python -m bench`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import ColumnProperties, DeltaTable, WriterProperties, write_deltalake

from recluster.delta.log_writer import set_table_properties
from recluster.settings import CLUSTER_BY_PROPERTY, ClusteringSettings, Settings
from tests.reliability.checks import assert_intact, run_final

pytestmark = [pytest.mark.spark]


def committed_tasks(path: Path) -> list[tuple[int, int]]:
    """(input files, input bytes) of every recluster commit, from the remove actions in the log."""
    tasks = []
    for commit in sorted((path / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in commit.read_text().splitlines() if line.strip()]
        info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
        if info.get("recluster.producer") == "recluster":
            removes = [a["remove"] for a in actions if "remove" in a]
            tasks.append((len(removes), sum(r["size"] for r in removes)))
    return tasks


def test_every_committed_task_within_its_byte_and_file_budget(tmp_path, spark):
    path = tmp_path / "budget"
    rng = np.random.default_rng(71)
    no_stats = WriterProperties(default_column_properties=ColumnProperties(statistics_enabled="NONE"))
    for batch in range(9):
        rows = 20_000 if batch == 0 else 1_500  # one file far over the budget
        data = pa.table({"k": pa.array(rng.integers(0, 10**6, rows), pa.int64()), "b": [batch] * rows})
        if batch in (0, 5, 6):  # files without any stats (log or footer): unclustered, always merge candidates
            write_deltalake(
                str(path),
                data,
                mode="append",
                writer_properties=no_stats,
                configuration={"delta.dataSkippingNumIndexedCols": "0"},
            )
            set_table_properties(path, {"delta.dataSkippingNumIndexedCols": "32"})
        else:
            write_deltalake(str(path), data, mode="append")
        if batch == 0:
            set_table_properties(path, {CLUSTER_BY_PROPERTY: "k"})
    sizes = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))["size_bytes"].to_pylist()
    small = sorted(sizes)[len(sizes) // 2]
    budget = 4 * small  # a few small files per task; the big file alone is over it
    settings = Settings(
        clustering=ClusteringSettings(
            target_rows=2_000, max_merge_bytes=budget, max_merge_files=3, max_tasks_per_round=2, max_final_rounds=30
        )
    )
    expected = DeltaTable(str(path)).to_pyarrow_table()

    result = run_final(path, spark, settings)

    tasks = committed_tasks(path)
    assert len(tasks) == result.totals.tasks >= 3, result
    assert all(files <= 3 and size <= budget for files, size in tasks), (budget, tasks)
    assert any(s.reason == "over_size_bound" for plan in result.plans for s in plan.skipped)
    assert_intact(path, expected)
