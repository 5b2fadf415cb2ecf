"""`recluster watch` processes for the crash and two-instance scenarios: start, wait, kill -9 with the JVM."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from recluster.core.blocks import parse_data_file_name
from recluster.delta.log_writer import set_table_properties
from recluster.settings import CLUSTER_BY_PROPERTY

ROOT = Path(__file__).resolve().parents[2]
WAIT_SECONDS = 180


def start_watch(
    tables: list[Path], checkpoint: Path, log: Path, markers: Path | None = None, pause: str = ""
) -> subprocess.Popen[bytes]:
    """A `recluster watch` subprocess (phase-marking when `markers` is given) in its own process group."""
    module = "tests.reliability.phased_watch" if markers else "recluster.cli"
    command = [sys.executable, "-m", module, *([] if markers else ["watch"])]
    for table in tables:
        command += ["--table", f"{table}:k"]
    command += [
        "--checkpoint",
        str(checkpoint),
        "--trigger-seconds",
        "0.3",
        "--starting-version",
        "earliest",
        "--set",
        "clustering.target_rows=4000",
        "--set",
        "spark.master=local[1]",
        "-v",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECLUSTER_")}
    if markers:
        env["RECLUSTER_TEST_MARKERS"] = str(markers)
        env["RECLUSTER_TEST_PAUSE"] = pause
    with log.open("ab") as output:
        return subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT, env=env
        )


def wait_for(condition: Callable[[], bool], what: str, process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the job exited ({process.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (the Spark JVM runs in its own session, but is still our child)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_job(process: subprocess.Popen[bytes]) -> None:
    """kill -9 of the job: the driver, its JVM and the JVM's Python workers, all at once."""
    pids = [process.pid, *_descendants(process.pid)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    process.wait(timeout=30)
    deadline = time.monotonic() + 30
    while any(os.path.exists(f"/proc/{pid}") and "Z" not in _state(pid) for pid in pids[1:]):
        if time.monotonic() > deadline:
            raise AssertionError("processes of the killed job are still running")
        time.sleep(0.1)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def stop_job(process: subprocess.Popen[bytes], log: Path) -> None:
    """SIGTERM: the job finishes or abandons its merge safely and exits 0."""
    os.killpg(process.pid, signal.SIGTERM)
    assert process.wait(timeout=120) == 0, log.read_text()[-3000:]


def append_random(table: Path, rng: np.random.Generator, batch: int, rows: int = 3_000) -> pa.Table:
    data = pa.table(
        {"k": pa.array(rng.integers(0, 10**6, rows), pa.int64()), "batch": pa.array([batch] * rows, pa.int32())}
    )
    create = not (table / "_delta_log").exists()
    write_deltalake(str(table), data, mode="append")
    if create:
        set_table_properties(table, {CLUSTER_BY_PROPERTY: "k"})
    return data


def our_files_on_disk(table: Path) -> set[str]:
    return {
        str(path.relative_to(table)) for path in table.rglob("*.parquet") if parse_data_file_name(path.name) is not None
    }


def recluster_commits(table: Path) -> int:
    return sum(1 for entry in DeltaTable(str(table)).history() if entry.get("recluster.producer") == "recluster")
