"""`recluster estimate` against a real run of the same workload: `python -m bench.estimate_bench [--quick]` (issue 35).

Each workload (tests/workload_data.py: uniform int64 keys, timestamps 5% late by up to 4 appends, 5% late by
any amount, a random two-column (a, b) key) is appended 40 and 400 times (quick: 40) to a table nobody reclusters:
the history `estimate` learns from. The real run appends the same batches to a second table with a recluster round
(default settings: the `absorb` policy, in the process) after every append, measuring the bytes written, the
average depth after every append (time-averaged) and, at the end, the files a point predicate on the first key
column reads. The initial cost is checked by running a FINAL on the history table (the fastest of 3, the table
restored between). Goals: bytes rewritten within ±20%, time-averaged depth within ±10%, files read per predicate
within ±15%, initial FINAL time within ±30%; and
`estimate` under 10 s on a table of 10,000 commits (a log written directly: commits adding files of 1,000 rows of
hourly timestamps). Writes bench/results/estimate[-quick]-<date>.json.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import LogBackup, log, publish, quick_cli
from docgen.figures import ratio_row
from recluster.engine.estimate import estimate_table
from recluster.engine.rounds import recluster_table, snapshot_loader
from recluster.settings import ClusteringSettings, Settings
from tests.estimate_runs import no_spark, real_run, write_long_log
from tests.workload_data import Workload, append, bounded_time_batch, time_batch, two_column_batch, uniform_batch

WORKLOADS = (
    Workload("uniform", "uniform random int64 keys", ("k",), uniform_batch),
    Workload("late_4", "timestamps, 5% late by up to 4 appends", ("ts",), bounded_time_batch),
    Workload("late_any", "timestamps, 5% late by any amount", ("ts",), time_batch),
    Workload("random_ab", "random two-column key (int in [0,1000), string)", ("a", "b"), two_column_batch),
)
SIZES = {40: (2_000, 10_000), 400: (500, 2_500)}
"""Appends: (rows per append, target rows): files of 5 appends."""
GOALS = {"bytes_rewritten": 0.20, "time_averaged_depth": 0.10, "files_read": 0.15, "initial_seconds": 0.30}
FINAL_REPEATS = 3
SPEED_COMMITS = 10_000
SPEED_GOAL_SECONDS = 10.0


def real_final(path: Path, settings: Settings) -> dict[str, Any]:
    """The FINAL `estimate` prices, run FINAL_REPEATS times on the same table (restored between), the fastest
    counting: one run of a fraction of a second is mostly this shared machine's noise."""
    backup = LogBackup(path)
    times = []
    for attempt in range(FINAL_REPEATS):
        if attempt:
            backup.restore()
        started = time.perf_counter()
        result = recluster_table(
            str(path), snapshot_loader(str(path), settings, None), settings=settings, spark_factory=no_spark, final=True
        )
        times.append(time.perf_counter() - started)
    return {
        "seconds": min(times),
        "all_seconds": times,
        "bytes_read": result.totals.bytes_read,
        "files_removed": result.totals.files_removed,
        "rounds": result.rounds,
    }


def run_case(workload: Workload, appends: int, seed: int, work: Path) -> dict[str, Any]:
    rows, target = SIZES[appends]
    settings = Settings(clustering=ClusteringSettings(target_rows=target))
    rng = np.random.default_rng(seed)
    batches = [workload.make(rng, index, rows) for index in range(appends)]
    history, real = work / f"{workload.name}-{appends}-history", work / f"{workload.name}-{appends}-real"
    for batch in batches:
        append(history, batch, workload.key)
    estimate = estimate_table(str(history), settings=settings)
    ours = estimate.configured
    measured = real_run(real, batches, workload.key, settings)
    final = real_final(history, settings)
    first = workload.key[0]
    return {
        "workload": workload.name,
        "description": workload.description,
        "appends": appends,
        "rows_per_append": rows,
        "target_rows": target,
        "estimate_seconds": estimate.seconds,
        "shape": estimate.shape.describe(),
        "estimate": {
            "bytes_rewritten": ours.bytes_rewritten,
            "row_write_amplification": ours.write_amplification,
            "merges": ours.merges,
            "written_per_read": None if estimate.calibration is None else estimate.calibration.written_per_read,
            "time_averaged_depth": ours.time_averaged_depth,
            "files_read": ours.files_read_per_predicate[first],
            "initial_seconds": estimate.initial.seconds,
            "initial_bytes": estimate.initial.bytes,
            "initial_rounds": estimate.initial.rounds,
            "merge_mb_per_second": estimate.merge_mb_per_second,
        },
        "real": {**measured, "files_read": measured["files_read"][first], "initial": final},
        "estimate_json": estimate.to_dict(),
    }


def speed_check(work: Path) -> dict[str, Any]:
    path = work / "long"
    write_long_log(path, SPEED_COMMITS)
    estimate = estimate_table(str(path), settings=Settings(), merge_mb_per_second=100.0)
    return {"commits": SPEED_COMMITS, "seconds": estimate.seconds, "notes": list(estimate.notes)}


MEASURES: tuple[tuple[str, str, Callable[[dict[str, Any]], float]], ...] = (
    ("bytes rewritten", "bytes_rewritten", lambda real: float(real["bytes_rewritten"])),
    ("time-averaged depth", "time_averaged_depth", lambda real: float(real["time_averaged_depth"])),
    ("files read per predicate", "files_read", lambda real: float(real["files_read"])),
    ("initial FINAL seconds", "initial_seconds", lambda real: float(real["initial"]["seconds"])),
)


def summary_rows(cases: dict[str, Any], speed: dict[str, Any]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for name, case in cases.items():
        for label, field, real in MEASURES:
            ours, theirs = float(case["estimate"][field]), real(case["real"])
            rows.append(ratio_row(f"{name}: {label}, estimate vs real", ours, theirs, f"±{GOALS[field]:.0%}"))
    rows.append(
        ratio_row(
            f"estimate seconds on {speed['commits']:,} commits, vs the goal",
            speed["seconds"],
            SPEED_GOAL_SECONDS,
            f"<= {SPEED_GOAL_SECONDS:g} s",
        )
    )
    return rows


def main(quick: bool = False) -> dict[str, Any]:
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="recluster-estimate-bench-"))
    cases: dict[str, Any] = {}
    try:
        for number, (appends, workload) in enumerate(
            (a, w) for a in ((40,) if quick else (40, 400)) for w in WORKLOADS
        ):
            name = f"{workload.name}_{appends}"
            log(f"estimate bench: {name}")
            cases[name] = run_case(workload, appends, 3500 + number, work)
            log(f"estimate bench: {name}: {cases[name]['estimate']} vs {cases[name]['real']}")
        speed = speed_check(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {"quick": quick, "cases": cases, "speed": speed, "goals": GOALS, "seconds": time.perf_counter() - started}
    return publish("estimate", "recluster estimate against a real run", quick, summary_rows(cases, speed), result)


if __name__ == "__main__":
    quick_cli(
        "python -m bench.estimate_bench",
        main,
        quick_help="40 appends only",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
