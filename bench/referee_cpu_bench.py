"""The Delta Spark referee's CPU (tests/referee): the suite's feature tables (tests/delta_spark_tables.py) written by
a fresh referee with the tests' settings, once cold and once warm, against three variants, the four alternating:
the tests' settings before one task thread, simple plan descriptions and no broadcast joins (tests/referee/server.py
TEST_MASTER), Spark's default expression code generation (generate, fall back to interpreting) instead of the tests'
`spark.sql.codegen.factoryMode=NO_CODEGEN`, and without the referee's class archive (tests/referee). CPU seconds of
the referee's process tree, which other load on the machine changes less than wall time. Run from the project root:
`python -m bench.referee_cpu_bench`. Why the suite's referee runs so (docs/getting-started.md#test-time). Writes
bench/results/referee-cpu-<date>.json.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from statistics import median_high
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


BEFORE_ONE_THREAD = {
    "spark.master": "local[2]",
    "spark.sql.ui.explainMode": "formatted",
    "spark.sql.autoBroadcastJoinThreshold": "10MB",
}
"""The tests' referee until 2026-11-29: two task threads, Spark's formatted plan descriptions and broadcast joins."""

MODES: dict[str, tuple[dict[str, str], str | None]] = {
    "tests": ({}, None),
    "before": (BEFORE_ONE_THREAD, None),
    "generated": (CODE_GENERATION, None),
    "no-archive": ({}, ""),
}
"""Each variant's extra Spark settings and JVM options (None: the referee's class archive, as in the tests)."""


def write_every_table(work: Path, conf: dict[str, str], java_options: str | None) -> dict[str, float]:
    """A fresh referee writes every recipe's table twice: its CPU to start, and the CPU and wall seconds of each
    pass."""
    referee = Referee(work, conf=conf, java_options=java_options)
    try:
        pid = referee.pid
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
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    for attempt in range(repeats):
        for mode, (conf, java_options) in MODES.items():
            with tempfile.TemporaryDirectory(prefix="recluster-referee-cpu-") as scratch:
                runs[mode].append(write_every_table(Path(scratch), conf, java_options))
            log(f"attempt {attempt}, {mode}: {runs[mode][-1]}")

    def median(mode: str, field: str) -> float:
        return median_high(run[field] for run in runs[mode])

    def row(what: str, field: str, baseline: str, versus: str) -> list[Any]:
        """The tests' settings against the `baseline` mode on one measured field."""
        ours, theirs = median("tests", field), median(baseline, field)
        return [f"referee CPU {what}, median s ({versus})", ours, theirs, ours / theirs, ""]

    tables = f"writing the {len(RECIPES)} feature tables"
    rows = [
        row(f"{tables}, {attempt}", f"{attempt}_cpu", baseline, versus)
        for baseline, versus in (("before", "one thread vs before"), ("generated", "NO_CODEGEN vs generated"))
        for attempt in ("cold", "warm")
    ]
    rows += [
        row(what, field, "no-archive", "class archive vs none")
        for what, field in (("to start", "start_cpu"), ("writing the feature tables cold", "cold_cpu"))
    ]
    result = {"quick": quick, "recipes": list(RECIPES), "runs": runs, "load": os.getloadavg()}
    what = (
        "the referee's CPU with the tests' settings against those before one task thread, against expression code "
        "generation and against no class archive"
    )
    return publish("referee-cpu", what, quick, rows, result)


if __name__ == "__main__":
    quick_cli("python -m bench.referee_cpu_bench", main, description=__doc__.splitlines()[0] if __doc__ else None)
