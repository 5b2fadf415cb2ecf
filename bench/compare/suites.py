"""The two suites: `main` runs every anchor strategy on workloads a-d (issue 5), `main_absorb` the absorb policy
against levels and z_order (issue 11). Each writes its results JSON to bench/results/ and prints its tables.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import SPARK_SETTINGS, log, machine, start_spark, write_results
from bench.compare.absorb_report import absorb_goals, render_absorb
from bench.compare.measurement import run_workload
from bench.compare.report import competitor_wins, goals, recluster_wins, references, render, summary_rows
from bench.compare.strategies import ANCHOR_STRATEGIES, STRATEGIES, Context, recluster_round, spark_sort
from bench.compare.workloads import ABSORB_SUITE, ABSORB_SUITE_QUICK, ALL_ABSORB, FULL, QUICK, SEED, WORKLOADS
from docgen.figures import summary_records
from recluster.settings import PRESET_BETAS, ClusteringSettings, Settings
from tests.workload_data import append, uniform_batch


def warm_up(spark: Any, work: Path, settings: Settings) -> float:
    """A tiny Spark rewrite and recluster FINAL, so the first measured strategy does not pay for a cold JVM."""
    started = time.perf_counter()
    rng = np.random.default_rng(1)
    path = work / "warmup"
    ctx = Context(spark=spark, settings=settings, key=("k",))
    for index in range(3):
        append(path, uniform_batch(rng, index, 5_000))
    ctx.bytes_per_row = 40.0
    spark_sort(ctx, path)
    for index in range(3):
        append(path, uniform_batch(rng, index, 5_000))
    recluster_round(True)(ctx, path)
    shutil.rmtree(path, ignore_errors=True)
    return time.perf_counter() - started


def source_state() -> dict[str, Any]:
    """The commit the engine ran from and any uncommitted changes under recluster/ (results depend on them)."""
    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False).stdout
        except OSError:
            return ""

    diff = git("diff", "HEAD", "--", "recluster")
    return {
        "commit": git("rev-parse", "HEAD").strip(),
        "uncommitted_engine_files": [
            line.strip() for line in git("status", "--porcelain", "--", "recluster").splitlines()
        ],
        "engine_diff_sha256": hashlib.sha256(diff.encode()).hexdigest() if diff else None,
    }


def result_header(benchmark: str, quick: bool, source: dict[str, Any]) -> dict[str, Any]:
    """What every result JSON starts with: which benchmark, mode, date, machine and engine source."""
    return {
        "benchmark": benchmark,
        "quick": quick,
        "date": dt.date.today().isoformat(),
        "machine": machine(),
        "source": source,
    }


def main(quick: bool = False, only: Sequence[str] = (), strategies: Sequence[str] = ()) -> dict[str, Any]:
    params = QUICK if quick else FULL
    settings = Settings(clustering=ClusteringSettings(target_rows=params.target_rows))
    chosen = [w for w in WORKLOADS if not only or any(w.name.startswith(o) for o in only)]
    runs = [s for s in STRATEGIES if s.name in (strategies or ANCHOR_STRATEGIES)]
    source = source_state()
    spark = start_spark()
    work = Path(tempfile.mkdtemp(prefix="recluster-compare-bench-"))
    started = time.perf_counter()
    try:
        warm = warm_up(spark, work, settings)
        log(f"compare: warm-up {warm:.1f} s; {params}")
        workloads = {}
        for number, workload in enumerate(WORKLOADS):
            if workload not in chosen:
                continue
            mark = time.perf_counter()
            workloads[workload.name] = run_workload(
                workload, SEED + 10 * number, params, runs, spark, settings, work, exact_check=quick
            )
            workloads[workload.name]["seconds"] = time.perf_counter() - mark
    finally:
        shutil.rmtree(work, ignore_errors=True)
    refs = references()
    result: dict[str, Any] = {
        **result_header("compare", quick, source),
        "spark": {"master": SPARK_SETTINGS.master, "shuffle_partitions": SPARK_SETTINGS.shuffle_partitions},
        "parameters": {
            "batches": params.batches,
            "rows_per_batch": params.rows,
            "maintenance_every_k": params.every,
            "target_rows": params.target_rows,
            "queries": params.queries,
            "query_fraction": params.query_fraction,
            "seed": SEED,
            "settings_clustering": settings.clustering.model_dump(),
        },
        "strategies": {s.name: s.description for s in runs},
        "warmup_seconds": warm,
        "workloads": workloads,
        "references": refs,
    }
    result["goals"] = goals(workloads, refs)
    result["competitor_wins"] = competitor_wins(workloads)
    result["recluster_wins"] = recluster_wins(workloads)
    result["seconds"] = time.perf_counter() - started
    result["summary"] = summary_records(summary_rows(result))
    path = write_results("compare-quick" if quick else "compare", result)

    render(result, path)
    return result


def main_absorb(quick: bool = False, only: Sequence[str] = ()) -> dict[str, Any]:
    """The issue-11 suite: every case's strategies on identical appends, goals evaluated."""
    cases_run = [c for c in (ABSORB_SUITE_QUICK if quick else ABSORB_SUITE) if not only or c.name in only]
    source = source_state()
    spark = start_spark()
    work = Path(tempfile.mkdtemp(prefix="recluster-absorb-bench-"))
    started = time.perf_counter()
    by_name = {s.name: s for s in STRATEGIES}
    result: dict[str, Any] = {
        **result_header("absorb", quick, source),
        "default_beta": Settings().selection.resolved_beta,
        "presets": dict(PRESET_BETAS),
        "strategies": {s.name: s.description for s in STRATEGIES if s.name in ALL_ABSORB},
        "cases": {},
    }
    cases: dict[str, Any] = result["cases"]
    name = "absorb-quick" if quick else "absorb"
    try:
        warm_up(spark, work, Settings())
        for number, case in enumerate(cases_run):
            settings = Settings(clustering=ClusteringSettings(target_rows=case.params.target_rows))
            log(f"absorb suite: {case.name} {case.params}")
            for strategy in case.strategies:  # one at a time, the results written after each
                mark = time.perf_counter()
                outcome = run_workload(
                    case.workload,
                    SEED + 100 + number,
                    case.params,
                    [by_name[strategy]],
                    spark,
                    settings,
                    work,
                    exact_check=quick,
                )
                seconds = cases.get(case.name, {}).get("seconds", 0.0) + time.perf_counter() - mark
                strategies = {**cases.get(case.name, {}).get("strategies", {}), **outcome["strategies"]}
                cases[case.name] = {
                    **outcome,
                    "strategies": strategies,
                    "parameters": {
                        "batches": case.params.batches,
                        "rows_per_batch": case.params.rows,
                        "maintenance_every_k": case.params.every,
                        "target_rows": case.params.target_rows,
                    },
                    "seconds": seconds,
                }
                result["goals"] = absorb_goals(cases)
                result["seconds"] = time.perf_counter() - started
                write_results(name, result)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    path = write_results(name, result)
    render_absorb(result, path)
    return result
