"""Merge throughput and write amplification of recluster rounds, each side by side with a baseline.

Run from the project root: `python -m bench.merge_bench [--quick]`.

Part 1, throughput: one Delta table of N appended files of random int64 keys plus payload columns (full mode
~1 GB of Parquet, quick ~150 MB). On the same files, time
  (a) raw Spark: read -> repartitionByRange(ceil(rows / 1M), k) -> sortWithinPartitions(k) -> write Parquet,
  (b) recluster: one FINAL `recluster_table` run (target 1M rows, one task), including snapshot reads,
      planning and the Delta commit, the merge in the process (the default on a local master),
  (c) the same run with the merge in Spark tasks (`merge.placement=spark`: the path a cluster takes), to give
      the cost of Spark's task placement as a ratio against (b) on the same cores.
A raw run first warms the JVM (discarded), a tiny recluster warms the Python workers; then raw and the two
recluster runs alternate (the table's log is restored after each recluster run) and the best time of each is kept.

Part 2, write amplification: a table receiving appends of 20,000 random keys, one incremental round after each
append (default settings, target_rows=100,000). WA = bytes written by rounds / bytes appended, against the
cost of a full rewrite after every append (sum of the table size at each append / bytes appended).

Prints markdown tables and writes JSON to bench/results/merge[-quick]-<YYYY-MM-DD>.json.
"""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from bench.common import (
    SPARK_SETTINGS,
    LogBackup,
    live_files,
    log,
    machine,
    markdown_table,
    quick_cli,
    random_batch,
    raw_spark_sort,
    start_spark,
    write_results,
)
from docgen.figures import MB, SUMMARY_HEADERS, summary_records
from recluster.engine.rounds import recluster_table, snapshot_loader
from recluster.settings import ClusteringSettings, MergeSettings, Settings
from tests.workload_data import append

# ---- part 1: throughput --------------------------------------------------------------------------------------


def parquet_rows(path: Path, relative: Sequence[str]) -> int:
    """Rows counted from the Parquet footers themselves (not from the log's stats)."""
    return sum(pq.read_metadata(path / p).num_rows for p in relative)


def recluster_final(spark: Any, path: Path, settings: Settings) -> tuple[float, Any]:
    started = time.perf_counter()
    loader = snapshot_loader(str(path), settings, None)
    result = recluster_table(str(path), loader, settings=settings, spark_factory=lambda: spark, final=True)
    return time.perf_counter() - started, result


