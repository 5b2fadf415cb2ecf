"""`recluster estimate` against a real run of the same workload: `python -m bench.estimate_bench [--quick]` (issue 35).

Each workload (bench/compare/workloads.py: uniform int64 keys, timestamps 5% late by up to 4 appends, 5% late by
any amount, a random two-column (a, b) key) is appended 40 and 400 times (quick: 40) to a table nobody reclusters:
the history `estimate` learns from. The real run appends the same batches to a second table with a recluster round
(default settings: the `absorb` policy, in the process) after every append, measuring the bytes written, the
average depth after every append (time-averaged) and, at the end, the files a point predicate on the first key
column reads. The initial cost is checked by running a FINAL on the history table (the fastest of 3, the table
restored between). Goals: bytes rewritten within ±20%, time-averaged depth within ±10%, files read per predicate
within ±15%, initial FINAL time within ±30%; and
`estimate` under 10 s on a table of 10,000 commits (a log written directly: commits adding files of 1,000 rows of
hourly timestamps). Writes bench/results/estimate[-quick]-<date>.json.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable

from bench.common import LogBackup, log, publish, quick_cli
from docgen.figures import ratio_row
from recluster.core.metrics import clustering_info
from recluster.core.pruning import column_scan_fractions
from recluster.engine.api import read_snapshot
from recluster.engine.estimate import estimate_table
from recluster.engine.rounds import recluster_table, snapshot_loader
from recluster.settings import CLUSTER_BY_PROPERTY, ClusteringSettings, Settings
from tests.workload_data import Workload, append, bounded_time_batch, time_batch, two_column_batch, uniform_batch

WORKLOADS = (
    Workload("uniform", "uniform random int64 keys", ("k",), uniform_batch),
    Workload("late_4", "timestamps, 5% late by up to 4 appends", ("ts",), bounded_time_batch),
    Workload("late_any", "timestamps, 5% late by any amount", ("ts",), time_batch),
    Workload("random_ab", "random two-column key (int in [0,1000), string)", ("a", "b"), two_column_batch),
)
SIZES = {40: (2_000, 10_000), 400: (500, 2_500)}
"""Appends: (rows per append, target rows): files of 5 appends."""
GOALS = {"bytes_rewritten": 0.20, "time_averaged_depth": 0.10, "files_read": 0.15, "initial_seconds": 0.30}
FINAL_REPEATS = 3
SPEED_COMMITS = 10_000
SPEED_GOAL_SECONDS = 10.0


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


def real_final(path: Path, settings: Settings) -> dict[str, Any]:
    """The FINAL `estimate` prices, run FINAL_REPEATS times on the same table (restored between), the fastest
    counting: one run of a fraction of a second is mostly this shared machine's noise."""
    backup = LogBackup(path)
    times = []
    for attempt in range(FINAL_REPEATS):
        if attempt:
            backup.restore()
        started = time.perf_counter()
        result = recluster_table(
            str(path), snapshot_loader(str(path), settings, None), settings=settings, spark_factory=no_spark, final=True
        )
        times.append(time.perf_counter() - started)
    return {
        "seconds": min(times),
        "all_seconds": times,
        "bytes_read": result.totals.bytes_read,
        "files_removed": result.totals.files_removed,
        "rounds": result.rounds,
    }


def run_case(workload: Workload, appends: int, seed: int, work: Path) -> dict[str, Any]:
    rows, target = SIZES[appends]
    settings = Settings(clustering=ClusteringSettings(target_rows=target))
    rng = np.random.default_rng(seed)
    batches = [workload.make(rng, index, rows) for index in range(appends)]
    history, real = work / f"{workload.name}-{appends}-history", work / f"{workload.name}-{appends}-real"
    for batch in batches:
        append(history, batch, workload.key)
    estimate = estimate_table(str(history), settings=settings)
    ours = estimate.configured
    measured = real_run(real, batches, workload.key, settings)
    final = real_final(history, settings)
    first = workload.key[0]
    return {
        "workload": workload.name,
        "description": workload.description,
        "appends": appends,
        "rows_per_append": rows,
        "target_rows": target,
        "estimate_seconds": estimate.seconds,
        "shape": estimate.shape.describe(),
        "estimate": {
            "bytes_rewritten": ours.bytes_rewritten,
            "row_write_amplification": ours.write_amplification,
            "merges": ours.merges,
            "written_per_read": None if estimate.calibration is None else estimate.calibration.written_per_read,
            "time_averaged_depth": ours.time_averaged_depth,
            "files_read": ours.files_read_per_predicate[first],
            "initial_seconds": estimate.initial.seconds,
            "initial_bytes": estimate.initial.bytes,
            "initial_rounds": estimate.initial.rounds,
            "merge_mb_per_second": estimate.merge_mb_per_second,
        },
        "real": {**measured, "files_read": measured["files_read"][first], "initial": final},
        "estimate_json": estimate.to_dict(),
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


def speed_check(work: Path) -> dict[str, Any]:
    path = work / "long"
    write_long_log(path, SPEED_COMMITS)
    estimate = estimate_table(str(path), settings=Settings(), merge_mb_per_second=100.0)
    return {"commits": SPEED_COMMITS, "seconds": estimate.seconds, "notes": list(estimate.notes)}


MEASURES: tuple[tuple[str, str, Callable[[dict[str, Any]], float]], ...] = (
    ("bytes rewritten", "bytes_rewritten", lambda real: float(real["bytes_rewritten"])),
    ("time-averaged depth", "time_averaged_depth", lambda real: float(real["time_averaged_depth"])),
    ("files read per predicate", "files_read", lambda real: float(real["files_read"])),
    ("initial FINAL seconds", "initial_seconds", lambda real: float(real["initial"]["seconds"])),
)


def summary_rows(cases: dict[str, Any], speed: dict[str, Any]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for name, case in cases.items():
        for label, field, real in MEASURES:
            ours, theirs = float(case["estimate"][field]), real(case["real"])
            rows.append(ratio_row(f"{name}: {label}, estimate vs real", ours, theirs, f"±{GOALS[field]:.0%}"))
    rows.append(
        ratio_row(
            f"estimate seconds on {speed['commits']:,} commits, vs the goal",
            speed["seconds"],
            SPEED_GOAL_SECONDS,
            f"<= {SPEED_GOAL_SECONDS:g} s",
        )
    )
    return rows


def main(quick: bool = False) -> dict[str, Any]:
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="recluster-estimate-bench-"))
    cases: dict[str, Any] = {}
    try:
        for number, (appends, workload) in enumerate(
            (a, w) for a in ((40,) if quick else (40, 400)) for w in WORKLOADS
        ):
            name = f"{workload.name}_{appends}"
            log(f"estimate bench: {name}")
            cases[name] = run_case(workload, appends, 3500 + number, work)
            log(f"estimate bench: {name}: {cases[name]['estimate']} vs {cases[name]['real']}")
        speed = speed_check(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {"quick": quick, "cases": cases, "speed": speed, "goals": GOALS, "seconds": time.perf_counter() - started}
    return publish("estimate", "recluster estimate against a real run", quick, summary_rows(cases, speed), result)


if __name__ == "__main__":
    quick_cli(
        "python -m bench.estimate_bench",
        main,
        quick_help="40 appends only",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
