"""One run of the streaming writers bench (bench/streaming_writers_bench.py, whose docstring says what it does): a
Delta Spark streaming writer and DML (tests/streaming_writers_spark.py, in the referee's environment) beside
`recluster watch` or Delta's OPTIMIZE, and what the run left. Shared by tests/test_streaming_writers.py (the short
version) and the bench, which imports it from here."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fingerprints import row_fingerprint
from tests.referee import REFEREE_JARS, REFEREE_PYTHON, Referee, referee_environment
from tests.streaming_writers_spark import row_columns

SPARK_SIDE = Path(__file__).with_name("streaming_writers_spark.py")
RATE = 1000
"""Rows the writer appends a second."""
DML_EVERY = 2.0
OPTIMIZE_EVERY = 10.0
TARGET_ROWS = 50_000
"""recluster's output files (Delta's OPTIMIZE keeps its default target size)."""
STARTUP_SECONDS = 600.0
MODES = ("recluster", "optimize")
TRIGGER_SECONDS = 1.0
"""`recluster watch --trigger-seconds`: how often the job looks at the log (and may merge what came)."""
MASTER = "local[4]"
"""Task slots of the Delta Spark side: a DML statement's tasks need not queue behind a whole micro-batch's."""


@dataclass(frozen=True, slots=True)
class WritersRun:
    """One run: the writer's fate, the DML statements' and the rewrites' counts, the rows checked."""

    mode: str
    """`recluster` (beside `recluster watch`) or `optimize` (Delta's OPTIMIZE on a schedule)."""
    seconds: float
    writer_active: bool
    writer_error: str | None
    writer_failed_after: float | None
    """Seconds from the writer's start to its query's failure (None: it stayed active)."""
    stream_batches: int
    rows: int
    dml: int
    dml_committed: int
    """Statements that committed within ATTEMPTS attempts (tests/streaming_writers_spark.py)."""
    dml_lost_to_rewrites: int
    """DML attempts that failed on a conflict with a rewrite commit: ours, or Delta's OPTIMIZE."""
    dml_lost_to_writer: int
    """DML attempts that failed on a conflict with the streaming writer's commits (whoever rewrites)."""
    dml_lost_to_other: int
    """Failed DML attempts whose winner Delta did not name, or that were no conflict."""
    conflicts: dict[str, int]
    """Failed attempts (DML and OPTIMIZE) by Delta's error class and the operation they lost to."""
    rewrites: int
    """Rewrite commits: ours in the recluster run, Delta's OPTIMIZE commits in the other."""
    rewrites_refused: int
    """Rewrites that lost: ours refused by our conflict check (the job's status), or OPTIMIZE attempts failed."""
    metadata_actions: int
    """metaData or protocol actions committed after the table was created."""
    rows_exact: bool


def events_of(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def wait_for_event(path: Path, kind: str, process: subprocess.Popen[bytes], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not any(e["event"] == kind for e in events_of(path)):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the Delta Spark side gave no {kind!r} event (exit {process.poll()}); see its log")
        time.sleep(0.5)


def log_commits(table: Path) -> list[list[dict[str, Any]]]:
    """Every commit's actions, by version, from the log's JSON files."""
    files = sorted((table / "_delta_log").glob("*.json"))
    return [[json.loads(line) for line in f.read_text().splitlines() if line.strip()] for f in files]


def commit_info(actions: list[dict[str, Any]]) -> dict[str, Any]:
    return next((a["commitInfo"] for a in actions if "commitInfo" in a), {})


def start_watch(table: Path, work: Path, output: Path, trigger_seconds: float) -> subprocess.Popen[bytes]:
    """`recluster watch` on the table (its liquid clustering columns are the key) in its own process group."""
    command = [sys.executable, "-m", "recluster.cli", "watch", "--table", str(table)]
    command += ["--checkpoint", str(work / "watch-checkpoint"), "--trigger-seconds", str(trigger_seconds)]
    command += ["--starting-version", "earliest", "--set", f"clustering.target_rows={TARGET_ROWS}"]
    command += ["--set", "spark.master=local[1]", "-v"]
    environment = {k: v for k, v in os.environ.items() if not k.upper().startswith("RECLUSTER_")}
    with output.open("ab") as sink:
        return subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True, cwd=work, env=environment
        )


def stop_watch(process: subprocess.Popen[bytes], output: Path) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    if process.wait(timeout=300) != 0:
        raise RuntimeError(f"recluster watch exited with {process.returncode}:\n{output.read_text()[-3000:]}")


def wait_for_watching(process: subprocess.Popen[bytes], output: Path) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while "watching 1 table(s)" not in output.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"recluster watch did not start:\n{output.read_text(errors='replace')[-3000:]}")
        time.sleep(0.5)


