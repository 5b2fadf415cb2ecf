"""Helpers shared by the tests: row multisets and random appends, the `recluster` command line (in this process
and as a subprocess), `recluster watch` processes and their process trees, and waiting on observed state."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError
from hypothesis import settings

from recluster.core.blocks import parse_data_file_name
from recluster.core.selection.plan import Policy
from recluster.delta.log import SCHEMA
from recluster.delta.log_writer import set_table_properties
from recluster.engine.rounds import ReclusterResult, recluster_table, snapshot_loader
from recluster.settings import CLUSTER_BY_PROPERTY, ClusteringSettings, SelectionSettings, Settings, TableSettings
from recluster.settings_job import StreamSettings
from tests.suite_environment import SUITE_SETTINGS

if TYPE_CHECKING:
    from recluster.engine.handler import ReclusterHandler

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


def append_clustered(
    uri: str | Path,
    data: pa.Table,
    options: Mapping[str, str] | None = None,
    properties: Mapping[str, str] | None = None,
) -> pa.Table:
    """Append `data` to the Delta table at `uri` (a path or an object store URI with its storage `options`); a new
    table gets CLUSTER BY (k) and `properties`."""
    storage = dict(options) if options else None
    try:
        DeltaTable(str(uri), storage_options=storage)
        created = True
    except TableNotFoundError:
        created = False
    write_deltalake(str(uri), data, mode="append", storage_options=storage)
    if not created:
        set_table_properties(uri, {CLUSTER_BY_PROPERTY: "k", **(properties or {})}, options)
    return data


def append_random(table: Path, rng: np.random.Generator, batch: int, rows: int = 2_000, high: int = 10**9) -> pa.Table:
    """Append `rows` random int64 keys `k` in [0, high) tagged with `batch`; a new table gets CLUSTER BY (k)."""
    data = pa.table(
        {"k": pa.array(rng.integers(0, high, rows), pa.int64()), "batch": pa.array([batch] * rows, pa.int32())}
    )
    return append_clustered(table, data)


def random_batches(
    uri: str | Path, batches: int, rows: int, seed: int, options: Mapping[str, str] | None = None
) -> None:
    """`batches` appends of `rows` random keys `k` in [-10^9, 10^9), a batch number and a string derived from the key,
    to a table clustered by k (created by the first)."""
    rng = np.random.default_rng(seed)
    for batch in range(batches):
        keys = rng.integers(-(10**9), 10**9, size=rows)
        data = pa.table(
            {
                "k": pa.array(keys, pa.int64()),
                "batch": pa.array([batch] * rows, pa.int32()),
                "s": pa.array([f"v{x % 97}" for x in keys.tolist()]),
            }
        )
        append_clustered(uri, data, options)


def timelike_append(path: Path, batch: int, rows: int = 1_000, properties: dict[str, str] | None = None) -> pa.Table:
    """Keys rising with time: appends do not overlap, so reclustering has nothing to do and small files
    pile up at level 0 (the case minor optimizing exists for)."""
    data = pa.table(
        {
            "k": pa.array(np.arange(batch * rows, (batch + 1) * rows), pa.int64()),
            "batch": pa.array([batch] * rows, pa.int32()),
        }
    )
    return append_clustered(path, data, properties=properties)


def random_pairs(path: Path, appends: int = 12, rows: int = 4_000, seed: int = 7) -> pa.Table:
    """`appends` appends of random (a with 1% NULLs, b a string, day a date) rows, no key property; the whole
    table read back. The multi-column key tests' table (CLUSTER BY (b, day) and the like)."""
    rng = np.random.default_rng(seed)
    for batch in range(appends):
        a = pa.array(rng.integers(0, 1_000_000, rows), mask=rng.random(rows) < 0.01)
        b = [f"s{v:07d}" for v in rng.integers(0, 1_000_000, rows)]
        day = pa.array(rng.integers(0, 3_000, rows).astype("datetime64[D]"), pa.date32())
        write_deltalake(str(path), pa.table({"a": a, "b": b, "day": day, "batch": [batch] * rows}), mode="append")
    return DeltaTable(str(path)).to_pyarrow_table()


SMALL_FILES = ["--set", "clustering.target_rows=3000"]
"""The command line's setting for 3,000-row output files (several outputs from random_pairs' tables)."""


def our_add_actions(path: Path) -> list[dict[str, Any]]:
    """The live add actions (flattened statistics) of the data files recluster wrote."""
    return [
        a
        for a in pa.table(DeltaTable(str(path)).get_add_actions(flatten=True)).to_pylist()
        if parse_data_file_name(a["path"])
    ]


def log_actions_after(path: Path, version: int) -> list[dict[str, Any]]:
    """Every action of the commits after `version`, read from the log's JSON files."""
    actions = []
    for commit in sorted((path / "_delta_log").glob("*.json")):
        if int(commit.name[:20]) > version:
            actions += [json.loads(line) for line in commit.read_text().splitlines() if line.strip()]
    return actions


