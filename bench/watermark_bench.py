"""Time-like keys with default settings against z_order and compact: `python -m bench.watermark_bench [--quick]`
(issue 20).

Workloads (tests/workload_data.py), each appended identically to every strategy's own table: timestamps with 5%
of the rows late by up to 4 appends, 5% late by any amount, and random int64 keys; 40 appends of 10,000 rows and 400
of 2,000, files of 5 appends (target rows 50,000 / 10,000). Strategies: recluster with default settings (the
`absorb` policy: the watermark and rent-or-buy trigger on time-like tables, the ratio rule otherwise) after every
append, delta-rs `z_order` and `compact` every 5 appends. Figures: the average depth after every append, averaged
(time-averaged), row write amplification (rows rewritten / rows appended), files read per 1% key-range query over
the optimum, final files and their average fill (rows / files / target rows; must be >= 0.5). Rows are checked
unchanged. Writes bench/results/watermark-<date>.json. Runs in the process (no Spark).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import log, publish, quick_cli
from bench.compare.measurement import run_workload
from bench.compare.strategies import STRATEGIES
from bench.compare.workloads import Params
from docgen.figures import ratio_row
from recluster.settings import ClusteringSettings, Settings
from tests.workload_data import Workload, bounded_time_batch, time_batch, uniform_batch

WORKLOADS = {
    "late_4": Workload("late_4", "timestamps, 5% late by up to 4 appends", ("ts",), bounded_time_batch),
    "late_any": Workload("late_any", "timestamps, 5% late by any amount", ("ts",), time_batch),
    "random": Workload("random", "uniform random int64 keys", ("k",), uniform_batch),
}
STRATEGY_NAMES = ("absorb", "z_order", "compact")
GOALS = {  # (workload, appends): (time-averaged depth <=, row WA <=); random 400: WA <= 1/5 of z_order's
    ("late_4", 40): (1.4, 2.3),
    ("late_4", 400): (1.15, 2.0),
    ("late_any", 40): (1.9, 2.3),
    ("late_any", 400): (2.0, 5.5),
    ("random", 40): (2.0, 4.3),
}


MEASURES = (
    ("time-averaged depth", "time_averaged_average_depth"),
    ("row write amplification", "row_write_amplification"),
    ("average file fill (rows / files / target rows)", "file_fill"),
)


def case_params(appends: int, quick: bool) -> Params:
    if quick:
        return Params(appends // 4, 1_000, 5, 5_000)
    return Params(40, 10_000, 5, 50_000) if appends == 40 else Params(400, 2_000, 5, 10_000)


def summary_rows(cases: dict[str, Any]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for name, case in cases.items():
        ours, z_order = case["strategies"]["absorb"], case["strategies"]["z_order"]
        key = (case["workload"], case["appends"])
        depth_goal, wa_goal = GOALS.get(key, (None, None))
        if wa_goal is None:
            wa_goal = z_order["row_write_amplification"] / 5
        goals = (f"<= {depth_goal}" if depth_goal else "-", f"<= {wa_goal:.3g}", ">= 0.5")
        for (label, field), goal in zip(MEASURES, goals, strict=True):
            rows.append(ratio_row(f"{name}: {label}, default vs z_order every 5", ours[field], z_order[field], goal))
    return rows


def main(quick: bool = False) -> dict[str, Any]:
    strategies = [s for s in STRATEGIES if s.name in STRATEGY_NAMES]
    cases: dict[str, Any] = {}
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="recluster-watermark-bench-"))
    try:
        for number, (workload, appends) in enumerate(
            (w, a) for a in (40, 400) for w in ("late_4", "late_any", "random")
        ):
            params = case_params(appends, quick)
            settings = Settings(clustering=ClusteringSettings(target_rows=params.target_rows))
            name = f"{workload}_{appends}"
            log(f"watermark bench: {name} {params}")
            outcome = run_workload(WORKLOADS[workload], 300 + number, params, strategies, None, settings, work, quick)
            for result in outcome["strategies"].values():
                result["file_fill"] = result["rows"] / result["final_files"] / params.target_rows
                result.pop("series", None)
            cases[name] = {"workload": workload, "appends": appends, "params": params.__dict__, **outcome}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {"quick": quick, "cases": cases, "seconds": time.perf_counter() - started}
    title = "time-like keys: default settings against z_order every 5"
    return publish("watermark", title, quick, summary_rows(cases), result)


if __name__ == "__main__":
    quick_cli("python -m bench.watermark_bench", main, description=__doc__.splitlines()[0] if __doc__ else None)
