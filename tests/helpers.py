"""Helpers shared by the tests: row multisets and random appends, the `recluster` command line (in this process
and as a subprocess), `recluster watch` processes and their process trees, and waiting on observed state."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import settings

from recluster.delta.log_writer import set_table_properties
from recluster.settings import CLUSTER_BY_PROPERTY

ROOT = Path(__file__).resolve().parents[1]
WAIT_SECONDS = 180.0
"""How long a test waits for a state it expects (a commit, a record, a process) before it fails."""


# --- rows -----------------------------------------------------------------------------------------------------


def row_multiset(table: pa.Table) -> tuple[int, str]:
    """Count plus an order-independent hash over all columns: equal iff the row multisets are equal."""
    columns = sorted(table.column_names)
    digests = sorted(
        hashlib.sha256(repr(tuple(row[c] for c in columns)).encode()).hexdigest() for row in table.to_pylist()
    )
    return table.num_rows, hashlib.sha256("".join(digests).encode()).hexdigest()


def append_random(table: Path, rng: np.random.Generator, batch: int, rows: int = 2_000, high: int = 10**9) -> pa.Table:
    """Append `rows` random int64 keys `k` in [0, high) tagged with `batch`; a new table gets CLUSTER BY (k)."""
    data = pa.table(
        {"k": pa.array(rng.integers(0, high, rows), pa.int64()), "batch": pa.array([batch] * rows, pa.int32())}
    )
    create = not (table / "_delta_log").exists()
    write_deltalake(str(table), data, mode="append")
    if create:
        set_table_properties(table, {CLUSTER_BY_PROPERTY: "k"})
    return data


def recluster_commits(table: Path) -> int:
    """How many commits of the table recluster wrote."""
    return sum(1 for entry in DeltaTable(str(table)).history() if entry.get("recluster.producer") == "recluster")


METRIC_KEYS = [
    "total_block_count",
    "constant_block_count",
    "unclustered_block_count",
    "total_rows",
    "total_bytes",
    "average_overlaps",
    "average_depth",
    "p95_depth",
    "p99_depth",
    "block_depth_histogram",
]
"""The metric keys of `recluster info --json`, in order (the docs/concepts.md#depth-and-levels contract)."""

EMPTY_METRICS = {
    "total_block_count": 0,
    "constant_block_count": 0,
    "unclustered_block_count": 0,
    "total_rows": 0,
    "total_bytes": 0,
    "average_overlaps": 0.0,
    "average_depth": 1.0,
    "p95_depth": 1,
    "p99_depth": 1,
    "block_depth_histogram": {},
}
"""Those metrics for no blocks at all (an empty table)."""

FAST = settings(max_examples=200, deadline=None)
"""The example budget of the property tests of cheap pure functions (block names, keys, metrics)."""
LIGHT = settings(max_examples=100, deadline=None)
"""The budget of the costlier ones."""


# --- waiting --------------------------------------------------------------------------------------------------


def wait_for(
    condition: Callable[[], object],
    what: str,
    process: subprocess.Popen[bytes] | None = None,
    *,
    timeout: float = WAIT_SECONDS,
) -> None:
    """Poll `condition` until it holds; fail naming `what` after `timeout` seconds, or as soon as `process`
    (the one expected to bring the state about) exits."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the process exited ({process.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


# --- the command line -----------------------------------------------------------------------------------------


Run = subprocess.CompletedProcess[str]


def cli_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment without RECLUSTER_ settings (a developer's own must not leak into a test), plus `env`."""
    return {**{k: v for k, v in os.environ.items() if not k.upper().startswith("RECLUSTER_")}, **(env or {})}


def run_cli(
    *args: str | Path,
    env: Mapping[str, str] | None = None,
    check: bool = False,
    cwd: Path | None = None,
    timeout: float = WAIT_SECONDS,
) -> Run:
    """`python -m recluster.cli ARGS` as a subprocess, its output captured as text. `check`: it must exit 0."""
    done = subprocess.run(
        [sys.executable, "-m", "recluster.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=cli_environment(env),
        cwd=cwd,
        timeout=timeout,
        check=False,
    )
    if check:
        assert done.returncode == 0, f"recluster {' '.join(map(str, args))} exited {done.returncode}: {done.stderr}"
    return done


def cli_json(*args: str | Path, env: Mapping[str, str] | None = None) -> Any:
    """`recluster ARGS --json` as a subprocess: it exits 0 and prints one JSON document, returned parsed."""
    return json.loads(run_cli(*args, "--json", env=env, check=True).stdout)


def run_main(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    """`recluster ARGS` in this process (recluster.cli.main): its exit code, stdout and stderr."""
    from recluster.cli import main

    capsys.readouterr()
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def main_json(capsys: pytest.CaptureFixture[str], *args: str | Path) -> Any:
    """`recluster ARGS --json` in this process: it exits 0 and prints one JSON document, returned parsed."""
    code, out, err = run_main(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


# --- `recluster watch` processes ------------------------------------------------------------------------------


def start_watch(
    tables: Sequence[Path],
    checkpoint: Path,
    log: Path,
    *,
    trigger_seconds: float = 0.3,
    target_rows: int = 4_000,
    module: str = "recluster.cli",
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """`recluster watch` on `tables` (cluster key k) from their earliest version as a subprocess in its own
    process group, output appended to `log`. `module` runs another entry point taking watch's arguments."""
    command = [sys.executable, "-m", module, *(["watch"] if module == "recluster.cli" else [])]
    for table in tables:
        command += ["--table", f"{table}:k"]
    command += ["--checkpoint", str(checkpoint), "--trigger-seconds", str(trigger_seconds)]
    command += ["--starting-version", "earliest", "--set", f"clustering.target_rows={target_rows}"]
    command += ["--set", "spark.master=local[1]", "-v"]
    with log.open("ab") as output:
        return subprocess.Popen(
            command,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=ROOT,
            env=cli_environment(env),
        )


def seen_version(log: Path) -> int:
    """The newest table version a job's status lines in `log` report (-1: none yet)."""
    return max((int(v) for v in re.findall(r"recluster table=\S+ version=(\d+)", log.read_text())), default=-1)


def stop_watch(process: subprocess.Popen[bytes], log: Path) -> None:
    """SIGTERM to the process group: the job finishes or abandons its merge safely and exits 0."""
    os.killpg(process.pid, signal.SIGTERM)
    assert process.wait(timeout=120) == 0, log.read_text()[-3000:]


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc (the Spark JVM runs in a session of its own, but is still below)."""
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


def kill_tree(process: subprocess.Popen[bytes]) -> None:
    """kill -9 of the process and everything below it (the driver, its JVM, the JVM's Python workers) all at once;
    returns when none of them runs any more."""
    pids = [process.pid, *descendants(process.pid)] if process.poll() is None else []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    process.wait(timeout=30)
    wait_for(lambda: not any(_running(pid) for pid in pids[1:]), "the killed processes to be gone", timeout=30)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# --- object stores ----------------------------------------------------------------------------------------------


def store_end_to_end(run: Callable[..., Any], table_uri: Callable[[str], str], options: dict[str, str]) -> None:
    """What every store must support, through the CLI (`run(*args)` runs one command with --json): info, CLUSTER BY,
    FINAL and a minor optimize of keyless fragments, every time with the rows unchanged."""
    from recluster.delta.object_store import put_new_object

    uri = table_uri("events")
    rng = np.random.default_rng(41)
    for batch in range(6):
        data = pa.table({"k": rng.integers(0, 10**9, 1_500), "batch": pa.array([batch] * 1_500, pa.int32())})
        write_deltalake(uri, data, mode="append", storage_options=options)
    expected = row_multiset(DeltaTable(uri, storage_options=options).to_pyarrow_table())
    run("sql", f"ALTER TABLE '{uri}' CLUSTER BY (k)")
    assert run("info", uri)["average_depth"] == 6.0
    result = run("run", uri, "--final")
    assert result["failures"] == 0 and result["after"]["average_depth"] <= 1.5
    assert row_multiset(DeltaTable(uri, storage_options=options).to_pyarrow_table()) == expected

    fragments = table_uri("fragments")  # minor optimizing of small appends, no key needed
    for batch in range(5):
        write_deltalake(fragments, pa.table({"v": [batch] * 100}), mode="append", storage_options=options)
    before = row_multiset(DeltaTable(fragments, storage_options=options).to_pyarrow_table())
    optimized = run("optimize", fragments, "--type", "minor")
    assert optimized["outcome"] == "done" and optimized["failures"] == 0
    table = DeltaTable(fragments, storage_options=options)
    assert len(table.file_uris()) == 1 and row_multiset(table.to_pyarrow_table()) == before

    conditional = table_uri("conditional")  # our commits: created only if absent, the second writer loses
    write_deltalake(conditional, pa.table({"k": [1, 2, 3]}), storage_options=options)
    taken = "_delta_log/00000000000000000001.json"
    assert put_new_object(conditional, taken, b'{"commitInfo":{}}\n', options)
    assert not put_new_object(conditional, taken, b'{"commitInfo":{"other":1}}\n', options)
    assert DeltaTable(conditional, storage_options=options).version() == 1
