"""`info` and planning on tables of 100,000 and 1,000,000 files against the delta-rs floor (issue 23).

`python -m bench.big_table_bench [--quick]` (quick: 10,000 and 100,000 files).

Each table's log adds its files in one delta-rs transaction (stats only: planning never reads data files), stamped
as appends of 1,000 files (so the default `absorb` policy sees 100 or 1,000 runs), with random overlapping int64
key ranges, then a checkpoint. A third table of the larger size is one as recluster keeps it: all but 20 appends
of its files form one absorb-written run (disjoint ranges; names that carry level, key, run and horizon).
Three measurements per table, each in a fresh interpreter, reporting seconds and
peak RSS above the RSS after imports (VmHWM: Rust and numpy memory included):
  floor: delta-rs opens the table and lists its add actions (`get_add_actions(flatten=True)`), what any planner
         must do;
  info:  `recluster info` (engine.api.table_info: snapshot -> blocks, metrics of the table and each level, column
         scan, and on `absorb` tables the round's time-like decisions);
  plan:  `recluster run --dry-run` (snapshot -> blocks, then one round's selection).
Goals: info and plan <= 2x the floor in time and <= 1.2x in memory at 1,000,000 files, and growth from the smaller
table to the larger linear within 10% (seconds per file at the larger / at the smaller <= 1.1).
Writes bench/results/big-table[-quick]-<date>.json.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.transaction import AddAction, RemoveAction

from bench.memory_bench import build_table, measured_in_subprocess, process_peak_rss_mb
from bench.merge_bench import log, publish, quick_cli, ratio_row
from recluster.core.blocks import age_run_id, data_file_name
from recluster.core.keys import key_fingerprint
from recluster.delta.log_writer import set_table_properties
from recluster.settings import CLUSTER_BY_PROPERTY

APPEND_FILES = 1_000
KEPT_APPENDS = 20
"""Appends waiting on the table as recluster keeps it (the rest of its files are one absorb-written run)."""
WHATS = ("floor", "info", "plan")


def measure(path: str, what: str) -> dict[str, Any]:
    """In this (fresh) process: seconds and peak RSS of `what` on the table."""
    import pyarrow as pa
    from deltalake import DeltaTable

    from recluster.core.selection import select_merge_tasks
    from recluster.engine.api import read_snapshot, selection_bounds, table_info
    from recluster.settings import Settings

    settings = Settings()
    before = process_peak_rss_mb()
    started = time.perf_counter()
    if what == "floor":
        files = pa.table(DeltaTable(path).get_add_actions(flatten=True)).num_rows
        detail: dict[str, Any] = {}
    elif what == "info":
        result = table_info(path, settings=settings)
        files = result.info.table.total_block_count
        detail = {"average_depth": result.info.table.average_depth, "levels": len(result.info.levels)}
    else:
        snapshot = read_snapshot(path, settings=settings)
        plan = select_merge_tasks(path, snapshot.version, snapshot.blocks, selection_bounds(settings, snapshot, None))
        files = len(snapshot.blocks)
        detail = {"tasks": len(plan.tasks), "task_files": sum(len(t.files) for t in plan.tasks)}
    seconds = time.perf_counter() - started
    peak = process_peak_rss_mb()
    return {
        "files": files,
        "seconds": seconds,
        "peak_rss_above_imports_mb": peak - before,
        "peak_rss_mb": peak,
        **detail,
    }


def build_kept_table(path: Path, files: int, appends: int = KEPT_APPENDS, seed: int = 7) -> None:
    """A table as recluster keeps it: one run written by `absorb` (disjoint sorted int64 ranges, file names with
    level, key fingerprint, run id and horizon) and `appends` waiting appends of APPEND_FILES overlapping files."""
    write_deltalake(str(path), pa.table({"k": pa.array([], pa.int64()), "v": pa.array([], pa.float64())}))
    set_table_properties(path, {CLUSTER_BY_PROPERTY: "k"})
    rng = np.random.default_rng(seed)
    now = int(time.time() * 1000)
    main = files - appends * APPEND_FILES
    edges = np.sort(rng.choice(10**12, main + 1, replace=False))
    age = now - 10_000_000
    stats = '{{"numRecords": 1000, "minValues": {{"k": {}}}, "maxValues": {{"k": {}}}, "nullCount": {{"k": 0}}}}'
    fingerprint = key_fingerprint(["k"])
    actions: list[AddAction | RemoveAction] = [
        AddAction(
            data_file_name(1, fingerprint, age_run_id(age), age + 5),
            20_000,
            {},
            age,
            True,
            stats.format(int(edges[i]), int(edges[i + 1] - 1)),
        )
        for i in range(main)
    ]
    for append in range(appends):
        lows, spans = rng.integers(0, 10**12, APPEND_FILES), rng.integers(1, 10**10, APPEND_FILES)
        actions += [
            AddAction(
                f"part-{append:03d}-{j:05d}.parquet", 20_000, {}, now + append, True, stats.format(low, low + span)
            )
            for j, (low, span) in enumerate(zip(lows.tolist(), spans.tolist(), strict=True))
        ]
    table = DeltaTable(str(path))
    table.create_write_transaction(actions, mode="append", schema=table.schema(), commit_properties=CommitProperties())
    DeltaTable(str(path)).create_checkpoint()


def measure_table(root: Path, files: int, kept: bool = False) -> dict[str, Any]:
    path = root / f"files-{files}{'-kept' if kept else ''}"
    log(f"big table: building {files:,} files in one transaction{' (as recluster keeps them)' if kept else ''}")
    started = time.perf_counter()
    if kept:
        build_kept_table(path, files)
    else:
        build_table(path, files, chunk=files, run_files=APPEND_FILES)
    built = time.perf_counter() - started
    measured: dict[str, Any] = {"files": files, "kept": kept, "build_seconds": built}
    for what in WHATS:
        log(f"big table: {what} on {files:,} files")
        measured[what] = measured_in_subprocess("bench.big_table_bench", path, what)
        assert measured[what]["files"] == files, measured[what]
    return measured


def main(quick: bool = False) -> dict[str, Any]:
    small, large = (10_000, 100_000) if quick else (100_000, 1_000_000)
    with tempfile.TemporaryDirectory(prefix="recluster-big-table-") as root:
        tables = [measure_table(Path(root), files) for files in (small, large)]
        kept = measure_table(Path(root), large, kept=True)
    rows: list[list[Any]] = []
    for table in (*tables, kept):
        floor = table["floor"]
        for what in ("info", "plan"):
            ours = table[what]
            files = f"{table['files']:,} files{' as recluster keeps them' if table['kept'] else ''}"
            goal = "<= 2x" if table["files"] == large else ""
            rows.append(
                ratio_row(f"{what}, {files}, seconds (vs delta-rs floor)", ours["seconds"], floor["seconds"], goal)
            )
            rows.append(
                ratio_row(
                    f"{what}, {files}, peak RSS above imports, MB (vs floor)",
                    ours["peak_rss_above_imports_mb"],
                    floor["peak_rss_above_imports_mb"],
                    "<= 1.2x" if goal else "",
                )
            )
    scale = large / small
    for what in WHATS:
        growth = tables[1][what]["seconds"] / tables[0][what]["seconds"]
        rows.append(
            [
                f"{what}: seconds at {large:,} / at {small:,} files, per file",
                growth / scale,
                1.0,
                growth / scale,
                "<= 1.1" if what != "floor" else "",
            ]
        )
    result: dict[str, Any] = {"quick": quick, "append_files": APPEND_FILES, "tables": [*tables, kept]}
    return publish("big-table", "info and planning on big tables vs the delta-rs floor", quick, rows, result)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--measure":
        print(json.dumps(measure(sys.argv[3], sys.argv[2])))
    else:
        quick_cli("python -m bench.big_table_bench", main, description=__doc__.splitlines()[0] if __doc__ else None)
