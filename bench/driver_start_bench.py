"""The tests' Spark driver options (tests/driver_jvm.py): a `recluster watch` subprocess's time to its first round,
with the options (a class archive of the driver and the quick compiler) against without, alternating, on a table of
three small files. Run from the project root: `python -m bench.driver_start_bench`. What the suite's many job starts
cost (docs/getting-started.md#test-time); the job in production runs without them. Writes
bench/results/driver-start-<date>.json.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import log, publish, quick_cli
from tests.driver_jvm import start_drivers_fast
from tests.helpers import append_random, kill_tree, start_watch

FIRST_ROUND = "recluster table="
"""The job's log line of a table's round: the first one ends the measurement."""


def first_round_seconds(table: Path, work: Path, options: str) -> float:
    """Seconds from starting `recluster watch` on `table` to its first round's log line."""
    checkpoint, output = Path(tempfile.mkdtemp(dir=work)) / "checkpoint", Path(tempfile.mkstemp(dir=work)[1])
    started = time.perf_counter()
    process = start_watch([table], checkpoint, output, env={"SPARK_SUBMIT_OPTS": options})
    try:
        while FIRST_ROUND not in output.read_text(errors="replace"):
            if process.poll() is not None or time.perf_counter() - started > 300:
                raise RuntimeError(f"recluster watch reached no round:\n{output.read_text()[-3000:]}")
            time.sleep(0.05)
        return time.perf_counter() - started
    finally:
        kill_tree(process)


def main(quick: bool = False) -> dict[str, Any]:
    options = start_drivers_fast()
    if not options:
        raise SystemExit("no java on PATH")
    repeats = 2 if quick else 5
    with tempfile.TemporaryDirectory(prefix="recluster-driver-start-") as scratch:
        work = Path(scratch)
        rng = np.random.default_rng(7)
        for batch in range(3):
            append_random(work / "table", rng, batch, rows=3_000, high=10**6)
        fast: list[float] = []
        plain: list[float] = []
        for attempt in range(repeats):
            for times, given in ((plain, ""), (fast, options)):
                times.append(first_round_seconds(work / "table", work, given))
                log(f"attempt {attempt}: {'with' if given else 'without'} the options {times[-1]:.1f} s")
    rows = [
        [
            "recluster watch, start to first round, best of the runs, s (with the tests' driver options vs without)",
            min(fast),
            min(plain),
            min(fast) / min(plain),
            "",
        ],
        [
            "recluster watch, start to first round, median, s (with vs without)",
            sorted(fast)[len(fast) // 2],
            sorted(plain)[len(plain) // 2],
            sorted(fast)[len(fast) // 2] / sorted(plain)[len(plain) // 2],
            "",
        ],
    ]
    result = {"quick": quick, "options": options, "with_seconds": fast, "without_seconds": plain}
    return publish("driver-start", "the tests' Spark driver options", quick, rows, result)


if __name__ == "__main__":
    quick_cli("python -m bench.driver_start_bench", main, description=__doc__.splitlines()[0] if __doc__ else None)
