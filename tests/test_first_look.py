"""What an operator sees first (issue 32): the README's demo command counts its merges whatever the path form,
`info` says how many files its depth leaves out, and no command leaves anything in the temp dir or the working
directory."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import yaml
from deltalake import write_deltalake

from jobs.pages import render_table, snapshot_views
from recluster.settings import Settings, TableSettings
from tests.helpers import append_random, cli_environment, run_cli, stop_watch, wait_for

pytestmark = pytest.mark.slow


def logged_operations(table: Path) -> list[str]:
    """The operations of the table's commits so far, from its log files (none before it exists)."""
    commits = sorted(path for path in (table / "_delta_log").glob("*.json") if path.stem.isdigit())
    lines = [line for path in commits for line in path.read_text().splitlines()]
    return [json.loads(line)["commitInfo"].get("operation", "") for line in lines if line.startswith('{"commitInfo"')]


@pytest.mark.needs_services  # recluster demo: its job runs local Spark
def test_the_readme_demo_command_counts_its_merges_with_its_default_relative_path(tmp_path: Path) -> None:
    """`./dev demo` runs `recluster demo` with the default `--path recluster-demo`, relative to the working
    directory: the summary must count the job's merges of that table. Stopped as a user stops it (Ctrl-C) as soon
    as the table holds a merge of the job and an append of the demo's writer, not after a fixed time."""
    table = tmp_path / "recluster-demo" / "events"
    out, err = tmp_path / "demo.out", tmp_path / "demo.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "recluster.cli", "demo", "--seconds", "600", "--json"],
            stdout=stdout,
            stderr=stderr,
            cwd=tmp_path,
            env=cli_environment(),
        )
    try:

        def merged_and_appended() -> bool:  # the writer's first append comes 1 s after Ctrl-C is handled
            operations = logged_operations(table)
            return "OPTIMIZE" in operations and operations.count("WRITE") >= 2

        wait_for(merged_and_appended, "a merge of the demo table and an append of its writer", process)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=120) == 0, err.read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    summary = json.loads(out.read_text())
    assert summary["merges"] > 0, summary
    assert summary["bytes_written"] > 0 and summary["bytes_appended"] > 0
    assert (tmp_path / "recluster-demo" / "events" / "_delta_log").is_dir()


def test_info_says_how_many_files_its_depth_leaves_out(tmp_path: Path) -> None:
    table = tmp_path / "t"
    rng = np.random.default_rng(3)
    for batch in range(4):
        append_random(table, rng, batch, rows=200)
    result = run_cli("info", table, "--cluster-by", "k,batch", check=True)  # a Hilbert curve no file is on yet
    assert "4 of 4 files are not on the key's curve yet" in result.stdout, result.stdout
    linear = run_cli("info", table, check=True)  # CLUSTER BY (k): every append has stats, none left out
    assert "files are not on" not in linear.stdout and "no usable stats" not in linear.stdout
    settings = Settings(tables=[TableSettings(uri=str(table), cluster_by=["k", "batch"])])
    (view,) = snapshot_views([str(table)], settings, None)  # the status page and /api/tables say it too
    assert view.to_dict()["unclustered_files"] == 4 and "files the depth leaves out" in render_table(view)


