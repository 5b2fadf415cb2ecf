"""FINAL recluster against delta-rs z_order and raw Spark on the same data: `python -m bench.output_bench [--quick]`.

Tables of overlapping appends (random int64 keys, a float, a 20-letter string, an int; 40 files): about 190 MB
(4M rows, the issue-18 size) and about 1 GB (20M rows); quick mode one 10-file table of 1M rows. Each side rewrites
its own copy of a table in a child process of its own, so its peak RSS is its own:
- recluster: one FINAL `recluster_table` with the default settings (spark.master local[*]: the kernel runs in
  the process, range-partitioned through local spill files above merge.in_process_max_bytes; no JVM);
- delta-rs `optimize.z_order(["k"])`;
- raw Spark (local[2], warmed on a third of the files first): read -> repartitionByRange(ceil(rows / 1M), k) ->
  sortWithinPartitions(k) -> write Parquet; its RSS is the JVM's (driver and executor in one in local mode).
Timed is the rewrite only (not the child's start). Sides alternate, `repeats` times each, the best time kept.
Reported: throughput (input MB / s) and the ratios, bytes per row afterwards with the codecs read from the Parquet
footers, and peak RSS. Goals (issue 18): throughput >= 1.1x z_order and >= 0.9x raw Spark; bytes <= 1.0x z_order.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from deltalake import DeltaTable

from bench.common import (
    log,
    machine,
    markdown_table,
    quick_cli,
    random_batch,
    raw_spark_sort,
    start_spark,
    write_results,
)
from docgen.figures import SUMMARY_HEADERS, summary_records
from tests.fingerprints import row_fingerprint
from tests.workload_data import append

SIDES = ("recluster", "z_order", "raw_spark")
MIB = 1 << 20


def live_files(path: Path) -> list[str]:
    return [uri.removeprefix("file://") for uri in DeltaTable(str(path)).file_uris()]


def table_bytes(path: Path) -> int:
    return sum(Path(f).stat().st_size for f in live_files(path))


def codecs(files: list[str]) -> list[str]:
    found = set()
    for name in files:
        metadata = pq.ParquetFile(name).metadata
        found |= {
            metadata.row_group(g).column(c).compression
            for g in range(metadata.num_row_groups)
            for c in range(metadata.num_columns)
        }
    return sorted(found)


def peak_rss_mib(pid: int | str = "self") -> float:
    """A process's peak resident memory (VmHWM) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024


