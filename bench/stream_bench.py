"""The streaming job under a steady writer: commit-to-decision latency, depth and write amplification.

Run from the project root: `python -m bench.stream_bench [--quick]`.

A demo table (random int64 keys, `recluster.engine.demo.append_demo_batch`) gets one batch of 20,000 rows, the job
starts (`jobs.autorecluster.start_job`, 1 s trigger, target_rows=100,000), then 30 (quick: 15) more batches
arrive, one every 1.5 s. For every timed append, latency = time the handler published a status for a version
>= the append's version minus the time `write_deltalake` returned (the status is published after the batch's
merges committed). Baselines: the trigger interval for latency; a full rewrite after every append for WA.

Prints a markdown table and writes JSON to bench/results/stream[-quick]-<YYYY-MM-DD>.json.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from deltalake import DeltaTable

from bench.common import log, machine, markdown_table, percentile, quick_cli, start_spark, write_results
from docgen.figures import SUMMARY_HEADERS, summary_records
from jobs.autorecluster import start_job, stop_gracefully
from recluster.delta.log import PRODUCER, PRODUCER_KEY
from recluster.engine.demo import append_demo_batch
from recluster.engine.job_state import TableStatus
from recluster.engine.job_status import follow_statuses
from recluster.engine.rounds import recluster_table, snapshot_loader
from recluster.settings import ClusteringSettings, Settings, TableSettings
from recluster.settings_job import StreamSettings

ROWS = 20_000
INTERVAL_SECONDS = 1.5
TRIGGER_SECONDS = 1.0


def foreign_data_commits(path: Path) -> list[tuple[int, int]]:
    """(version, bytes added) of every commit that added data and is not one of our rewrites, in order."""
    commits = []
    for entry in sorted((path / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in entry.read_text(encoding="utf-8").splitlines() if line.strip()]
        info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        adds = [a["add"] for a in actions if "add" in a]
        if adds and info.get(PRODUCER_KEY) != PRODUCER:
            commits.append((int(entry.stem), sum(int(a.get("size", 0)) for a in adds)))
    return commits


def warm_up(spark: Any, path: Path, rng: np.random.Generator) -> float:
    """One small merge before the job starts, so the first micro-batch does not pay for a cold JVM/workers."""
    started = time.perf_counter()
    for batch in range(2):
        append_demo_batch(path, rng, ROWS, batch)
    settings = Settings(clustering=ClusteringSettings(target_rows=100_000))
    recluster_table(
        str(path), snapshot_loader(str(path), settings, None), settings=settings, spark_factory=lambda: spark
    )
    return time.perf_counter() - started


def run(work: Path, batches: int) -> dict[str, Any]:
    spark = start_spark()
    table = work / "events"
    rng = np.random.default_rng(20240603)
    settings = Settings(
        clustering=ClusteringSettings(target_rows=100_000),
        stream=StreamSettings(
            checkpoint_location=str(work / "checkpoint"),
            trigger_interval_seconds=TRIGGER_SECONDS,
            starting_version="earliest",
        ),
        tables=[TableSettings(uri=str(table))],
    )
    warm_seconds = warm_up(spark, work / "warmup", rng)
    log(f"stream: warm-up merge (JVM, Python workers) {warm_seconds:.1f} s")
    append_demo_batch(table, rng, ROWS, 0)  # creates the table (and its cluster key) before the job starts

    statuses: list[tuple[float, TableStatus]] = []
    published = threading.Condition()

    def listener(status: TableStatus) -> None:
        with published:
            statuses.append((time.monotonic(), status))
            published.notify_all()

    def wait_for(version: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with published:
            while not any(s.version >= version for _, s in statuses) and not any(
                s.version >= version for s in handler.status.values()
            ):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                published.wait(left)
        return True

    started = time.monotonic()
    query, handler = start_job(spark, settings, settings.tables)
    follow_statuses(handler.board, listener)
    try:
        initial_version = DeltaTable(str(table)).version()
        if not wait_for(initial_version, 120):
            raise RuntimeError(f"the job published no status within 120 s: {query.lastProgress}")
        first_status_seconds = time.monotonic() - started
        log(f"stream: job up and caught up with version {initial_version} in {first_status_seconds:.1f} s")
        append_times: list[float] = []
        first = time.monotonic()
        for batch in range(1, batches + 1):
            delay = first + (batch - 1) * INTERVAL_SECONDS - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            append_demo_batch(table, rng, ROWS, batch)
            append_times.append(time.monotonic())
        commits = foreign_data_commits(table)
        assert len(commits) == batches + 1, f"expected {batches + 1} appends in the log, found {len(commits)}"
        caught_up = wait_for(commits[-1][0], 60)
        log(f"stream: {batches} appends done, job caught up: {caught_up}")
    finally:
        stop_gracefully(query, handler)
    exception = query.exception()
    if exception is not None:
        raise RuntimeError(f"streaming query failed: {exception}")

    with published:
        recorded = list(statuses)
    latencies: list[float | None] = []
    for (version, _), appended_at in zip(commits[1:], append_times, strict=True):
        seen = next((t for t, s in recorded if s.version >= version), None)
        latencies.append(None if seen is None else seen - appended_at)
    measured = [x for x in latencies if x is not None]
    midpoint = append_times[len(append_times) // 2]
    steady = [s.average_depth for t, s in recorded if t >= midpoint and s.error is None]
    final = recorded[-1][1]
    rows = DeltaTable(str(table)).to_pyarrow_dataset().count_rows()
    appended_bytes = [size for _, size in commits]
    full_rewrite = float(np.cumsum(appended_bytes).sum())
    wa = final.bytes_written / max(final.bytes_appended, 1)
    full_wa = full_rewrite / sum(appended_bytes)
    return {
        "warmup_seconds": warm_seconds,
        "job_start_to_first_status_seconds": first_status_seconds,
        "appends_timed": batches,
        "rows_per_append": ROWS,
        "interval_seconds": INTERVAL_SECONDS,
        "trigger_interval_seconds": TRIGGER_SECONDS,
        "latencies_seconds": latencies,
        "missed": sum(1 for x in latencies if x is None),
        "latency_median_seconds": float(np.median(measured)) if measured else None,
        "latency_p95_seconds": percentile(measured, 95) if measured else None,
        "latency_max_seconds": max(measured) if measured else None,
        "steady_average_depth": float(np.mean(steady)) if steady else None,
        "statuses": len(recorded),
        "final_status": str(final),
        "tasks": final.tasks,
        "conflicts": sum(s.conflicts for _, s in recorded),
        "failures": sum(s.failures for _, s in recorded),
        "bytes_written": final.bytes_written,
        "bytes_appended": final.bytes_appended,
        "bytes_appended_in_log": sum(appended_bytes),
        "write_amplification": wa,
        "write_amplification_log": final.bytes_written / sum(appended_bytes),
        "full_rewrite_write_amplification": full_wa,
        "ratio_wa_to_full_rewrite": wa / full_wa,
        "rows_expected": (batches + 1) * ROWS,
        "rows_final": rows,
        "depth_trace": [(round(t - first, 3), s.version, s.average_depth, s.tasks) for t, s in recorded],
    }


def summary_rows(result: dict[str, Any]) -> list[list[Any]]:
    s = result["stream"]
    trigger = s["trigger_interval_seconds"]
    median, p95 = s["latency_median_seconds"], s["latency_p95_seconds"]
    return [
        [
            "commit-to-decision latency p50, s",
            median,
            trigger,
            median / trigger,
            f"< 2 s ({'met' if median < 2 else 'MISSED'})",
        ],
        [
            "commit-to-decision latency p95, s",
            p95,
            trigger,
            p95 / trigger,
            f"< 2 s ({'met' if p95 < 2 else 'MISSED'})",
        ],
        [
            f"steady-state average depth ({s['appends_timed']} appends)",
            s["steady_average_depth"],
            1.0,
            s["steady_average_depth"],
            "",
        ],
        [
            "write amplification (job totals)",
            s["write_amplification"],
            s["full_rewrite_write_amplification"],
            s["ratio_wa_to_full_rewrite"],
            "< 1",
        ],
    ]


def main(quick: bool = False) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="recluster-stream-bench-"))
    started = time.perf_counter()
    try:
        stream = run(work, 15 if quick else 30)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "benchmark": "stream",
        "quick": quick,
        "date": dt.date.today().isoformat(),
        "machine": machine(),
        "stream": stream,
        "seconds": time.perf_counter() - started,
    }
    result["summary"] = summary_records(summary_rows(result))
    assert stream["rows_final"] == stream["rows_expected"], (
        f"rows {stream['rows_final']} != appended {stream['rows_expected']}"
    )
    path = write_results("stream-quick" if quick else "stream", result)
    print("\n### stream\n")
    print(markdown_table(SUMMARY_HEADERS, summary_rows(result)))
    print(
        f"\nrows: {stream['rows_final']:,} in the table, {stream['rows_expected']:,} appended; "
        f"merges {stream['tasks']}, conflicts {stream['conflicts']}, failures {stream['failures']}, "
        f"statuses {stream['statuses']}, appends without a status {stream['missed']}"
    )
    print(
        f"job counted {stream['bytes_appended']:,} bytes appended, the log holds {stream['bytes_appended_in_log']:,} "
        f"(WA over the log's appended bytes: {stream['write_amplification_log']:.3f})"
    )
    print(f"latencies (s): {[None if x is None else round(x, 2) for x in stream['latencies_seconds']]}")
    print(
        "Baselines: the trigger interval for latency; a full rewrite after every append (depth 1) for depth and WA "
        "(sum of the table size at each append / bytes appended)."
    )
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    quick_cli("python -m bench.stream_bench", main, "15 appends instead of 30")
