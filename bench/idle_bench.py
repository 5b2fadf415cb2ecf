"""Per-trigger cost of idle watched tables in the streaming job: `python -m bench.idle_bench [--quick]` (issue 23).

The job's scheduling pass (`JobReports.run_scheduled`, what every micro-batch and tick runs) over N tracked
tables that receive no commits, N = 1, 100, 1,000, 10,000 (quick: up to 1,000). The tables are copies of one small
real table's state under distinct URIs (a pass does no I/O per table: properties, history and file stats are in
memory). Measured in the same process, median of 20 passes each: the pass when every table is evaluated (what every
pass did before, and what the first pass still does) against the idle pass (tables skipped until a commit or their
next interval trigger). Goal: < 0.1 s per pass at 10,000 idle tables. No Spark. Writes bench/results/idle-<date>.json.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from deltalake import write_deltalake

from bench.common import log, publish, quick_cli
from docgen.figures import ratio_row
from recluster.delta.log_writer import set_table_properties
from recluster.engine.handler import ReclusterHandler
from recluster.settings import CLUSTER_BY_PROPERTY, Settings, TableSettings
from recluster.settings_job import StreamSettings

PASSES = 20


def pass_seconds(handler: ReclusterHandler, evaluate_all: bool) -> float:
    """Median seconds of one scheduling pass with no new commits."""
    times = []
    for _ in range(PASSES):
        if evaluate_all:
            for tracked in handler.tracked.values():
                tracked.quiet_until = 0.0
        started = time.perf_counter()
        handler.reports.run_scheduled({})
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(work: Path, count: int) -> dict[str, Any]:
    table = work / "events"
    if not table.exists():
        rng = np.random.default_rng(1)
        write_deltalake(str(table), pa.table({"k": rng.integers(0, 1 << 40, 1_000)}), mode="append")
        set_table_properties(table, {CLUSTER_BY_PROPERTY: "k"})
    settings = Settings(
        stream=StreamSettings(checkpoint_location=str(work / f"checkpoint-{count}")),
        tables=[TableSettings(uri=str(table))],
    )
    handler = ReclusterHandler(settings, settings.tables, spark=None)
    base = handler.tables.track(str(table), None)
    handler.tables.tracked = {f"{table}#{i}": dataclasses.replace(base, uri=f"{table}#{i}") for i in range(count)}
    handler.reports.run_scheduled({})  # the first pass: every table evaluated once
    every, idle = pass_seconds(handler, evaluate_all=True), pass_seconds(handler, evaluate_all=False)
    log(f"{count:,} idle tables: every table evaluated {every * 1000:.2f} ms, idle pass {idle * 1000:.3f} ms")
    return {"tables": count, "evaluate_all_seconds": every, "idle_pass_seconds": idle}


def main(quick: bool = False) -> dict[str, Any]:
    counts = (1, 100, 1_000) if quick else (1, 100, 1_000, 10_000)
    with tempfile.TemporaryDirectory(prefix="recluster-idle-bench-") as scratch:
        runs = [measure(Path(scratch), count) for count in counts]
    largest = runs[-1]
    rows = [
        ratio_row(
            f"scheduling pass over {r['tables']:,} idle tables, ms: idle pass vs every table evaluated",
            r["idle_pass_seconds"] * 1000,
            r["evaluate_all_seconds"] * 1000,
            "< 100 ms" if r is largest else "-",
        )
        for r in runs
    ]
    result = {"quick": quick, "passes": PASSES, "runs": runs}
    return publish("idle", "idle watched tables: cost of one scheduling pass", quick, rows, result)


if __name__ == "__main__":
    quick_cli("python -m bench.idle_bench", main, description=__doc__.splitlines()[0] if __doc__ else None)
