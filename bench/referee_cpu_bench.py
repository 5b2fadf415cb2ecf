"""The Delta Spark referee's CPU (tests/referee): the suite's feature tables (tests/delta_spark_tables.py) written by
a fresh referee with the tests' settings, once cold and once warm, with expression code generation off (the tests'
`spark.sql.codegen.factoryMode=NO_CODEGEN`) against Spark's default (generate, fall back to interpreting), the two
alternating. CPU seconds of the referee's process tree, which other load on the machine changes less than wall time.
Run from the project root: `python -m bench.referee_cpu_bench`. Why the suite's referee runs so
(docs/getting-started.md#test-time). Writes bench/results/referee-cpu-<date>.json.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import cpu_seconds, log, process_stat, publish, quick_cli
from tests.delta_spark_tables import RECIPES, write_table
from tests.helpers import descendants
from tests.referee import Referee, referee_missing

CODE_GENERATION = {"spark.sql.codegen.factoryMode": "FALLBACK"}
"""Spark's default, over the tests' NO_CODEGEN (tests/referee/server.py)."""


def tree_cpu_seconds(pid: int) -> float:
    """User plus system CPU of `pid` and every process below it."""
    stats = (process_stat(each) for each in (pid, *descendants(pid)))
    return sum(cpu_seconds(fields) for fields in stats if fields is not None)


def write_every_table(work: Path, conf: dict[str, str]) -> dict[str, float]:
    """A fresh referee writes every recipe's table twice: the CPU and wall seconds of each pass."""
    referee = Referee(work, conf=conf)
    try:
        pid = referee._process.pid
        measured: dict[str, float] = {"start_cpu": tree_cpu_seconds(pid)}
        for attempt in ("cold", "warm"):
            cpu, wall = tree_cpu_seconds(pid), time.perf_counter()
            for name, recipe in RECIPES.items():
                write_table(referee, work / f"{attempt}-{name}", recipe)
            measured[f"{attempt}_cpu"] = tree_cpu_seconds(pid) - cpu
            measured[f"{attempt}_wall"] = time.perf_counter() - wall
        return measured
    finally:
        referee.stop()


def main(quick: bool = False) -> dict[str, Any]:
    missing = referee_missing()
    if missing:
        raise SystemExit(missing)
    repeats = 1 if quick else 3
    runs: dict[str, list[dict[str, float]]] = {"interpreted": [], "generated": []}
    for attempt in range(repeats):
        for mode, conf in (("generated", CODE_GENERATION), ("interpreted", {})):
            with tempfile.TemporaryDirectory(prefix="recluster-referee-cpu-") as scratch:
                runs[mode].append(write_every_table(Path(scratch), conf))
            log(f"attempt {attempt}, code generation {mode}: {runs[mode][-1]}")

    def median(mode: str, field: str) -> float:
        values = sorted(run[field] for run in runs[mode])
        return values[len(values) // 2]

    rows = [
        [
            f"referee CPU writing the {len(RECIPES)} feature tables, {attempt}, median s (NO_CODEGEN vs generated)",
            median("interpreted", f"{attempt}_cpu"),
            median("generated", f"{attempt}_cpu"),
            median("interpreted", f"{attempt}_cpu") / median("generated", f"{attempt}_cpu"),
            "",
        ]
        for attempt in ("cold", "warm")
    ]
    result = {"quick": quick, "recipes": list(RECIPES), "runs": runs, "load": os.getloadavg()}
    return publish("referee-cpu", "the referee's CPU with and without expression code generation", quick, rows, result)


if __name__ == "__main__":
    quick_cli("python -m bench.referee_cpu_bench", main, description=__doc__.splitlines()[0] if __doc__ else None)
