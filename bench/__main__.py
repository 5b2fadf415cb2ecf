"""Run every benchmark: `python -m bench [--quick]` from the project root.

In sequence: the metrics benchmark (bench/metrics_bench.py, when present), merge throughput and write
amplification (bench/merge_bench.py), the streaming job (bench/stream_bench.py), peak driver memory of planning on
a 100,000-file table (bench/memory_bench.py), the cost of our own log commits against delta-rs's
(bench/commit_bench.py), FINAL against z_order and raw Spark (bench/output_bench.py), fixed costs of small work
(bench/fixed_cost_bench.py), multi-column keys on curves (bench/curve_bench.py), the
status pages (bench/pages_bench.py), info and planning on 1,000,000-file tables (bench/big_table_bench.py), idle and
many watched tables in one job (bench/idle_bench.py, bench/job_scale_bench.py), time-like keys
(bench/watermark_bench.py) and their trigger in the model (bench/watermark_model_bench.py), FINAL on a standalone
cluster (bench/cluster_bench.py), then every strategy against its anchors on the same workloads (bench/compare/,
which also cites the results of the three before it).
Each prints its own markdown table and writes its JSON to bench/results/; a combined table follows at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import importlib.util
import inspect
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import log, markdown_table, write_results
from docgen.figures import RESULTS

HEADERS = ("benchmark", "measure", "recluster", "baseline", "ratio", "goal")


def run_metrics(quick: bool) -> dict[str, Any] | None:
    """bench.metrics_bench: `main(quick=...)` if it takes one, else as a module in a subprocess."""
    if importlib.util.find_spec("bench.metrics_bench") is None:
        log("metrics: bench/metrics_bench.py not present, skipped")
        return None
    module = importlib.import_module("bench.metrics_bench")
    entry = getattr(module, "main", None)
    if entry is not None and "quick" in inspect.signature(entry).parameters:
        result = entry(quick=quick)
        return result if isinstance(result, dict) else None
    command = [sys.executable, "-m", "bench.metrics_bench"]
    source = Path(module.__file__ or "").read_text(encoding="utf-8") if module.__file__ else ""
    if quick and '"--quick"' in source:
        command.append("--quick")
    print("\n### metrics\n", flush=True)
    completed = subprocess.run(command, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {completed.returncode}")
    path = RESULTS / f"metrics-{dt.date.today().isoformat()}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def metrics_rows(result: dict[str, Any] | None) -> list[list[Any]]:
    """Rows of the metrics benchmark's own result format (measures with seconds, goal and ratio)."""
    if not result:
        return []
    rows = []
    for measure in result.get("measures", []):
        goal = measure.get("goal_seconds")
        if goal is None and "ratio" not in measure:
            continue
        goal_text = "" if goal is None else f"< {goal:g} s ({'met' if measure.get('met') else 'MISSED'})"
        ratio = measure.get("ratio")
        baseline = measure["seconds"] / ratio if ratio else ""  # the metrics bench reports ratio = seconds / baseline
        rows.append(["metrics", f"{measure['measure']}, s", measure["seconds"], baseline, ratio or "", goal_text])
    return rows


def summary_rows(name: str, result: dict[str, Any]) -> list[list[Any]]:
    return [[name, *row.values()] for row in result.get("summary", [])]


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description="run every recluster benchmark")
    parser.add_argument("--quick", action="store_true", help="small sizes, a few minutes in all")
    quick = parser.parse_args().quick
    started = time.perf_counter()
    timings: dict[str, float] = {}
    rows: list[list[Any]] = []

    mark = time.perf_counter()
    rows += metrics_rows(run_metrics(quick))
    timings["metrics"] = time.perf_counter() - mark

    from bench import (
        big_table_bench,
        cluster_bench,
        commit_bench,
        compare,
        curve_bench,
        fixed_cost_bench,
        idle_bench,
        job_scale_bench,
        memory_bench,
        merge_bench,
        output_bench,
        pages_bench,
        stream_bench,
        watermark_bench,
        watermark_model_bench,
    )

    for name, module in (
        ("commit", commit_bench),
        ("output", output_bench),
        ("fixed-cost", fixed_cost_bench),
        ("curve", curve_bench),
        ("pages", pages_bench),
        ("merge", merge_bench),
        ("stream", stream_bench),
        ("memory", memory_bench),
        ("big-table", big_table_bench),
        ("idle", idle_bench),
        ("job-scale", job_scale_bench),
        ("watermark", watermark_bench),
        ("watermark-model", watermark_model_bench),
        ("cluster", cluster_bench),
        ("compare", compare),
    ):
        mark = time.perf_counter()
        rows += summary_rows(name, module.main(quick=quick))
        timings[name] = time.perf_counter() - mark

    total = time.perf_counter() - started
    print("\n## all benchmarks" + (" (--quick)" if quick else "") + "\n")
    print(markdown_table(HEADERS, rows))
    print(
        "\nseconds: " + ", ".join(f"{name} {seconds:.0f}" for name, seconds in timings.items()) + f", total {total:.0f}"
    )
    path = write_results(
        "all-quick" if quick else "all",
        {
            "quick": quick,
            "date": dt.date.today().isoformat(),
            "seconds": {**timings, "total": total},
            "summary": [dict(zip(HEADERS, row, strict=True)) for row in rows],
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
