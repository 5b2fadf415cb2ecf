"""FINAL on a Spark standalone cluster, 1 worker against 2: `python -m bench.cluster_bench [--quick]` (issue 21).

A table of about 1 GB (quick: 100 MB) of random int64 keys with payload; `recluster run --final` as a user runs it
(a CLI process, the driver) with `spark.master=spark://...` and every merge in Spark tasks (`merge.placement:
spark`), once on a cluster of one worker and once on two (1 core, 1.5 GB, executors of 1 GB each), the table
restored between runs. Reports seconds and MB/s of each, their ratio, and each executor's peak resident memory
(its JVM plus its Python workers, polled from /proc every 0.2 s). This machine has 2 cores shared with the
driver: the point is that it runs distributed with bounded executor memory, not the speed-up.
Rows are checked unchanged (count + order-independent hash). Writes bench/results/cluster-<date>.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from deltalake import DeltaTable

from bench.common import LogBackup, live_files, log, publish, quick_cli, random_batch
from docgen.figures import MB
from tests.fingerprints import row_fingerprint
from tests.spark_cluster import Cluster, cluster_config, executor_tree_rss, standalone_cluster
from tests.workload_data import append

ROWS_PER_FILE = 1_000_000
TARGET_ROWS = 2_000_000


class PeakExecutorMemory:
    """Polls the executors' process trees in a thread; `peaks` maps each executor JVM's pid to its largest RSS."""

    def __init__(self, cluster: Cluster | None = None) -> None:
        """`cluster`: only its executors (spark-class execs the worker's JVM: its pid is the Popen's)."""
        self.workers = None if cluster is None else {process.pid for process in cluster.processes[1:]}
        self.peaks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="executor-memory", daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(0.2):
            for pid, rss in executor_tree_rss(self.workers).items():
                self.peaks[pid] = max(rss, self.peaks.get(pid, 0))

    def __enter__(self) -> PeakExecutorMemory:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def run_final_on_cluster(
    table: Path, work: Path, workers: int, target_rows: int, target_file_bytes: int | None = None
) -> tuple[float, dict[str, Any], list[int]]:
    """`recluster run --final --json` as a subprocess (the driver) against a fresh cluster of `workers` workers:
    its wall seconds, its JSON result and each executor's peak RSS (largest first)."""
    with standalone_cluster(work / f"cluster-{workers}", workers=workers) as cluster:
        config = cluster_config(cluster, work, target_rows=target_rows, target_file_bytes=target_file_bytes)
        environment = {k: v for k, v in os.environ.items() if not k.startswith("RECLUSTER_")}
        environment["XDG_STATE_HOME"] = str(work / "state")
        command = [sys.executable, "-m", "recluster.cli", "run", str(table), "--final", "--config", str(config)]
        with PeakExecutorMemory(cluster) as memory:
            started = time.perf_counter()
            done = subprocess.run([*command, "--json"], capture_output=True, text=True, env=environment)
            seconds = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"recluster run failed on {workers} worker(s):\n{done.stderr[-3000:]}")
    return seconds, json.loads(done.stdout), sorted(memory.peaks.values(), reverse=True)


def final_on_cluster(table: Path, workers: int, work: Path) -> dict[str, Any]:
    """`recluster run --final` against a fresh cluster of `workers` workers."""
    seconds, result, peaks = run_final_on_cluster(table, work, workers, TARGET_ROWS)
    log(f"{workers} worker(s): {seconds:.1f} s, {result['tasks']} tasks, executor peaks {[p // MB for p in peaks]} MB")
    return {
        "workers": workers,
        "seconds": seconds,
        "tasks": result["tasks"],
        "failures": result["failures"],
        "depth_after": result["after"]["average_depth"],
        "executor_peak_rss_bytes": peaks,
        "executor_processes": len(peaks),
    }


def main(quick: bool = False) -> dict[str, Any]:
    files = 3 if quick else 28
    with tempfile.TemporaryDirectory(prefix="recluster-cluster-bench-") as scratch:
        work = Path(scratch)
        table = work / "table"
        rng = np.random.default_rng(21)
        for _ in range(files):
            append(table, random_batch(rng, ROWS_PER_FILE))
        input_bytes = sum(size for _, size, _ in live_files(table))
        expected = row_fingerprint(DeltaTable(str(table)).to_pyarrow_table())
        log(f"table: {files} files, {input_bytes / MB:.0f} MB")
        backup = LogBackup(table)
        runs = []
        for workers in (1, 2):
            runs.append(final_on_cluster(table, workers, work))
            assert row_fingerprint(DeltaTable(str(table)).to_pyarrow_table()) == expected, "the rows changed"
            backup.restore()
    one, two = runs
    mb = input_bytes / MB
    peak = max(p for run in runs for p in run["executor_peak_rss_bytes"])
    peak_one, peak_two = max(one["executor_peak_rss_bytes"]), max(two["executor_peak_rss_bytes"])
    rows = [
        ["FINAL MB/s: 2 workers vs 1", mb / two["seconds"], mb / one["seconds"], one["seconds"] / two["seconds"], "-"],
        [
            "largest executor peak RSS, MB (JVM + Python workers): 2 workers vs 1",
            peak_two / MB,
            peak_one / MB,
            peak_two / peak_one,
            "bounded (1 GB executor heap)",
        ],
    ]
    result = {
        "quick": quick,
        "input_bytes": input_bytes,
        "input_files": files,
        "rows": expected[0],
        "target_rows": TARGET_ROWS,
        "runs": runs,
        "largest_executor_peak_rss_bytes": peak,
    }
    return publish("cluster", "FINAL on a Spark standalone cluster: 1 worker vs 2", quick, rows, result)


if __name__ == "__main__":
    quick_cli("python -m bench.cluster_bench", main, description=__doc__.splitlines()[0] if __doc__ else None)
