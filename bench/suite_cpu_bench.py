"""Where the test suite's CPU goes: runs pytest (the arguments after `--`, by default the full suite as `./dev test`
runs it) and samples every process it starts once a second from /proc, summing each one's user and system CPU by
what it is (the Delta Spark referee's JVM, our Spark drivers, the pytest workers, `recluster` subprocesses, moto...).
A process that lives under a second is missed. The suite is bound by its work on two cores
(docs/getting-started.md#test-time): this says which work. Run from the project root:
`python -m bench.suite_cpu_bench [-- PYTEST_ARGS]`. Writes bench/results/suite-cpu-<date>.json.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.common import cpu_seconds, log, process_stat, publish

MARK = "RECLUSTER_SUITE_CPU"
"""Set in pytest's environment: a process that carries it belongs to the run, wherever it was reparented."""

JVM_KINDS = (
    ("referee", "the Delta Spark referee's JVM"),
    ("kafka.Kafka", "the Kafka broker's JVM"),
    ("HiveMetaStore", "the Hive Metastore's JVM"),
    ("CoarseGrainedExecutorBackend", "standalone cluster executors' JVMs"),
    ("deploy.master", "the standalone cluster's master and workers"),
    ("deploy.worker", "the standalone cluster's master and workers"),
    ("SparkSubmit", "our Spark drivers' JVMs"),
)
PYTHON_KINDS = (
    ("referee", "the referee's Python"),
    ("moto_server", "moto (S3 emulator)"),
    ("tests.moto_indexed", "moto (S3 emulator)"),
    ("pyspark.daemon", "PySpark's Python workers"),
    ("recluster.spark.python_daemon", "PySpark's Python workers"),
    ("python_streaming_source_runner", "PySpark's Python workers"),
    ("execnet", "the pytest workers"),
    ("exec(eval(sys.stdin.readline()))", "the pytest workers"),
    ("-m pytest", "the pytest controller"),
    ("recluster", "recluster subprocesses (CLI, watch jobs)"),
)


def kind(command: str) -> str:
    """What a process is, from its command line."""
    program = os.path.basename(command.split("\0", 1)[0])
    line = command.replace("\0", " ")
    if program == "java":
        return next((what for mark, what in JVM_KINDS if mark in line), "other JVMs")
    if program.startswith("python"):
        return next((what for mark, what in PYTHON_KINDS if mark in line), "other Python")
    if "azurite" in line or program == "node":
        return "azurite (node)"
    if "chrom" in program or "--change-stack-guard-on-fork" in line:  # a renderer rewrites its command line
        return "chromium"
    return f"other: {program}"


def sample(root: int, seen: dict[tuple[int, int], list[Any]]) -> None:
    """Every process below `root` or carrying MARK: its CPU so far and what it is now (a launcher script execs java)."""
    stats = {int(entry): process_stat(int(entry)) for entry in os.listdir("/proc") if entry.isdigit()}
    parents = {pid: int(fields[1]) for pid, fields in stats.items() if fields is not None}
    for pid, fields in stats.items():
        if fields is None:
            continue
        key = (pid, int(fields[19]))
        if key not in seen:
            ancestor = pid
            while ancestor > 1 and ancestor != root:
                ancestor = parents.get(ancestor, 1)
            try:
                ours = ancestor == root or f"{MARK}=1".encode() in Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            seen[key] = [0.0, "", ours]
        if seen[key][2]:
            try:
                command = Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
            except OSError:
                continue
            seen[key][1] = kind(command) if command else seen[key][1]  # an exited process has none
            seen[key][0] = max(seen[key][0], cpu_seconds(fields))


def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.suite_cpu_bench", description=__doc__.splitlines()[0])
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments (default: -n auto)")
    arguments = parser.parse_args().pytest_args or ["-n", "auto"]
    environment = {**os.environ, MARK: "1"}
    started = time.perf_counter()
    pytest = subprocess.Popen([sys.executable, "-m", "pytest", *arguments], env=environment)
    seen: dict[tuple[int, int], list[Any]] = {}
    while pytest.poll() is None:
        sample(pytest.pid, seen)
        time.sleep(1)
    wall = time.perf_counter() - started
    by_kind: dict[str, float] = defaultdict(float)
    processes: dict[str, int] = defaultdict(int)
    for seconds, what, ours in seen.values():
        if ours and what:
            by_kind[what] += seconds
            processes[what] += 1
    total = sum(by_kind.values())
    count = sum(processes.values())
    log(f"pytest exited {pytest.returncode} after {wall:.0f} s; {total:.0f} CPU s in {count} processes")
    rows = [
        [f"{what} ({processes[what]} processes), CPU s and share of the run's", seconds, total, seconds / total, ""]
        for what, seconds in sorted(by_kind.items(), key=lambda item: -item[1])
    ]
    result = {
        "pytest_args": arguments,
        "exit_code": pytest.returncode,
        "seconds": wall,
        "cpu_seconds": total,
        "cpu_seconds_by_kind": dict(by_kind),
        "processes_by_kind": dict(processes),
        "load": os.getloadavg(),
    }
    return publish("suite-cpu", "the test suite's CPU by process", False, rows, result)


if __name__ == "__main__":
    sys.exit(main()["exit_code"])  # pytest's: a failed or empty run fails the benchmark too
