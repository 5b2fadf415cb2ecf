"""Streaming writers beside the job (issue 41 item 4): `python -m bench.streaming_writers_bench [--quick]`
(`--modes recluster` for one run, `--label old-code` to name the results file of a run on other code,
`--trigger-seconds 10` for the job's trigger).

A Delta Spark Structured Streaming writer (Delta Spark 4.4 on pyspark 4.2, the tests' referee environment,
`./dev referee`: tests/streaming_writers_spark.py) appends rate-source rows every second to a `CLUSTER BY (a, b)` table
(deletion vectors on) whose keys drift, while DELETE, UPDATE and MERGE run in turn, 2 seconds apart, on rows already
written, for 10 minutes (1 with --quick). Two runs on fresh tables: beside `recluster watch` on the table (its
liquid key on a Hilbert curve), and instead with Delta's own `OPTIMIZE` every 10 seconds. A statement that loses to
a concurrent commit is run again, up to 5 attempts. Counted per run: whether the writer's query stayed active, the
DML attempts that failed on a concurrent commit (Delta's ConcurrentModification exceptions) by the commit they lost
to, as Delta names it (a rewrite: ours or OPTIMIZE; or the writer's append: Delta OSS allows only Serializable
isolation, under which an append conflicts with any DML on an unpartitioned table), the rewrites committed and the
metaData/protocol actions committed after the table was created. At the end Delta Spark reads the table, and its
rows must equal those of a table nobody rewrites built from the same writer rows and the DML statements that
committed, replayed in order (each touches only rows written before it started, so its effect does not depend on
when it ran).
Writes bench/results/streaming-writers[-quick]-<date>.json.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.common import log, publish
from tests.referee import referee_missing
from tests.streaming_writers import (
    DML_EVERY,
    MODES,
    OPTIMIZE_EVERY,
    RATE,
    TARGET_ROWS,
    TRIGGER_SECONDS,
    WritersRun,
    run_writers,
)


def summary(ours: WritersRun | None, theirs: WritersRun | None) -> list[list[Any]]:
    """Rows of measures of both runs (None: a run left out with --modes)."""

    def row(measure: str, field: str, goal: str) -> list[Any]:
        mine, baseline = (None if run is None else int(getattr(run, field)) for run in (ours, theirs))
        return [measure, mine, baseline, mine / baseline if mine is not None and baseline else None, goal]

    return [
        row("writer query active to the end (1 = yes)", "writer_active", "1"),
        row("DML statements run", "dml", ""),
        row("DML statements committed (5 attempts each)", "dml_committed", ""),
        row("DML attempts lost to a rewrite", "dml_lost_to_rewrites", "<= OPTIMIZE's"),
        row("DML attempts lost to the streaming writer", "dml_lost_to_writer", ""),
        row("rewrite commits", "rewrites", ""),
        row("rewrites refused or failed", "rewrites_refused", ""),
        row("metaData/protocol actions after creation", "metadata_actions", "0"),
        row("rows exact, read by Delta Spark (1 = yes)", "rows_exact", "1"),
    ]


def main(
    quick: bool = False, modes: tuple[str, ...] = MODES, label: str = "", trigger_seconds: float = TRIGGER_SECONDS
) -> dict[str, Any]:
    """Both runs (or those `modes` name); `label` goes into the results file's name (e.g. `old-code`)."""
    missing = referee_missing()
    if missing:
        raise SystemExit(missing)
    seconds = 60.0 if quick else 600.0
    runs = {}
    for mode in modes:
        with tempfile.TemporaryDirectory(prefix=f"streaming-writers-{mode}-") as work:
            runs[mode] = run_writers(mode, seconds, Path(work), trigger_seconds=trigger_seconds)
        log(f"{mode}: {runs[mode]}")
    result = {
        "seconds": seconds,
        "rate_rows_per_second": RATE,
        "dml_every_seconds": DML_EVERY,
        "optimize_every_seconds": OPTIMIZE_EVERY,
        "target_rows": TARGET_ROWS,
        "watch_trigger_seconds": trigger_seconds,
        "runs": {mode: asdict(run) for mode, run in runs.items()},
    }
    title = f"Streaming writer and DML beside recluster watch vs Delta OPTIMIZE every {OPTIMIZE_EVERY:.0f} s"
    rows = summary(runs.get("recluster"), runs.get("optimize"))
    return publish("-".join(filter(None, ["streaming-writers", label])), title, quick, rows, result)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.streaming_writers_bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="1-minute runs instead of 10-minute ones")
    parser.add_argument("--modes", default=",".join(MODES), help="runs to make (default: recluster,optimize)")
    parser.add_argument("--label", default="", help="added to the results file's name")
    parser.add_argument("--trigger-seconds", type=float, default=TRIGGER_SECONDS, help="recluster watch's trigger")
    arguments = parser.parse_args()
    main(arguments.quick, tuple(arguments.modes.split(",")), arguments.label, arguments.trigger_seconds)
