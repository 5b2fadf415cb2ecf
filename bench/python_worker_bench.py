"""The start of a task's Python worker (recluster/spark/python_daemon.py): the CPU of `import pyspark.worker` with
the path Spark gives its workers (pyspark's zip first) as PySpark's daemon imports it, against the same path after
`python_daemon` dropped the installed package's zip, alternating. Run from the project root:
`python -m bench.python_worker_bench`. Why the job's session sets `spark.python.daemon.module`
(docs/operations.md#python-workers). Writes bench/results/python-worker-<date>.json.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path
from statistics import median_high
from typing import Any

import pyspark

from bench.common import log, publish, quick_cli

ZIP_FIRST = os.pathsep.join(str(p) for p in sorted((Path(pyspark.__file__).parent / "python" / "lib").glob("*.zip")))
"""The zips Spark puts first on its Python workers' path ($SPARK_HOME/python/lib, SPARK_HOME the installed package)."""

IMPORTS = {
    "pyspark's daemon": "import pyspark.worker",
    "recluster's daemon": (
        "from recluster.spark.python_daemon import drop_installed_copies; "
        "drop_installed_copies(); import pyspark.worker"
    ),
}


def import_cpu_seconds(code: str) -> float:
    """User plus system CPU seconds of a fresh interpreter running `code` with the workers' path."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": ZIP_FIRST}, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(quick: bool = False) -> dict[str, Any]:
    if not ZIP_FIRST:
        raise SystemExit(f"no zips in {Path(pyspark.__file__).parent / 'python' / 'lib'}")
    repeats = 3 if quick else 10
    runs: dict[str, list[float]] = {name: [] for name in IMPORTS}
    for attempt in range(repeats):
        for name, code in IMPORTS.items():
            runs[name].append(import_cpu_seconds(code))
        log(f"attempt {attempt}: " + ", ".join(f"{name} {seconds[-1]:.2f} s" for name, seconds in runs.items()))

    ours, theirs = median_high(runs["recluster's daemon"]), median_high(runs["pyspark's daemon"])
    rows = [["import pyspark.worker, median CPU s (recluster's daemon vs pyspark's)", ours, theirs, ours / theirs, ""]]
    result = {"quick": quick, "pythonpath": ZIP_FIRST, "runs": runs, "load": os.getloadavg()}
    what = "a Python worker's imports from pyspark's zip and from its package"
    return publish("python-worker", what, quick, rows, result)


if __name__ == "__main__":
    quick_cli("python -m bench.python_worker_bench", main, description=__doc__.splitlines()[0] if __doc__ else None)
