"""What several benchmarks use: the Spark session, the results files and their summary table, the log line, the
command line, tables in bench's row shape (an int64 key, a float, 20 letters, an int), and measures (percentiles, a
process's peak memory, the share of files a range predicate reads)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from docgen.figures import MB, RESULTS, SUMMARY_HEADERS, summary_records
from recluster.settings import SparkSettings
from tests.file_stats import PREDICATES, WIDTH, add_actions, as_numbers
from tests.workload_data import STRING_WIDTH, letters

SPARK_SETTINGS = SparkSettings(master="local[2]", shuffle_partitions=4)


def start_spark() -> Any:
    """The one SparkSession of a benchmark script (local[2], 4 shuffle partitions)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from recluster.spark.session import spark_session

    spark = spark_session(SPARK_SETTINGS)
    if spark.sparkContext.master != SPARK_SETTINGS.master:  # another benchmark left a different session running
        spark.stop()
        spark = spark_session(SPARK_SETTINGS)
    spark.conf.set("spark.sql.shuffle.partitions", str(SPARK_SETTINGS.shuffle_partitions))
    return spark


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.1f}"
        if isinstance(value, int):
            return f"{value:,}"
        return str(value)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg": list(os.getloadavg()),
    }


def write_results(name: str, result: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}-{dt.date.today().isoformat()}.json"
    path.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def quick_cli(
    prog: str, main: Callable[..., Any], quick_help: str | None = None, description: str | None = None
) -> None:
    """The command line of a benchmark whose only option is `--quick`: parse it and run `main(quick=...)`."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    main(quick=parser.parse_args().quick)


def publish(
    name: str, title: str, quick: bool, rows: Sequence[Sequence[Any]], result: dict[str, Any]
) -> dict[str, Any]:
    """A benchmark's end: its summary rows and the machine into `result`, the table printed under `title`, the
    JSON written to bench/results/<name>[-quick]-<date>.json. Returns `result`."""
    result["machine"] = machine()
    result["summary"] = summary_records(rows)
    print(f"\n### {title}\n")
    print(markdown_table(SUMMARY_HEADERS, rows))
    print(f"wrote {write_results(f'{name}-quick' if quick else name, result)}")
    return result


# ---- tables in bench's row shape -----------------------------------------------------------------------------


def random_batch(rng: np.random.Generator, rows: int) -> pa.Table:
    """Random int64 keys over the whole domain plus a float, a 20-character string and an int payload."""
    labels = letters(rng, rows, STRING_WIDTH)
    return pa.table(
        {
            "k": pa.array(rng.integers(-(1 << 62), 1 << 62, size=rows, dtype=np.int64)),
            "v": pa.array(rng.random(rows)),
            "s": labels,
            "n": pa.array(rng.integers(0, 1_000_000, size=rows, dtype=np.int32)),
        }
    )


def live_files(path: Path) -> list[tuple[str, int, int]]:
    """(relative path, size, rows) of the live files of the latest version."""
    actions = add_actions(path)
    return list(
        zip(
            actions["path"].to_pylist(),
            actions["size_bytes"].to_pylist(),
            actions["num_records"].to_pylist(),
            strict=True,
        )
    )


def raw_spark_sort(spark: Any, files: Sequence[str], rows: int, out: Path) -> float:
    partitions = math.ceil(rows / 1_000_000)
    started = time.perf_counter()
    spark.read.parquet(*files).repartitionByRange(partitions, "k").sortWithinPartitions("k").write.mode(
        "overwrite"
    ).parquet(str(out))
    return time.perf_counter() - started


class LogBackup:
    """Restores a table to its state before a rewrite: the log is copied back, the rewrite's outputs deleted.

    Delta removes are logical, so the input files are still on disk after a recluster commit.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.saved = path.parent / f"{path.name}-log-backup"
        shutil.copytree(path / "_delta_log", self.saved)
        self.data = {p for p in os.listdir(path) if p != "_delta_log"}

    def restore(self) -> None:
        shutil.rmtree(self.path / "_delta_log")
        shutil.copytree(self.saved, self.path / "_delta_log")
        for name in set(os.listdir(self.path)) - self.data - {"_delta_log"}:
            target = self.path / name
            if target.is_dir():
                shutil.rmtree(target)
            else:
                target.unlink()


# ---- measures -------------------------------------------------------------------------------------------------


def percentile(values: list[float], percent: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, int(np.ceil(percent / 100 * len(ordered))))
    return ordered[rank - 1]


def process_peak_rss_mb() -> float:
    """Peak resident memory of this process image (VmHWM; ru_maxrss would carry the parent's peak over exec)."""
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / MB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MB  # not Linux: KiB on most systems


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command name (field 3 on: state, parent, ...), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def cpu_seconds(fields: list[str]) -> float:
    """User plus system CPU seconds of a process, from its `process_stat` fields."""
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def measured_in_subprocess(module: str, path: Path, what: str) -> dict[str, Any]:
    """`python -m <module> --measure WHAT TABLE` in a fresh interpreter: the JSON it prints last."""
    done = subprocess.run(
        [sys.executable, "-m", module, "--measure", what, str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


ColumnPredicates = dict[str, tuple[np.ndarray, np.ndarray]]
"""Per column, the low and high ends of each predicate."""


def random_predicates(table: pa.Table, columns: tuple[str, ...], seed: int) -> ColumnPredicates:
    """PREDICATES per column at random places: a range of WIDTH of the domain, or one value of a string column."""
    rng = np.random.default_rng(seed)
    predicates: ColumnPredicates = {}
    for name in columns:
        values = as_numbers(pc.drop_null(table[name]))
        if values.dtype == object:
            picks = rng.choice(np.unique(values), PREDICATES)
            predicates[name] = (picks, picks)
            continue
        low, high = float(values.min()), float(values.max())
        width = (high - low) * WIDTH
        starts = rng.uniform(low, high - width, PREDICATES)
        predicates[name] = (starts, starts + width)
    return predicates


def scan_shares(path: Path, predicates: ColumnPredicates) -> dict[str, float]:
    """Per column: mean over its predicates of the share of live files whose min/max stats intersect it."""
    actions = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))
    shares = {}
    for name, (low, high) in predicates.items():
        file_low, file_high = as_numbers(actions[f"min.{name}"]), as_numbers(actions[f"max.{name}"])
        hits = (file_low[None, :] <= high[:, None]) & (low[:, None] <= file_high[None, :])
        shares[name] = float(hits.mean())
    return shares
