"""FINAL with merges in Spark tasks against Delta's `OPTIMIZE ZORDER BY` on the same Spark standalone cluster
(issue 33): `python -m bench.delta_cluster_bench [--quick]`.

Tables of about 1 GB and 4 GB (quick: about 130 MB) of random int64 keys `k` with payload, appended by delta-rs.
Each side gets a fresh standalone cluster of a master and 2 workers (1 core, 1.5 GB each; executors of 1 GB heap),
the shape of `./dev cluster`: recluster's from the product's pyspark 4.3 running `recluster run --final` as a user
runs it (a CLI process, the driver; `merge.placement: spark`), Delta's from the referee's pyspark 4.2 with Delta
Spark 4.4 (`./dev referee`) running `OPTIMIZE delta.`t` ZORDER BY (k)` with Spark's and Delta's defaults. Both aim
at TARGET_FILE_BYTES per output file (`clustering.target_file_bytes` = `spark.databricks.delta.optimize.maxFileSize`).
Reported per side: cold wall (driver process start to end, the cluster already up) and MB/s of input bytes, the
statement alone, each executor's peak resident memory (its JVM plus its Python workers, polled every 0.2 s), output
bytes and files. Rows are checked unchanged (count + order-independent hash) after each side; the table is restored
between them. Goals: MB/s >= 1.2x Delta's, output bytes <= 1.0x, executor peak memory <= 1.0x.
Writes bench/results/delta-cluster[-quick]-<date>.json.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from deltalake import DeltaTable

from bench.cluster_bench import PeakExecutorMemory, run_final_on_cluster
from bench.common import LogBackup, live_files, log, publish, quick_cli, random_batch
from docgen.figures import MB
from docgen.summary_figures import delta_cluster_rows
from tests.fingerprints import batches_fingerprint
from tests.referee import REFEREE_PYTHON, Referee, referee_missing
from tests.spark_cluster import CLUSTER_DRIVER_CONF, standalone_cluster
from tests.workload_data import append

ROWS_PER_FILE = 1_000_000
TARGET_FILE_BYTES = 128 << 20
FULL_SIZES = {"1 GB": 24, "4 GB": 96}
"""Input files of ROWS_PER_FILE rows (about 43 MB each) per table size."""
QUICK_SIZES = {"130 MB": 3}
REFEREE_SPARK_HOME = next(REFEREE_PYTHON.parent.parent.glob("lib/python3*/site-packages/pyspark"), Path("-"))


def table_fingerprint(table: Path) -> tuple[int, str]:
    """The table's rows fingerprinted a batch at a time (the 4 GB table would not fit in memory as pandas)."""
    return batches_fingerprint(DeltaTable(str(table)).to_pyarrow_dataset().to_batches())


def recluster_on_cluster(table: Path, work: Path) -> dict[str, Any]:
    """`recluster run --final` on a fresh 2-worker cluster of the product's Spark."""
    seconds, result, peaks = run_final_on_cluster(table, work, 2, 1_000_000_000, TARGET_FILE_BYTES)
    return {"seconds": seconds, "statement_seconds": float(result["seconds"]), "peaks": peaks}


def delta_on_cluster(table: Path, work: Path) -> dict[str, Any]:
    """Delta Spark's OPTIMIZE ZORDER BY (k) from a fresh driver on a fresh cluster of the referee's Spark."""
    logs = work / "delta-cluster"
    cluster_of = standalone_cluster(logs, workers=2, spark_home=REFEREE_SPARK_HOME, python=str(REFEREE_PYTHON))
    with cluster_of as cluster, PeakExecutorMemory(cluster) as memory:
        started = time.perf_counter()
        referee = Referee(logs, defaults=True, driver_memory="3g", master=cluster.master, conf=CLUSTER_DRIVER_CONF)
        try:
            referee.sql(f"SET spark.databricks.delta.optimize.maxFileSize={TARGET_FILE_BYTES}")
            begun = time.perf_counter()
            referee.sql(f"OPTIMIZE delta.`{table}` ZORDER BY (k)")
            ended = time.perf_counter()
        finally:
            referee.stop()
    peaks = sorted(memory.peaks.values(), reverse=True)
    return {"seconds": ended - started, "statement_seconds": ended - begun, "peaks": peaks}


def measure_size(label: str, files: int, work: Path) -> dict[str, Any]:
    table = work / "table"
    rng = np.random.default_rng(33)
    for _ in range(files):
        append(table, random_batch(rng, ROWS_PER_FILE))
    before = live_files(table)
    input_bytes = sum(size for _, size, _ in before)
    expected = table_fingerprint(table)
    log(f"delta cluster: {label}: {files} files, {input_bytes / MB:.0f} MB")
    backup = LogBackup(table)
    sides: dict[str, Any] = {}
    for name, run in (("recluster", recluster_on_cluster), ("delta_zorder", delta_on_cluster)):
        measured = run(table, work)
        after = live_files(table)
        assert table_fingerprint(table) == expected, f"{name} changed the rows"
        peaks = measured.pop("peaks")
        sides[name] = {
            **measured,
            "mb_per_s": input_bytes / MB / measured["seconds"],
            "statement_mb_per_s": input_bytes / MB / measured["statement_seconds"],
            "executor_peak_rss_bytes": peaks,
            "output_bytes": sum(size for _, size, _ in after),
            "output_files": len(after),
        }
        log(
            f"delta cluster: {label}: {name} {measured['seconds']:.1f} s (statement {measured['statement_seconds']:.1f}"
            f" s), executor peaks {[p // MB for p in peaks]} MB, {len(after)} files"
        )
        backup.restore()
    return {"label": label, "input_files": files, "input_bytes": input_bytes, "rows": expected[0], **sides}


def main(quick: bool = False) -> dict[str, Any]:
    missing = referee_missing()
    if missing:
        raise SystemExit(missing)
    sizes = QUICK_SIZES if quick else FULL_SIZES
    measured = []
    for label, files in sizes.items():
        with tempfile.TemporaryDirectory(prefix="recluster-delta-cluster-") as scratch:
            measured.append(measure_size(label, files, Path(scratch)))
    rows = [row for size in measured for row in delta_cluster_rows(size)]
    result = {"quick": quick, "target_file_bytes": TARGET_FILE_BYTES, "sizes": measured}
    return publish(
        "delta-cluster", "FINAL in Spark tasks vs Delta OPTIMIZE ZORDER BY, 2-worker cluster", quick, rows, result
    )


if __name__ == "__main__":
    quick_cli("python -m bench.delta_cluster_bench", main, description=__doc__.splitlines()[0] if __doc__ else None)