def recluster_commits(table: Path) -> int:
    """How many commits of the table recluster wrote."""
    return sum(1 for entry in DeltaTable(str(table)).history() if entry.get("recluster.producer") == "recluster")


# --- event-time appends ---------------------------------------------------------------------------------------

WIDTH = 1_000_000
"""Key width of one append's own time range in the model."""
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
"""The first event time of event_batch's hours."""
WATERMARK_SETTINGS = Settings(
    clustering=ClusteringSettings(target_rows=1_500), selection=SelectionSettings(policy=Policy.ABSORB)
)
"""absorb with 1,500-row outputs: the time-like key tests' rounds."""


def late_batch(rng: np.random.Generator, index: int, rows: int, share: float, lateness: int | None) -> np.ndarray:
    """Rows of append `index`: its own range, `share` of them late by up to `lateness` appends (None: any)."""
    keys = rng.integers(index * WIDTH, (index + 1) * WIDTH, rows)
    late = rng.random(rows) < share
    if index and late.any():
        low = 0 if lateness is None else max(0, (index - lateness) * WIDTH)
        keys[late] = rng.integers(low, index * WIDTH, int(late.sum()))
    return keys


def event_batch(rng: np.random.Generator, index: int, rows: int, lateness: int | None = 3) -> pa.Table:
    """Events of hour `index`, 5% of them late by up to `lateness` hours, plus a payload."""
    seconds = late_batch(rng, index, rows, 0.05, lateness) * 3_600 // WIDTH
    stamps = [START + dt.timedelta(seconds=int(s)) for s in seconds]
    day = [s.date().isoformat() for s in stamps]
    return pa.table({"ts": pa.array(stamps, pa.timestamp("us", tz="UTC")), "day": day, "n": rng.random(rows)})


# --- rounds and the streaming job -----------------------------------------------------------------------------


LEVELS_SETTINGS = Settings(
    clustering=ClusteringSettings(target_rows=6_000, max_tasks_per_round=2),
    selection=SelectionSettings(policy=Policy.LEVELS),
)
"""Small merges, at most two a round, the levels policy: the rounds tests/test_rounds.py checks."""


def no_spark() -> Any:
    """The Spark factory of rounds that must rewrite in the process: asked for a session, the test fails."""
    raise AssertionError("these rounds rewrite in the process: no Spark session")


def run_rounds(
    uri: str | Path,
    spark: Any,
    settings: Settings | None = None,
    cluster_by: Sequence[str] | None = None,
    **options: Any,
) -> ReclusterResult:
    """`recluster run` on the table (final=True: `--final`) with the test session's Spark; spark=None: the merges
    must run in the process."""
    chosen = settings or Settings()
    loader = snapshot_loader(str(uri), chosen, cluster_by)
    factory = no_spark if spark is None else lambda: spark
    return recluster_table(str(uri), loader, settings=chosen, spark_factory=factory, **options)


def job_settings(checkpoint: Path, tables: Sequence[str | Path], policy: Policy = Policy.ABSORB) -> Settings:
    """The streaming job on `tables` from their earliest version: 5,000-row targets, a trigger every 0.2 s."""
    return Settings(
        clustering=ClusteringSettings(target_rows=5_000),
        selection=SelectionSettings(policy=policy),
        stream=StreamSettings(
            checkpoint_location=str(checkpoint), trigger_interval_seconds=0.2, starting_version="earliest"
        ),
        tables=[TableSettings(uri=str(table)) for table in tables],
    )


def maintained_at_once(settings: Settings) -> Settings:
    """`settings` with a table's first maintenance at the job's first tick, not spread over an hour."""
    maintenance = settings.self_optimizing.maintenance.model_copy(update={"first_within_seconds": 0})
    optimizing = settings.self_optimizing.model_copy(update={"maintenance": maintenance})
    return settings.model_copy(update={"self_optimizing": optimizing})


def handler_with_tables(tmp_path: Path, count: int, appends: int = 1) -> ReclusterHandler:
    """The job's handler (no Spark) tracking `count` tables of `appends` timelike appends of 10 rows each, driven
    directly by the tests of the job's scheduled maintenance: a table is first maintained at the first tick."""
    from recluster.engine.handler import ReclusterHandler

    paths = [tmp_path / f"t{index}" for index in range(count)]
    for path in paths:
        for batch in range(appends):
            timelike_append(path, batch, rows=10)
    settings = maintained_at_once(job_settings(tmp_path / "checkpoint", paths))
    handler = ReclusterHandler(settings, settings.tables, spark=None)
    for path in paths:
        handler.tracked[str(path)] = handler.tables.track(str(path), None)
    return handler


