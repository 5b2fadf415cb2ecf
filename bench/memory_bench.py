"""Peak driver memory of planning (`recluster info` + selection) on a table with 100,000 files (issue 10, scenario 7).

The table's log holds 100,000 add actions with stats (committed through delta-rs transactions in chunks, then a
checkpoint); the data files themselves are not needed to plan. Each measurement runs in a fresh interpreter and
reports its peak RSS (VmHWM: Rust and numpy memory included) above the RSS after imports. The baseline, side by
side, is delta-rs alone loading the same snapshot's add actions (what any planner must read).

`python -m bench.memory_bench [--quick]` (quick: 20,000 files).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.transaction import AddAction, RemoveAction

from bench.common import log, markdown_table, measured_in_subprocess, process_peak_rss_mb, write_results
from docgen.figures import SUMMARY_HEADERS, summary_records
from recluster.delta.log_writer import set_table_properties
from recluster.settings import CLUSTER_BY_PROPERTY

MB = 1 << 20
CHUNK = 10_000


def build_table(path: Path, files: int, seed: int = 5, chunk: int = CHUNK, run_files: int | None = None) -> None:
    """A table whose log adds `files` files of 1,000 rows with random overlapping int64 key ranges, `chunk` files
    per commit (delta-rs commits any number in one transaction); files are stamped as appends of `run_files`
    files each (a millisecond apart; default: one stamp per commit)."""
    write_deltalake(str(path), pa.table({"k": pa.array([], pa.int64()), "v": pa.array([], pa.float64())}))
    set_table_properties(path, {CLUSTER_BY_PROPERTY: "k"})
    rng = np.random.default_rng(seed)
    now = int(time.time() * 1000)
    for start in range(0, files, chunk):
        size = min(chunk, files - start)
        lows = rng.integers(0, 10**12, size)
        spans = rng.integers(1, 10**10, size)
        actions: list[AddAction | RemoveAction] = [
            AddAction(
                f"part-{start + i:07d}.parquet",
                20_000,
                {},
                now + (start + i) // (run_files or chunk),
                True,
                json.dumps(
                    {
                        "numRecords": 1_000,
                        "minValues": {"k": int(low), "v": 0.0},
                        "maxValues": {"k": int(low + span), "v": 1.0},
                        "nullCount": {"k": 0, "v": 0},
                    }
                ),
            )
            for i, (low, span) in enumerate(zip(lows, spans, strict=True))
        ]
        table = DeltaTable(str(path))
        table.create_write_transaction(
            actions, mode="append", schema=table.schema(), commit_properties=CommitProperties()
        )
    DeltaTable(str(path)).create_checkpoint()


def measure(path: str, what: str) -> dict[str, Any]:
    """In this (fresh) process: peak RSS and Python allocation peak of `what` on the table."""
    from recluster.core.selection import select_merge_tasks
    from recluster.engine.api import selection_bounds, table_info
    from recluster.settings import Settings

    settings = Settings()
    before = process_peak_rss_mb()
    started = time.perf_counter()
    if what == "recluster":
        result = table_info(path, settings=settings)
        bounds = selection_bounds(settings, result.snapshot, None)
        plan = select_merge_tasks(path, result.snapshot.version, result.snapshot.blocks, bounds)
        final = select_merge_tasks(path, result.snapshot.version, result.snapshot.blocks, bounds, final=True)
        detail = {
            "files": result.info.table.total_block_count,
            "tasks": len(plan.tasks),
            "final_tasks": len(final.tasks),
            "average_depth": result.info.table.average_depth,
        }
    else:
        actions = pa.table(DeltaTable(path).get_add_actions(flatten=True))
        detail = {"files": actions.num_rows}
    seconds = time.perf_counter() - started
    return {
        **detail,
        "seconds": seconds,
        "rss_after_imports_mb": before,
        "peak_rss_mb": process_peak_rss_mb(),
        "peak_rss_above_imports_mb": process_peak_rss_mb() - before,
    }


def main(quick: bool = False) -> dict[str, Any]:
    files = 20_000 if quick else 100_000
    with tempfile.TemporaryDirectory(prefix="recluster-memory-") as root:
        path = Path(root) / "wide"
        log(f"memory: building a table of {files:,} files (log only)")
        build_table(path, files)
        log("memory: measuring recluster planning and the delta-rs baseline, each in a fresh interpreter")
        ours = measured_in_subprocess("bench.memory_bench", path, "recluster")
        baseline = measured_in_subprocess("bench.memory_bench", path, "baseline")
    assert ours["files"] == baseline["files"] == files
    result: dict[str, Any] = {"quick": quick, "files": files, "recluster": ours, "baseline": baseline}
    rows = [
        [
            f"driver peak RSS above imports, info + selection of {files:,} files, MB",
            ours["peak_rss_above_imports_mb"],
            baseline["peak_rss_above_imports_mb"],
            ours["peak_rss_above_imports_mb"] / max(baseline["peak_rss_above_imports_mb"], 1e-9),
            "bounded (reported)",
        ],
        ["planning time, s", ours["seconds"], baseline["seconds"], ours["seconds"] / baseline["seconds"], ""],
    ]
    result["summary"] = summary_records(rows)
    path_written = write_results("memory-quick" if quick else "memory", result)
    print("\n### memory\n")
    print(markdown_table(SUMMARY_HEADERS, rows))
    print(
        f"\nBaseline: delta-rs alone loading the snapshot's add actions. Total peak RSS: recluster "
        f"{ours['peak_rss_mb']:.0f} MB, baseline {baseline['peak_rss_mb']:.0f} MB."
    )
    print(f"wrote {path_written}")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.memory_bench")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--measure", nargs=2, metavar=("WHAT", "TABLE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure[1], args.measure[0])))
    else:
        main(quick=args.quick)