def throughput(spark: Any, work: Path, files_count: int, rows_per_file: int, repeats: int) -> dict[str, Any]:
    rng = np.random.default_rng(20240601)
    table = work / "throughput"
    started = time.perf_counter()
    for _ in range(files_count):
        append(table, random_batch(rng, rows_per_file))
    log(f"throughput: wrote {files_count} files in {time.perf_counter() - started:.1f} s")
    before = live_files(table)
    relative = [p for p, _, _ in before]
    files = [str(table / p) for p in relative]
    input_bytes = sum(size for _, size, _ in before)
    rows_in = sum(rows for _, _, rows in before)
    assert parquet_rows(table, relative) == rows_in
    clustering = ClusteringSettings(
        target_rows=1_000_000, max_merge_bytes=4 << 30, max_merge_files=1000, max_tasks_per_round=1
    )
    settings = Settings(clustering=clustering)
    spark_settings = Settings(clustering=clustering, merge=MergeSettings(placement="spark"))

    # warm-up: JVM and Spark's Parquet path (raw, on a third of the files),
    # then the Python workers and recluster's code path (a tiny table)
    warm_files = files[: max(1, len(files) // 3)]
    warm_rows = sum(rows for _, _, rows in before[: len(warm_files)])
    warm = raw_spark_sort(spark, warm_files, warm_rows, work / "raw-warmup")
    shutil.rmtree(work / "raw-warmup", ignore_errors=True)
    tiny = work / "warmup-table"
    for _ in range(4):
        append(tiny, random_batch(rng, 20_000))
    tiny_seconds, _ = recluster_final(spark, tiny, settings)
    log(f"throughput: warm-up raw {warm:.1f} s, tiny recluster {tiny_seconds:.1f} s")

    backup = LogBackup(table)
    raw_times: list[float] = []
    recluster_times: list[float] = []
    spark_times: list[float] = []
    results: list[Any] = []
    rows_raw = rows_after = -1
    for attempt in range(repeats):
        seconds, result = recluster_final(spark, table, spark_settings)
        spark_times.append(seconds)
        rows_spark = parquet_rows(table, [p for p, _, _ in live_files(table)])
        assert rows_spark == rows_in, f"recluster (Spark tasks) lost or duplicated rows: {rows_in} -> {rows_spark}"
        log(f"throughput: run {attempt + 1}: recluster with the merge in Spark tasks {seconds:.1f} s")
        backup.restore()
        out = work / "raw-out"
        raw_times.append(raw_spark_sort(spark, files, rows_in, out))
        rows_raw = sum(pq.read_metadata(p).num_rows for p in out.glob("*.parquet"))
        shutil.rmtree(out)
        seconds, result = recluster_final(spark, table, settings)
        recluster_times.append(seconds)
        results.append(result)
        after = live_files(table)
        rows_after = parquet_rows(table, [p for p, _, _ in after])
        log(
            f"throughput: run {attempt + 1}: raw {raw_times[-1]:.1f} s, recluster {seconds:.1f} s "
            f"(rounds={result.rounds} tasks={result.totals.tasks} "
            f"files {result.totals.files_removed}->{result.totals.files_added} "
            f"stop={result.stop_reason} depth {result.before.table.average_depth:.1f}->"
            f"{result.after.table.average_depth:.2f})"
        )
        assert rows_after == rows_in, f"recluster lost or duplicated rows: {rows_in} -> {rows_after}"
        assert rows_raw == rows_in, f"raw sort lost or duplicated rows: {rows_in} -> {rows_raw}"
        if attempt + 1 < repeats:
            backup.restore()
    best = results[int(np.argmin(recluster_times))]
    raw_best, recluster_best = min(raw_times), min(recluster_times)
    raw_mbps = input_bytes / MB / raw_best
    recluster_mbps = input_bytes / MB / recluster_best
    spark_mbps = input_bytes / MB / min(spark_times)
    return {
        "files": files_count,
        "rows": rows_in,
        "input_bytes": input_bytes,
        "warmup_raw_seconds": warm,
        "warmup_raw_files": len(warm_files),
        "warmup_tiny_recluster_seconds": tiny_seconds,
        "raw_seconds": raw_times,
        "recluster_seconds": recluster_times,
        "raw_mb_per_s": raw_mbps,
        "recluster_mb_per_s": recluster_mbps,
        "ratio_recluster_to_raw": recluster_mbps / raw_mbps,
        "recluster_spark_placement_seconds": spark_times,
        "recluster_spark_placement_mb_per_s": spark_mbps,
        "ratio_spark_placement_to_process": spark_mbps / recluster_mbps,
        "goal_ratio": 0.8,
        "rows_before": rows_in,
        "rows_after_recluster": rows_after,
        "rows_after_raw": rows_raw,
        "recluster_result": best.to_dict(),
    }


# ---- part 2: write amplification of incremental rounds --------------------------------------------------------


def write_amplification(spark: Any, work: Path, appends: int, rows: int) -> dict[str, Any]:
    rng = np.random.default_rng(20240602)
    table = work / "incremental"
    settings = Settings(clustering=ClusteringSettings(target_rows=100_000))
    seen: set[str] = set()
    rounds: list[dict[str, Any]] = []
    result = None
    for i in range(appends):
        append(table, random_batch(rng, rows))
        current = live_files(table)
        appended = sum(size for p, size, _ in current if p not in seen)
        table_bytes = sum(size for _, size, _ in current)
        started = time.perf_counter()
        loader = snapshot_loader(str(table), settings, None)
        result = recluster_table(str(table), loader, settings=settings, spark_factory=lambda: spark, final=False)
        seconds = time.perf_counter() - started
        seen = {p for p, _, _ in live_files(table)}
        rounds.append(
            {
                "append": i + 1,
                "appended_bytes": appended,
                "table_bytes_after_append": table_bytes,
                "bytes_written": result.totals.bytes_written,
                "bytes_read": result.totals.bytes_read,
                "tasks": result.totals.tasks,
                "seconds": seconds,
                "average_depth": result.after.table.average_depth,
                "files": result.after.table.total_block_count,
            }
        )
    assert result is not None
    total_rows = sum(rows for _, _, rows in live_files(table))
    assert total_rows == appends * rows, f"rows {total_rows} != appended {appends * rows}"
    appended_total = sum(r["appended_bytes"] for r in rounds)
    written_total = sum(r["bytes_written"] for r in rounds)
    full_rewrite_total = sum(r["table_bytes_after_append"] for r in rounds)
    wa = written_total / appended_total
    full_wa = full_rewrite_total / appended_total
    log(
        f"write amplification: {appends} appends, WA {wa:.2f} vs full rewrite {full_wa:.2f}, "
        f"final depth {result.after.table.average_depth:.2f}"
    )
    return {
        "appends": appends,
        "rows_per_append": rows,
        "bytes_appended": appended_total,
        "bytes_written": written_total,
        "write_amplification": wa,
        "full_rewrite_bytes": full_rewrite_total,
        "full_rewrite_write_amplification": full_wa,
        "ratio_wa_to_full_rewrite": wa / full_wa,
        "final_average_depth": result.after.table.average_depth,
        "final_p99_depth": result.after.table.p99_depth,
        "final_files": result.after.table.total_block_count,
        "final_levels": {str(k): v.total_block_count for k, v in result.after.levels.items()},
        "mean_round_seconds": float(np.mean([r["seconds"] for r in rounds])),
        "rounds": rounds,
    }


# ---- entry point ---------------------------------------------------------------------------------------------


def summary_rows(result: dict[str, Any]) -> list[list[Any]]:
    """[measure, recluster, baseline, ratio, goal] rows."""
    t, w = result["throughput"], result["write_amplification"]
    return [
        [
            f"merge throughput, MB/s ({t['input_bytes'] / MB:,.0f} MB, {t['rows']:,} rows)",
            t["recluster_mb_per_s"],
            t["raw_mb_per_s"],
            t["ratio_recluster_to_raw"],
            f">= 0.8 ({'met' if t['ratio_recluster_to_raw'] >= 0.8 else 'MISSED'})",
        ],
        [
            "merge time, s (best)",
            min(t["recluster_seconds"]),
            min(t["raw_seconds"]),
            min(t["recluster_seconds"]) / min(t["raw_seconds"]),
            "",
        ],
        [
            "merge throughput with the merge in Spark tasks (merge.placement=spark), MB/s; baseline: in the process",
            t["recluster_spark_placement_mb_per_s"],
            t["recluster_mb_per_s"],
            t["ratio_spark_placement_to_process"],
            "",
        ],
        [
            f"write amplification, {w['appends']} appends x {w['rows_per_append']:,} rows",
            w["write_amplification"],
            w["full_rewrite_write_amplification"],
            w["ratio_wa_to_full_rewrite"],
            "< 1",
        ],
        [
            "final average depth (after last round)",
            w["final_average_depth"],
            1.0,
            w["final_average_depth"],
            "",
        ],
    ]


def main(quick: bool = False) -> dict[str, Any]:
    files_count, rows_per_file, repeats = (6, 600_000, 2) if quick else (40, 600_000, 2)
    appends = 15 if quick else 30
    spark = start_spark()
    work = Path(tempfile.mkdtemp(prefix="recluster-merge-bench-"))
    started = time.perf_counter()
    try:
        result: dict[str, Any] = {
            "benchmark": "merge",
            "quick": quick,
            "date": dt.date.today().isoformat(),
            "machine": machine(),
            "spark": {"master": SPARK_SETTINGS.master, "shuffle_partitions": SPARK_SETTINGS.shuffle_partitions},
            "throughput": throughput(spark, work, files_count, rows_per_file, repeats),
            "write_amplification": write_amplification(spark, work, appends, 20_000),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["seconds"] = time.perf_counter() - started
    result["summary"] = summary_records(summary_rows(result))
    path = write_results("merge-quick" if quick else "merge", result)
    print("\n### merge\n")
    print(markdown_table(SUMMARY_HEADERS, summary_rows(result)))
    w = result["write_amplification"]
    print(
        "\nBaselines: raw Spark repartitionByRange + sortWithinPartitions + Parquet write of the same files; "
        "for WA, a full rewrite of the table after every append (depth 1)."
    )
    print(f"\nper-round bytes written (MB): {[round(r['bytes_written'] / MB, 2) for r in w['rounds']]}")
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    quick_cli("python -m bench.merge_bench", main, "~150 MB and 15 appends instead of ~1 GB and 30")