def last_rewrite_conflicts(output: Path) -> int:
    found = re.findall(r" conflicts=(\d+) ", output.read_text(errors="replace"))
    return int(found[-1]) if found else 0


def shadow_rows(referee: Referee, table: Path, shadow: Path, dml: list[dict[str, Any]], rate: int) -> Any:
    """The rows a table nobody rewrites holds after the same writer rows and the DML statements that committed."""
    newest = referee.sql(f"SELECT max(v) AS v FROM delta.`{table}`")[0]["v"]
    columns = ", ".join(row_columns(rate))
    source = f"SELECT {columns} FROM (SELECT id AS v FROM range(0, {newest + 1}))"
    referee.sql(f"CREATE TABLE delta.`{shadow}` USING delta AS {source}")
    for statement in dml:
        referee.sql(statement["sql"].replace(f"delta.`{table}`", f"delta.`{shadow}`"))
    return referee.read(shadow)


def writer_commits_after_rewrites(table: Path, rewrites: int) -> int:
    """The streaming writer's commits after the `rewrites`-th commit of ours (0 while there are fewer of ours)."""
    ours = 0
    after = 0
    for actions in log_commits(table):
        info = commit_info(actions)
        if ours >= rewrites and info.get("operation") == "STREAMING UPDATE":
            after += 1
        elif ours < rewrites and info.get("recluster.producer") == "recluster":
            ours += 1
    return after


def wait_for_rewrites_survived(
    table: Path, events: Path, writer: subprocess.Popen[bytes], rewrites: int, seconds: float
) -> None:
    """Until the table has `rewrites` commits of ours followed by two of the writer's, and a DML statement was
    tried (committed or not), or `seconds` passed or the writer exited: what a run must have seen to say the
    writer survives our rewrites beside DML."""
    deadline = time.monotonic() + seconds
    while writer.poll() is None and time.monotonic() < deadline:
        tried = any(e["event"] == "statement" for e in events_of(events))
        if tried and writer_commits_after_rewrites(table, rewrites) >= 2:
            return
        time.sleep(1)