def one_file_table(tmp_path: Path) -> tuple[Path, pa.Table, Callable[[str], int]]:
    """A one-file table and `rewrite(name)`: a rewrite of that file into a copy named `name`, planned at the
    table's first version (as every concurrent rewrite of it would be)."""
    from recluster.core.blocks import WrittenFile
    from recluster.delta.commit import RewriteCommit, commit_rewrite

    path = tmp_path / "t"
    data = pa.table({"k": pa.array([3, 1, 2], pa.int64())})
    write_deltalake(str(path), data)
    set_table_properties(path, {CLUSTER_BY_PROPERTY: "k"})
    snapshot = snapshot_loader(str(path), Settings(), None)()
    (block,) = snapshot.blocks
    for name in ("a", "b"):
        (path / f"{name}.parquet").write_bytes((path / block.path).read_bytes())
    stats = {"numRecords": 3, "minValues": {"k": 1}, "maxValues": {"k": 3}, "nullCount": {"k": 0}}

    def rewrite(name: str) -> int:
        output = WrittenFile(f"{name}.parquet", 3, block.bytes, (), stats, 1)
        return commit_rewrite(RewriteCommit(str(path), snapshot.version, (block,), (output,), name), {})

    return path, data, rewrite


@contextlib.contextmanager
def running_job(spark: Any, settings: Settings) -> Iterator[tuple[Any, Any]]:
    """The streaming job (jobs/autorecluster.py) on the test session: its query and handler, stopped gracefully
    on exit."""
    from jobs.autorecluster import start_job, stop_gracefully

    query, handler = start_job(spark, settings, settings.tables)
    try:
        yield query, handler
    finally:
        if query.isActive:
            stop_gracefully(query, handler)


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


QUICK_LOG = "TESTS_QUICK_RUN_LOG"
"""The environment variable naming the file the quick run's stubs of java, chromium, ... (tests/conftest.py) append
each attempt to run them to; unset outside the quick run."""


def quick_run_attempts() -> int:
    """How much the quick run's stubs have logged so far (0 outside the quick run): a change means something tried
    to start a JVM or a service, and a test waiting on it would wait in vain."""
    log = os.environ.get(QUICK_LOG)
    return os.stat(log).st_size if log else 0


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
    attempts = quick_run_attempts()
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the process exited ({process.returncode}) while waiting for {what}")
        if quick_run_attempts() != attempts:
            raise AssertionError(f"waiting for {what}: a JVM or service was asked for in the quick run (--quick)")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


# --- the command line -----------------------------------------------------------------------------------------


Run = subprocess.CompletedProcess[str]


def cli_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment without RECLUSTER_ settings (a developer's own must not leak into a test), plus the suite's
    own (tests/suite_environment.py), plus `env`."""
    inherited = {k: v for k, v in os.environ.items() if not k.upper().startswith("RECLUSTER_")}
    return {**inherited, **SUITE_SETTINGS, **(env or {})}


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


def unexpected_tracebacks(log_text: str, after: str = "") -> list[str]:
    """The exception line of every traceback in a job's log (past the last `after`) but those of a source worker
    that missed Spark's connect-back, which the job logged as `reason=source_start_failed` and started again
    (docs/streaming.md#starting): Spark's late worker prints its own."""
    restarted = "reason=source_start_failed" in log_text
    found = []
    for chunk in log_text.split(after)[-1].split("Traceback (most recent call last):")[1:]:
        raised = next((line for line in chunk.splitlines()[1:] if line and not line[0].isspace()), "")
        if not (restarted and "CANNOT_OPEN_SOCKET" in raised):
            found.append(raised)
    return found


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
    return start_logged(command, log, env)


def start_logged(command: Sequence[str], log: Path, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """`command` (a recluster command line) as a subprocess in its own process group, from the repository root,
    its output appended to `log`."""
    with log.open("ab") as output:
        return subprocess.Popen(
            list(command),
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
    stop_watches([(process, log)])


def stop_watches(processes: Sequence[tuple[subprocess.Popen[bytes], Path]]) -> None:
    """stop_watch of several processes, their graceful stops at once rather than one after another; each must
    exit 0 (one that exited before is not signalled, and fails the same)."""
    for process, _ in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    for process, log in processes:
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
    wait_for(lambda: not any(map(running, pids[1:])), "the killed processes to be gone", timeout=30)


def running(pid: int) -> bool:
    """Whether `pid` is a live process (not gone, not a zombie)."""
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


def http_get(url: str, timeout: float = 10) -> tuple[int, str]:
    """(status, body); (0, error) when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except (urllib.error.URLError, OSError) as error:
        return 0, str(error)


class Batch:
    """A micro-batch as a source hands it to the handler (a DataFrame's collect()), from its rows as dicts."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = [SimpleNamespace(asDict=lambda row=row: row) for row in rows]

    def collect(self) -> list[Any]:
        return self.rows


class Rows(Batch):
    """A micro-batch as the Delta-log trigger hands it to the handler."""

    def __init__(self, commits: list[Any]) -> None:
        fields = [column.split()[0] for column in SCHEMA.split(", ")]
        super().__init__([dict(zip(fields, c.row(), strict=True)) for c in commits])
