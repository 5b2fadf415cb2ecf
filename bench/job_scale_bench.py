"""Many tables in one streaming job: `python -m bench.job_scale_bench [--quick]` (issue 23).

N small tables (random int64 keys, cluster key set) are watched by one job (`jobs.autorecluster.start_job`, 1 s
trigger, the job's tick every 0.5 s as `recluster watch` runs it), N = 1 and 1,000 (quick: 1 and 100). A writer
appends 10 commits/s, round-robin over the tables, for 60 s (quick: 20 s). Every table's scheduled maintenance
falls due at the start (no history yet), as after a first deployment: the stall the issue measured. Reported, per N,
in the same run: commit -> decision latency (the first status the handler publishes for the table at or past the
commit's version, minus the time the append returned) median and p95 over the second half of the commits; the
longest time a micro-batch waited for the handler's lock (maintenance used to hold it); the peak resident memory
of this process plus the Spark JVM. Goals (N = 1,000): p95 <= 2.5 s, no micro-batch waits > 1 s, memory <= 1.5x
the 1-table job. Writes bench/results/job-scale-<date>.json.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from bench.common import log, percentile, publish, quick_cli, start_spark
from docgen.figures import MB, ratio_row
from jobs.autorecluster import start_job, stop_gracefully
from recluster.delta.log_writer import set_table_properties
from recluster.engine.job_status import follow_statuses
from recluster.settings import CLUSTER_BY_PROPERTY, Settings, TableSettings
from recluster.settings_job import StreamSettings

COMMITS_PER_SECOND = 10
ROWS = 200


class TimedLock:
    """The handler's lock, recording how long each blocking acquire (a micro-batch) waited."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.waits: list[float] = []

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        started = time.monotonic()
        got = bool(self.inner.acquire(blocking, timeout))
        if blocking:
            self.waits.append(time.monotonic() - started)
        return got

    def release(self) -> None:
        self.inner.release()

    def __enter__(self) -> TimedLock:
        self.acquire()
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def make_tables(root: Path, count: int, rng: np.random.Generator) -> list[Path]:
    paths = []
    for index in range(count):
        path = root / f"t{index:04d}"
        write_deltalake(str(path), pa.table({"k": rng.integers(0, 1 << 40, ROWS)}), mode="append")
        set_table_properties(path, {CLUSTER_BY_PROPERTY: "k"})
        paths.append(path)
    return paths


def run(spark: Any, work: Path, count: int, seconds: float) -> dict[str, Any]:
    rng = np.random.default_rng(count)
    started = time.monotonic()
    tables = make_tables(work / f"tables-{count}", count, rng)
    log(f"job scale: {count:,} tables created in {time.monotonic() - started:.1f} s")
    settings = Settings(
        stream=StreamSettings(checkpoint_location=str(work / f"checkpoint-{count}"), trigger_interval_seconds=1.0),
        tables=[TableSettings(uri=str(t)) for t in tables],
    )
    statuses: list[tuple[float, str, int]] = []
    query, handler = start_job(spark, settings, settings.tables)
    lock = TimedLock(handler.lock)
    handler.lock = lock  # type: ignore[assignment]
    follow_statuses(handler.board, lambda s: statuses.append((time.monotonic(), s.table, s.version)))
    jvm = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    peak = [0]
    stop = threading.Event()

    def background() -> None:  # the job's tick, as `recluster watch` calls it, and the memory probe
        while not stop.wait(0.5):
            handler.tick()
            peak[0] = max(peak[0], rss_bytes(os.getpid()) + (rss_bytes(jvm.pid) if jvm else 0))

    ticker = threading.Thread(target=background, daemon=True)
    ticker.start()
    appends: list[tuple[float, str, int]] = []
    try:
        time.sleep(3)  # the query's first (empty) batch
        first = time.monotonic()
        total = int(seconds * COMMITS_PER_SECOND)
        for index in range(total):
            delay = first + index / COMMITS_PER_SECOND - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            path = tables[index % count]
            write_deltalake(str(path), pa.table({"k": rng.integers(0, 1 << 40, ROWS)}), mode="append")
            appends.append((time.monotonic(), str(path), DeltaTable(str(path)).version()))
        time.sleep(10)  # let the job catch up with the last commits
    finally:
        stop.set()
        ticker.join()
        stop_gracefully(query, handler)
    latencies = []
    for appended, table, version in appends[len(appends) // 2 :]:
        seen = next((t for t, name, v in statuses if name == table and v >= version and t >= appended), None)
        latencies.append(None if seen is None else seen - appended)
    measured = [x for x in latencies if x is not None]
    result = {
        "tables": count,
        "commits": len(appends),
        "commits_measured": len(latencies),
        "missed": sum(x is None for x in latencies),
        "latency_median_seconds": float(np.median(measured)) if measured else None,
        "latency_p95_seconds": percentile(measured, 95) if measured else None,
        "longest_batch_lock_wait_seconds": max(lock.waits, default=0.0),
        "batches": len(lock.waits),
        "peak_rss_bytes": peak[0],
        "tracked": len(handler.tracked),
    }
    log(f"job scale {count:,} tables: {result}")
    return result


def main(quick: bool = False) -> dict[str, Any]:
    counts, seconds = ((1, 100), 20.0) if quick else ((1, 1_000), 60.0)
    spark = start_spark()
    with tempfile.TemporaryDirectory(prefix="recluster-job-scale-") as scratch:
        one, many = (run(spark, Path(scratch), count, seconds) for count in counts)
    label = f"{many['tables']:,} tables vs 1"
    measures = (
        ("commit -> decision p95, s", "latency_p95_seconds", 1.0, "<= 2.5 s"),
        ("commit -> decision median, s", "latency_median_seconds", 1.0, "-"),
        ("longest micro-batch wait for the lock, s", "longest_batch_lock_wait_seconds", 1.0, "<= 1 s"),
        ("peak RSS (process + JVM), MB", "peak_rss_bytes", 1 / MB, "<= 1.5x"),
    )
    rows = [
        ratio_row(f"{name}: {label}", many[field] * scale, max(one[field] * scale, 1e-9), goal)
        for name, field, scale, goal in measures
    ]
    result = {"quick": quick, "commits_per_second": COMMITS_PER_SECOND, "seconds": seconds, "runs": [one, many]}
    return publish("job-scale", "many tables in one job", quick, rows, result)


if __name__ == "__main__":
    quick_cli("python -m bench.job_scale_bench", main, description=__doc__.splitlines()[0] if __doc__ else None)
