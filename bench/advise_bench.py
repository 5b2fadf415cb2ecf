"""Reading event logs for `recluster advise` (docs/advise.md): `python -m bench.advise_bench [--quick]`.

A real Delta Spark application (the tests' referee environment, `./dev referee`) runs 50 filtered queries on a
Delta table with `spark.eventLog.enabled`: its zstd event log is the unit. The application's events after its start
are repeated, execution ids renumbered, into one rolling log of 10,000 queries (1,000 with `--quick`), in parts of
200 queries as Spark rolls them. Measured: `recluster advise --no-cost` on it end to end (log read, scans, one
table's candidates simulated), and reading the scans alone, against the floor of decompressing the same files and
parsing every line with `json.loads`. The goal: 10,000 queries in under 30 s. Writes
bench/results/advise[-quick]-<date>.json.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from deltalake import write_deltalake

from bench.common import log, publish, quick_cli
from docgen.figures import ratio_row
from recluster.engine.advise import read_scans
from tests.referee import REFEREE_JARS, REFEREE_PYTHON, referee_environment, referee_missing

UNIT_QUERIES = 50
PART_QUERIES = 200
SCRIPT = Path(__file__).resolve().parents[1] / "tests" / "spark_event_logs.py"
_IDS = ("executionId", "rootExecutionId")


def real_log(work: Path) -> list[dict[str, Any]]:
    """The events of one real application's zstd event log: UNIT_QUERIES filtered queries on a Delta table."""
    table, logs = work / "events", work / "unit-logs"
    rng = np.random.default_rng(7)
    for _ in range(4):
        rows = 5_000
        data = pa.table({"a": rng.integers(0, 200, rows), "b": rng.integers(0, 10**6, rows)})
        write_deltalake(str(table), data, mode="append")
    logs.mkdir()
    sql = [f"SELECT count(*) FROM delta.`{table}` WHERE a = {v % 200}" for v in range(0, 3 * UNIT_QUERIES // 5)]
    sql += [f"SELECT * FROM delta.`{table}` WHERE b BETWEEN {v} AND {v + 999}" for v in range(2 * UNIT_QUERIES // 5)]
    spec = work / "applications.json"
    spec.write_text(json.dumps([{"conf": {"spark.eventLog.dir": logs.as_uri()}, "sql": sql}]))
    done = subprocess.run(
        [str(REFEREE_PYTHON), str(SCRIPT), str(REFEREE_JARS), str(spec)],
        capture_output=True,
        text=True,
        env=referee_environment(work),
        check=False,
    )
    if done.returncode:
        raise SystemExit(done.stderr[-2000:])
    events: list[dict[str, Any]] = []
    for part in sorted(logs.rglob("events_*")):
        with pa.CompressedInputStream(pa.OSFile(str(part)), "zstd") as stream:
            events += [json.loads(line) for line in stream.read().decode().splitlines() if line.strip()]
    return events


def renumbered(event: dict[str, Any], offset: int) -> dict[str, Any]:
    return {k: (v + offset if k in _IDS and isinstance(v, int) and v >= 0 else v) for k, v in event.items()}


def write_big_log(events: list[dict[str, Any]], queries: int, out: Path) -> tuple[int, int]:
    """The application's events repeated into a rolling zstd log of `queries` queries: (events, bytes written)."""
    start = next(i for i, e in enumerate(events) if e["Event"] == "SparkListenerApplicationStart") + 1
    header, body = events[:start], [e for e in events[start:] if e["Event"] != "SparkListenerApplicationEnd"]
    span = 1 + max(int(e.get("executionId", 0)) for e in body if isinstance(e.get("executionId"), int))
    directory = out / "eventlog_v2_local-1"
    directory.mkdir(parents=True)
    repeats, written, count, part = queries // UNIT_QUERIES, 0, 0, 1
    lines: list[str] = [json.dumps(e) for e in header]
    for repeat in range(repeats):
        lines += [json.dumps(renumbered(e, repeat * span)) for e in body]
        count += len(body)
        if (repeat + 1) * UNIT_QUERIES % PART_QUERIES == 0 or repeat == repeats - 1:
            data = ("\n".join(lines) + "\n").encode()
            path = directory / f"events_{part}_local-1.zstd"
            path.write_bytes(pa.compress(data, "zstd", asbytes=True))
            written += path.stat().st_size
            lines, part = [], part + 1
    return count + len(header), written


def json_floor(out: Path) -> float:
    """Seconds to decompress every part and json.loads every line: the least any reader of the log does."""
    started = time.perf_counter()
    for part in sorted(out.rglob("events_*")):
        with pa.CompressedInputStream(pa.OSFile(str(part)), "zstd") as stream:
            for line in stream.read().splitlines():
                json.loads(line)
    return time.perf_counter() - started


def main(quick: bool) -> None:
    missing = referee_missing()
    if missing:
        raise SystemExit(missing)
    queries = 1_000 if quick else 10_000
    begun = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="recluster-advise-bench-"))
    try:
        log("a real application's event log")
        events = real_log(work)
        out = work / "big-logs"
        total_events, size = write_big_log(events, queries, out)
        log(f"{queries:,} queries: {total_events:,} events, {size / 1e6:,.1f} MB zstd")
        floor = min(json_floor(out) for _ in range(2))
        started = time.perf_counter()
        scans, problems, _ = read_scans([str(out)], {})
        scan_seconds = time.perf_counter() - started
        assert not problems and len(scans) == queries, (problems[:3], len(scans))
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "recluster.cli", "advise", str(out), "--no-cost", "--json"],
            capture_output=True,
            text=True,
            check=False,
        )
        advise_seconds = time.perf_counter() - started
        if done.returncode:
            raise SystemExit(done.stderr[-2000:])
        advice = json.loads(done.stdout)
        assert advice["tables"][0]["queries"] == queries, advice["tables"][0]["queries"]
        rows = [
            ratio_row(f"recluster advise, {queries:,} queries (s)", advise_seconds, floor, "< 30 s"),
            ratio_row("reading the scans alone (s)", scan_seconds, floor, ""),
        ]
        publish(
            "advise",
            "Reading event logs: recluster advise against decompressing and parsing every line",
            quick,
            rows,
            {
                "queries": queries,
                "events": total_events,
                "zstd_bytes": size,
                "advise_seconds": advise_seconds,
                "scan_seconds": scan_seconds,
                "json_floor_seconds": floor,
                "best_key": advice["tables"][0]["candidates"][0]["key"],
                "seconds": time.perf_counter() - begun,
            },
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    quick_cli("python -m bench.advise_bench", main, "1,000 queries instead of 10,000")
