"""The plan of bench.upkeep_bench: its workloads, strategies and cases (appends, sizes, which strategies run where
and why the others do not). docgen.upkeep_report reads it too, to say which cases a stopped run did not reach."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from tests.workload_data import bounded_time_batch, time_batch, two_column_batch, uniform_batch

EVERY = 5


@dataclass(frozen=True)
class UpkeepWorkload:
    name: str
    description: str
    key: tuple[str, ...]
    make: Callable[[np.random.Generator, int, int], pa.Table]


WORKLOADS = {
    w.name: w
    for w in (
        UpkeepWorkload("uniform", "uniform random int64 keys k", ("k",), uniform_batch),
        UpkeepWorkload("late_by_4", "timestamps ts, 5% late by up to 4 hours", ("ts",), bounded_time_batch),
        UpkeepWorkload("late_by_any", "timestamps ts, 5% late by any amount", ("ts",), time_batch),
        UpkeepWorkload("random_ab", "random (a, b): int in [0, 1000), 10-letter string", ("a", "b"), two_column_batch),
    )
}


@dataclass(frozen=True)
class Strategy:
    name: str
    description: str
    every: int
    """Maintenance after every `every` appends."""
    appends_by: str
    """"delta-rs" or "spark"."""
    statement: str | None
    """Delta's maintenance statement ({table}, {key}); None: a recluster round."""
    liquid: bool = False


STRATEGIES = {
    s.name: s
    for s in (
        Strategy("recluster", "recluster's default policy (absorb), a round after every append", 1, "delta-rs", None),
        Strategy(
            "recluster_spark_appends", "the same on a table Delta Spark appends to", 1, "spark", None, liquid=False
        ),
        Strategy(
            "liquid_every_1", "liquid CLUSTER BY, OPTIMIZE after every append", 1, "spark", "OPTIMIZE {table}", True
        ),
        Strategy(
            "liquid_every_5", "liquid CLUSTER BY, OPTIMIZE every 5 appends", EVERY, "spark", "OPTIMIZE {table}", True
        ),
        Strategy(
            "zorder_every_5",
            "OPTIMIZE ZORDER BY (key) every 5 appends",
            EVERY,
            "delta-rs",
            "OPTIMIZE {table} ZORDER BY ({key})",
        ),
    )
}
ALL = ("recluster", "recluster_spark_appends", "liquid_every_1", "liquid_every_5", "zorder_every_5")
LONG = ("recluster", "liquid_every_5", "zorder_every_5")
LONG_SKIPPED = (
    "liquid_every_1: 400 OPTIMIZE statements a workload at about 4 s each (plus 400 Delta Spark appends) is about 35 "
    "minutes a workload on the two shared cores; the 40-append cases measure it"
)
SHORT = ("recluster", "liquid_every_1", "liquid_every_5", "zorder_every_5")
SPARK_APPENDS_ONCE = (
    "recluster_spark_appends: run on the uniform workload only (whether recluster keeps a table Delta Spark appends to "
    "is the same question on every workload, and a Delta Spark append took about 4 s on the loaded machine)"
)
LONG_SKIPPED_QUICK = "recluster_spark_appends and liquid_every_1: quick mode keeps the long cases short"


@dataclass(frozen=True)
class Case:
    name: str
    workload: UpkeepWorkload
    appends: int
    rows: int
    files: int
    """The table's rows / files = the target file's rows (bytes likewise)."""
    strategies: tuple[str, ...]
    skipped: str = ""


def cases(quick: bool) -> list[Case]:
    if quick:
        short = [Case(f"{w}_40", WORKLOADS[w], 10, 2_000, 5, ALL) for w in WORKLOADS]
        long = [Case(f"{w}_400", WORKLOADS[w], 20, 500, 5, LONG, LONG_SKIPPED_QUICK) for w in ("uniform", "late_by_4")]
        return short + long
    short = [
        Case(
            f"{w}_40",
            WORKLOADS[w],
            40,
            25_000,
            20,
            ALL if w == "uniform" else SHORT,
            "" if w == "uniform" else SPARK_APPENDS_ONCE,
        )
        for w in WORKLOADS
    ]
    order = ("uniform", "late_by_4", "random_ab", "late_by_any")
    return short + [Case(f"{w}_400", WORKLOADS[w], 400, 2_500, 20, LONG, LONG_SKIPPED) for w in order]