@pytest.mark.needs_services  # run --final on local Spark, in a subprocess
def test_commands_leave_nothing_in_the_temp_dir_or_the_working_directory(tmp_path: Path) -> None:
    """Every command in a temp dir and working directory of its own, checked empty after it. `watch` runs alongside
    the others (both start a Spark JVM) on a copy of the table as made, so it has the same unmerged appends to work
    on; the others run one after another on the table itself."""
    table = tmp_path / "t"
    rng = np.random.default_rng(4)
    for batch in range(4):
        append_random(table, rng, batch, rows=500)
    watched = tmp_path / "watched"
    shutil.copytree(table, watched)

    def run_leaving(command: tuple[str | Path, ...], place: Path) -> list[str]:
        """What `recluster COMMAND` left in its temp dir and its working directory (it must exit 0)."""
        work, temp = place / "work", place / "temp"
        work.mkdir(parents=True)
        temp.mkdir()
        environment = {"TMPDIR": str(temp), "JAVA_TOOL_OPTIONS": f"-Djava.io.tmpdir={temp}"}
        result = run_cli(*command, env=environment, cwd=work)
        assert result.returncode == 0, (command, result.stderr)
        return sorted(os.listdir(temp)) + sorted(os.listdir(work))

    watch = ("watch", "--table", str(watched), "--seconds", "5", "--checkpoint", str(tmp_path / "checkpoint"))
    commands = [
        ("info", table),
        ("run", table, "--dry-run"),
        ("run", table, "--final", "--set", "merge.in_process_max_bytes=0", "--set", "merge.placement=spark"),
        ("sql", f"ALTER TABLE '{table}' CLUSTER BY (k, batch)"),
        ("optimize", table, "--type", "minor"),
        ("status", table),
        ("clean", table, "--dry-run"),
    ]
    with ThreadPoolExecutor(max_workers=1) as pool:
        watching = pool.submit(run_leaving, watch, tmp_path / "watch")
        for index, command in enumerate(commands):
            left = run_leaving(command, tmp_path / f"command-{index}")
            assert not left, f"recluster {command[0]} left {left}"
        left = watching.result()
        assert not left, f"recluster watch left {left}"


@pytest.mark.needs_services  # recluster watch with local Spark, in a subprocess
def test_a_job_on_300_idle_tables_lists_them_from_the_start_and_sees_an_append_right_after_watching(
    tmp_path: Path,
) -> None:
    tables = []
    for index in range(300):
        path = tmp_path / "tables" / f"t{index:03d}"
        write_deltalake(str(path), pa.table({"k": pa.array([index, index + 1], pa.int64())}))
        tables.append(path)
    keyless = tmp_path / "tables" / "no-key"
    write_deltalake(str(keyless), pa.table({"x": [1]}))
    config = tmp_path / "job.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "tables": [{"uri": str(t), "cluster_by": ["k"]} for t in tables] + [{"uri": str(keyless)}],
                "stream": {"checkpoint_location": str(tmp_path / "checkpoint"), "trigger_interval_seconds": 0.5},
                "http": {"port": 0, "host": "127.0.0.1"},
                "spark": {"master": "local[1]"},
            }
        ),
        encoding="utf-8",
    )
    log = tmp_path / "watch.log"
    with log.open("ab") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "recluster.cli", "watch", "--config", str(config)],
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=cli_environment(),
        )
    try:
        wait_for(lambda: "watching 301 table(s)" in log.read_text(), "watching", process)
        watching = time.monotonic()
        write_deltalake(str(tables[0]), pa.table({"k": pa.array([7], pa.int64())}), mode="append")
        port = int(re.search(r"http on port (\d+)", log.read_text()).group(1))  # type: ignore[union-attr]

        def api(path: str) -> Any:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
                return json.loads(response.read())

        wait_for(lambda: len(api("/api/tables")) == 301, "all 301 tables listed", process, timeout=60)
        assert time.monotonic() - watching < 60
        listed = {view["table"]: view for view in api("/api/tables")}
        assert "no cluster key" in (listed[str(keyless)]["error"] or "")
        assert all(listed[str(t)]["files"] >= 1 and listed[str(t)]["error"] is None for t in tables)
        assert len(api("/status")["tables"]) == 301

        def version_of(table: Path) -> int:
            return int(next(s["version"] for s in api("/status")["tables"] if s["table"] == str(table)))

        wait_for(lambda: version_of(tables[0]) == 1, "the append made right after watching", process, timeout=60)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            metrics = response.read().decode()
        assert sum(f'table="{t}"' in metrics for t in tables[:20]) == 20
        wait_for(lambda: api_ready(port), "/readyz", process)
    finally:
        stop_watch(process, log)


def api_ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as response:
            return bool(response.status == 200)
    except urllib.error.HTTPError:
        return False
