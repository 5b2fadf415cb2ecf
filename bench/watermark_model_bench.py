"""The time-like trigger's constants and other lateness shapes, in the model: `python -m bench.watermark_model_bench
[--quick]` (issue 20).

The model (tests/absorb_model.py) runs the real selection over files that hold real keys, cut as the merge kernel cuts
them (`file_segments`); the keys are tests/workload_data.py's timestamps, as integers. Part 1 sweeps the rent share
and the dilution exponent (recluster/core/selection/watermark.py) on the issue's two bounded-lateness workloads (5% of
the rows late by up to 4 appends; 40 appends of 10,000 rows and 400 of 2,000, files of 5 appends): the defaults were
chosen from it. Part 2 runs the defaults and the previous trigger (share 0.15, no dilution) on other lateness bounds
and late shares. Figures: depth averaged over every append, row write amplification (rows rewritten / appended),
average file fill (rows / files / target rows). Writes bench/results/watermark-model-<date>.json. No Delta, no Spark.
"""

from __future__ import annotations

import dataclasses
import time
from contextlib import ExitStack
from typing import Any
from unittest import mock

import numpy as np
import pyarrow as pa

from bench.common import log, publish, quick_cli
from bench.watermark_bench import GOALS
from docgen.figures import ratio_row
from recluster.core.selection import watermark
from tests.absorb_model import ModelTable, absorb_bounds
from tests.workload_data import late_rows_batch

PREVIOUS = {"RENT_SHARE": 0.15, "DILUTION": 0.0}
"""The trigger before this sweep (the mean depth alone, share 0.15): the baseline of the summary."""

SHARES = (0.15, 0.2, 0.22, 0.25, 0.3)
DILUTIONS = (0.0, 0.5, 1.0)
SHAPES = ((1, 0.05), (2, 0.05), (4, 0.05), (8, 0.05), (16, 0.05), (4, 0.01), (4, 0.2))
"""(lateness bound in appends, late share) of part 2."""
MAX_ROUNDS = 20
"""Rounds after one append before the model gives up (an absorb that never finishes is a defect)."""


def simulate(appends: int, lateness: int, share: float, constants: dict[str, float], seed: int = 1) -> dict[str, Any]:
    """One table: `appends` appends, one selection round after each (drained), under the given trigger constants."""
    rows, target = (10_000, 50_000) if appends <= 40 else (2_000, 10_000)
    bounds = dataclasses.replace(absorb_bounds(0.35), target_rows=target)
    rng = np.random.default_rng(seed)
    table = ModelTable(target)
    depths = []
    with ExitStack() as patches:
        for name, value in constants.items():
            patches.enter_context(mock.patch.object(watermark, name, value))
        for index in range(appends):
            batch = late_rows_batch(rng, index, rows, lateness, share)
            table.append(batch.column("ts").cast(pa.int64()).to_numpy())
            rounds = 0
            while table.round(bounds).tasks:
                rounds += 1
                if rounds > MAX_ROUNDS:
                    raise RuntimeError(f"append {index}: selection still planning after {MAX_ROUNDS} rounds")
            depths.append(table.average_depth)
    return {
        "time_averaged_average_depth": float(np.mean(depths)),
        "row_write_amplification": table.rewritten / table.appended,
        "file_fill": table.appended / len(table.blocks) / target,
        "final_files": len(table.blocks),
    }


def main(quick: bool = False) -> dict[str, Any]:
    started = time.perf_counter()
    sizes = (40, 100) if quick else (40, 400)
    sweep: list[dict[str, Any]] = []
    for share in SHARES:
        for dilution in DILUTIONS:
            constants = {"RENT_SHARE": share, "DILUTION": dilution}
            cases = {str(n): simulate(n, 4, 0.05, constants) for n in sizes}
            log(f"watermark model: share {share} dilution {dilution}: {cases}")
            sweep.append({**constants, "cases": cases})
    defaults = {"RENT_SHARE": watermark.RENT_SHARE, "DILUTION": watermark.DILUTION}
    shapes: list[dict[str, Any]] = []
    for lateness, share in SHAPES:
        for appends in sizes:
            ours, before = simulate(appends, lateness, share, defaults), simulate(appends, lateness, share, PREVIOUS)
            shape = {"lateness": lateness, "share": share, "appends": appends}
            shapes.append({**shape, "default": ours, "previous": before})
            log(f"watermark model: late <= {lateness} share {share} {appends} appends: {ours} / previous {before}")
    rows: list[list[Any]] = []
    for case in shapes:
        if (case["lateness"], case["share"]) != (4, 0.05):
            continue
        goals = GOALS.get(("late_4", case["appends"]))
        name = f"late_4_{case['appends']} (model)"
        for index, (label, field) in enumerate(
            (
                ("time-averaged depth", "time_averaged_average_depth"),
                ("row write amplification", "row_write_amplification"),
            )
        ):
            goal = f"<= {goals[index]}" if goals else "-"
            measure = f"{name}: {label}, default vs previous trigger"
            rows.append(ratio_row(measure, case["default"][field], case["previous"][field], goal))
    result = {
        "quick": quick,
        "defaults": defaults,
        "previous": PREVIOUS,
        "sweep": sweep,
        "shapes": shapes,
        "seconds": time.perf_counter() - started,
    }
    return publish("watermark-model", "time-like trigger in the model: default vs previous", quick, rows, result)


if __name__ == "__main__":
    quick_cli("python -m bench.watermark_model_bench", main, description=__doc__.splitlines()[0] if __doc__ else None)
