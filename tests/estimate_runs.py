"""The real run `recluster estimate` is checked against: appends with a recluster round after each, in the process
(the product's own rounds), and a long Delta log written directly. Shared by tests/test_estimate.py and
bench/estimate_bench.py (which imports them from here)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable

from recluster.core.metrics import clustering_info
from recluster.core.pruning import column_scan_fractions
from recluster.engine.api import read_snapshot
from recluster.engine.rounds import recluster_table, snapshot_loader
from recluster.settings import CLUSTER_BY_PROPERTY, Settings
from tests.workload_data import append


def no_spark() -> object:
    raise AssertionError("the rounds of this benchmark run in the process")


def files_read(path: Path, settings: Settings) -> dict[str, float]:
    """Per key column: files a point predicate on it reads after stats pruning (the same measure as the model's)."""
    snapshot = read_snapshot(str(path), settings=settings)
    count = len(snapshot.blocks)
    return {name: share * count for name, share in column_scan_fractions(snapshot.blocks, snapshot.key).items()}


def real_run(path: Path, batches: Sequence[pa.Table], key: Sequence[str], settings: Settings) -> dict[str, Any]:
    """Append each batch and run one recluster round after it; what the rounds wrote and the depth they kept."""
    written, rows, depths, merges = 0, 0, [], 0
    for batch in batches:
        append(path, batch, key)
        result = recluster_table(
            str(path), snapshot_loader(str(path), settings, None), settings=settings, spark_factory=no_spark
        )
        written += result.totals.bytes_written
        rows += result.totals.rows_rewritten
        merges += result.totals.tasks
        depths.append(clustering_info(read_snapshot(str(path), settings=settings).blocks).table.average_depth)
    return {
        "bytes_rewritten": written,
        "row_write_amplification": rows / sum(b.num_rows for b in batches),
        "merges": merges,
        "time_averaged_depth": float(np.mean(depths)),
        "files_read": files_read(path, settings),
    }


def write_long_log(path: Path, commits: int) -> None:
    """A table of `commits` appends written as Delta log files directly (no data files: only the log is read)."""
    log_dir = path / "_delta_log"
    log_dir.mkdir(parents=True)
    schema = {"type": "struct", "fields": [{"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}}]}
    metadata = {
        "id": "estimate-bench",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(schema),
        "partitionColumns": [],
        "configuration": {CLUSTER_BY_PROPERTY: "ts"},
        "createdTime": 0,
    }
    hour = 3_600_000
    start = 1_767_225_600_000  # 2026-01-01
    for version in range(commits):
        low, high = start + (version - 2) * hour, start + (version + 1) * hour - 1
        stats = {
            "numRecords": 1_000,
            "minValues": {"ts": _iso(low)},
            "maxValues": {"ts": _iso(high)},
            "nullCount": {"ts": 0},
        }
        add = {
            "path": f"part-{version:05d}.parquet",
            "partitionValues": {},
            "size": 8_000,
            "modificationTime": start + version * hour,
            "dataChange": True,
            "stats": json.dumps(stats),
        }
        actions: list[dict[str, Any]] = [
            {"commitInfo": {"timestamp": start + version * hour, "operation": "WRITE"}},
            {"add": add},
        ]
        if version == 0:
            actions[1:1] = [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}, {"metaData": metadata}]
        (log_dir / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    DeltaTable(str(path)).create_checkpoint()  # as writers do every 100 commits: no reader replays 10,000 commits


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"