def run_writers(
    mode: str,
    seconds: float,
    work: Path,
    *,
    rate: int = RATE,
    trigger_seconds: float = TRIGGER_SECONDS,
    referee: Referee | None = None,
    until_rewrites: int = 0,
) -> WritersRun:
    """One run (see the module's docstring) in `work`; `mode` is `recluster` (its job triggered every
    `trigger_seconds`) or `optimize`. The rows are checked by `referee` (default: one started for the check).
    With `until_rewrites`, the writer stops as soon as it committed twice after that many rewrites of ours and a DML
    statement was tried (within `seconds` at most)."""
    table, events, go, stop = work / "table", work / "events.jsonl", work / "go", work / "stop"
    command = [str(REFEREE_PYTHON), str(SPARK_SIDE), "--jars", str(REFEREE_JARS), "--table", str(table)]
    command += ["--checkpoint", str(work / "writer-checkpoint"), "--events", str(events), "--go", str(go)]
    command += ["--stop", str(stop)]
    command += ["--seconds", str(seconds), "--rate", str(rate), "--dml-every", str(DML_EVERY)]
    if mode == "optimize":
        command += ["--optimize-every", str(OPTIMIZE_EVERY)]
    spark_log = work / "delta-spark.log"
    with spark_log.open("ab") as sink:
        writer = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, cwd=work, env=referee_environment(work, master=MASTER)
        )
    watch = None
    watch_log = work / "watch.log"
    try:
        wait_for_event(events, "created", writer, STARTUP_SECONDS)
        created = len(log_commits(table))
        if mode == "recluster":
            watch = start_watch(table, work, watch_log, trigger_seconds)
            wait_for_watching(watch, watch_log)
        print(f"{mode}: writing for {seconds:.0f} s", file=sys.stderr, flush=True)
        go.touch()
        if until_rewrites:
            wait_for_rewrites_survived(table, events, writer, until_rewrites, seconds)
            stop.touch()
        if writer.wait(timeout=seconds + STARTUP_SECONDS) != 0:
            raise RuntimeError(f"the Delta Spark side exited with {writer.returncode}: see {spark_log}")
    finally:
        if writer.poll() is None:
            writer.kill()
        if watch is not None:
            stop_watch(watch, watch_log)
    return measured(mode, seconds, work, created, rate, referee)


def measured(
    mode: str, seconds: float, work: Path, created: int, rate: int, referee: Referee | None = None
) -> WritersRun:
    table = work / "table"
    events = events_of(work / "events.jsonl")
    commits = log_commits(table)
    ours = mode == "recluster"
    rewriter = "recluster" if ours else "OPTIMIZE"
    field = "recluster.producer" if ours else "operation"
    rewrites = [v for v, actions in enumerate(commits) if v >= created and commit_info(actions).get(field) == rewriter]
    dml = [e for e in events if e["event"] == "dml"]
    failed = [e for e in events if e["event"] == "statement" and not e["ok"]]
    failed_dml = [e for e in failed if e["kind"] != "optimize"]
    conflicts: dict[str, int] = {}
    for event in failed:
        name = f"{event['kind']}: {event['conflict']} after {event['winner']}"
        conflicts[name] = conflicts.get(name, 0) + 1
    started = next(e for e in events if e["event"] == "writing")
    stopped = next(e for e in events if e["event"] == "stopped")
    writer_failed = next((e for e in events if e["event"] == "writer_failed"), None)
    if referee is None:
        (work / "referee").mkdir()
        checker = Referee(work / "referee")
    else:
        checker = referee
    try:
        read = checker.read(table)
        expected = shadow_rows(checker, table, work / "shadow", [e for e in dml if e["ok"]], rate)
    finally:
        if referee is None:
            checker.stop()
    columns = sorted(read.column_names)
    lost_to_rewrites = sum(1 for e in failed_dml if e["winner"] == rewriter)
    lost_to_writer = sum(1 for e in failed_dml if e["winner"] == "STREAMING UPDATE")
    return WritersRun(
        mode=mode,
        seconds=seconds,
        writer_active=bool(stopped["active"]) and writer_failed is None,
        writer_error=writer_failed["error"] if writer_failed else None,
        writer_failed_after=writer_failed["t"] - started["t"] if writer_failed else None,
        stream_batches=int(stopped["batches"]),
        rows=read.num_rows,
        dml=len(dml),
        dml_committed=sum(1 for e in dml if e["ok"]),
        dml_lost_to_rewrites=lost_to_rewrites,
        dml_lost_to_writer=lost_to_writer,
        dml_lost_to_other=len(failed_dml) - lost_to_rewrites - lost_to_writer,
        conflicts=conflicts,
        rewrites=len(rewrites),
        rewrites_refused=(
            last_rewrite_conflicts(work / "watch.log") if ours else sum(e["kind"] == "optimize" for e in failed)
        ),
        metadata_actions=sum(1 for c in commits[created:] for a in c if "metaData" in a or "protocol" in a),
        rows_exact=row_fingerprint(read.select(columns)) == row_fingerprint(expected.select(columns)),
    )