def run_side(side: str, path: Path, out: Path) -> dict[str, Any]:
    """The child's work: rewrite the table at `path` one way, time it, and report the peak RSS."""
    if side == "recluster":
        from recluster.engine.rounds import recluster_table, snapshot_loader
        from recluster.settings import Settings

        settings = Settings()
        started = time.perf_counter()
        recluster_table(
            str(path),
            snapshot_loader(str(path), settings, None),
            settings=settings,
            spark_factory=start_spark,
            final=True,
        )
        return {"seconds": time.perf_counter() - started, "driver_rss_mib": peak_rss_mib()}
    if side == "z_order":
        started = time.perf_counter()
        DeltaTable(str(path)).optimize.z_order(["k"])
        return {"seconds": time.perf_counter() - started, "driver_rss_mib": peak_rss_mib()}
    spark = start_spark()
    files = live_files(path)
    rows = sum(pq.read_metadata(f).num_rows for f in files)
    warm = files[: max(1, len(files) // 3)]
    raw_spark_sort(spark, warm, sum(pq.read_metadata(f).num_rows for f in warm), out.parent / "raw-warmup")
    seconds = raw_spark_sort(spark, files, rows, out)
    jvm = spark.sparkContext._gateway.proc.pid
    result = {"seconds": seconds, "driver_rss_mib": peak_rss_mib(), "jvm_rss_mib": peak_rss_mib(jvm)}
    spark.stop()
    return result


def measure(side: str, source: Path, scratch: Path) -> dict[str, Any]:
    """Copy the table, rewrite the copy in a child process; the child's figures plus the output's bytes."""
    copy = scratch / side
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(source, copy)
    out = scratch / f"{side}-out"
    command = [sys.executable, "-m", "bench.output_bench", "--child", side, str(copy), str(out)]
    completed = subprocess.run(command, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    files = [str(p) for p in out.glob("*.parquet")] if side == "raw_spark" else live_files(copy)
    result["bytes"] = sum(Path(f).stat().st_size for f in files)
    result["rows"] = sum(pq.read_metadata(f).num_rows for f in files)
    result["codecs"] = codecs(files)
    if side != "raw_spark":
        result["digest"] = list(row_fingerprint(DeltaTable(str(copy)).to_pyarrow_table()))
    shutil.rmtree(copy, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    return result


def one_size(files: int, rows: int, repeats: int, scratch: Path) -> dict[str, Any]:
    source = scratch / "source"
    shutil.rmtree(source, ignore_errors=True)
    rng = np.random.default_rng(11)
    for _ in range(files):
        append(source, random_batch(rng, rows))
    label = f"{table_bytes(source) / 1e6:,.0f} MB"
    log(f"output bench {label}: {files} appends x {rows:,} rows")
    expected = list(row_fingerprint(DeltaTable(str(source)).to_pyarrow_table()))
    source_bytes = table_bytes(source)
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    for attempt in range(repeats):
        for side in SIDES:
            runs[side].append(measure(side, source, scratch))
            log(f"  {label} run {attempt + 1} {side}: {runs[side][-1]['seconds']:.1f} s")
    for side in ("recluster", "z_order"):
        assert all(r["digest"] == expected for r in runs[side]), f"{side} changed the rows"
    assert all(r["rows"] == files * rows for r in runs["raw_spark"]), "raw Spark lost or duplicated rows"
    best = {side: min(runs[side], key=lambda r: float(r["seconds"])) for side in SIDES}
    shutil.rmtree(source, ignore_errors=True)
    return {
        "label": label,
        "files": files,
        "rows": files * rows,
        "source_bytes": source_bytes,
        "runs": runs,
        "best": best,
        "mb_per_s": {side: source_bytes / 1e6 / best[side]["seconds"] for side in SIDES},
    }


def summary_rows(sizes: list[dict[str, Any]]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for size in sizes:
        speed, best, label = size["mb_per_s"], size["best"], size["label"]
        rows.append(
            [
                f"{label}: FINAL throughput vs delta-rs z_order, MB/s",
                speed["recluster"],
                speed["z_order"],
                speed["recluster"] / speed["z_order"],
                ">= 1.1",
            ]
        )
        rows.append(
            [
                f"{label}: FINAL throughput vs raw Spark sort, MB/s",
                speed["recluster"],
                speed["raw_spark"],
                speed["recluster"] / speed["raw_spark"],
                ">= 0.9",
            ]
        )
        rows.append(
            [
                f"{label}: bytes per row after FINAL vs delta-rs z_order",
                best["recluster"]["bytes"] / size["rows"],
                best["z_order"]["bytes"] / size["rows"],
                best["recluster"]["bytes"] / best["z_order"]["bytes"],
                "<= 1.0",
            ]
        )
        rows.append(
            [
                f"{label}: peak RSS, MiB (recluster's process vs raw Spark's JVM)",
                best["recluster"]["driver_rss_mib"],
                best["raw_spark"]["jvm_rss_mib"],
                best["recluster"]["driver_rss_mib"] / best["raw_spark"]["jvm_rss_mib"],
                "reported",
            ]
        )
    return rows


def main(quick: bool = False) -> dict[str, Any]:
    shapes = [(10, 100_000, 1)] if quick else [(40, 100_000, 2), (40, 500_000, 1)]  # about 50 MB; 190 MB, 1 GB
    with tempfile.TemporaryDirectory(prefix="recluster-output-bench-") as scratch:
        sizes = [one_size(files, rows, repeats, Path(scratch)) for files, rows, repeats in shapes]
    result: dict[str, Any] = {"quick": quick, "sizes": sizes, "machine": machine()}
    rows_out = summary_rows(sizes)
    result["summary"] = summary_records(rows_out)
    print("\n### output: recluster FINAL vs delta-rs z_order and raw Spark on the same data\n")
    print(markdown_table(SUMMARY_HEADERS, rows_out))
    for size in sizes:
        print(f"\n{size['label']}: codecs " + ", ".join(f"{s} {size['best'][s]['codecs']}" for s in SIDES))
    print(f"wrote {write_results('output-quick' if quick else 'output', result)}")
    return result


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        print(json.dumps(run_side(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]))))
    else:
        quick_cli("python -m bench.output_bench", main, description=__doc__.splitlines()[0] if __doc__ else None)
