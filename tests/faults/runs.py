"""Fault runs: recluster's commands on a table on moto, each through the fault front under a plan of faults, each
followed by the checks of tests/faults/checks.py and a comparison of what the command reported with what the log
gained. Appends are made by delta-rs straight to the server (around the front): their commits are not under test.
Shared by tests/reliability/test_storage_faults.py and bench/storage_faults_bench.py."""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from deltalake import write_deltalake

from recluster.delta.log_writer import set_table_properties
from recluster.settings import CLUSTER_BY_PROPERTY
from tests.faults.checks import TableCheck, check_table
from tests.faults.front import FaultFront
from tests.faults.plan import FaultKind, FaultRule, InjectedFault, Target
from tests.helpers import cli_environment, run_cli, seen_version, start_watch, stop_watch, wait_for
from tests.referee import Referee
from tests.s3_server import S3Server, s3_environment


class Operation(StrEnum):
    FINAL = "final"
    """`recluster run --final`."""
    INCREMENTAL = "incremental"
    """Appends, then `recluster run` (one round)."""
    OPTIMIZE = "optimize"
    """Small appends, then `recluster optimize --type minor`."""
    MAINTAIN = "maintain"
    """`recluster maintain`: orphans, vacuum, a checkpoint, log cleanup."""
    CLEAN = "clean"
    """`recluster clean --safety-age-hours 0`."""
    WATCH = "watch"
    """`recluster watch` while appends land, stopped with SIGTERM once it has seen them."""


COMMANDS_THAT_COMMIT = (Operation.FINAL, Operation.INCREMENTAL, Operation.OPTIMIZE)

CELLS: tuple[tuple[FaultKind, Target, tuple[str, ...]], ...] = (
    (FaultKind.LOST_RESPONSE, Target.COMMIT, ("PUT",)),
    (FaultKind.APPLIED_ERROR, Target.COMMIT, ("PUT",)),
    (FaultKind.RESET, Target.COMMIT, ("PUT",)),
    (FaultKind.SLOW_DOWN, Target.COMMIT, ("PUT",)),
    (FaultKind.SERVER_ERROR, Target.COMMIT, ("GET", "HEAD")),
    (FaultKind.RESET, Target.COMMIT, ("GET", "HEAD")),
    (FaultKind.LOST_RESPONSE, Target.DATA, ("PUT", "POST", "DELETE")),
    (FaultKind.SLOW_DOWN, Target.DATA, ("PUT", "POST")),
    (FaultKind.SERVER_ERROR, Target.DATA, ("GET", "HEAD")),
    (FaultKind.RESET, Target.DATA, ("GET",)),
    (FaultKind.LATENCY, Target.DATA, ("GET", "PUT")),
    (FaultKind.APPLIED_ERROR, Target.CHECKPOINT, ("PUT",)),
    (FaultKind.SERVER_ERROR, Target.CHECKPOINT, ("GET",)),
    (FaultKind.LOST_RESPONSE, Target.LAST_CHECKPOINT, ("PUT",)),
    (FaultKind.SERVER_ERROR, Target.LAST_CHECKPOINT, ("GET",)),
    (FaultKind.RESET, Target.LAST_CHECKPOINT, ("GET",)),
    (FaultKind.SERVER_ERROR, Target.LISTING, ("GET",)),
    (FaultKind.SLOW_DOWN, Target.LISTING, ("GET",)),
    (FaultKind.RESET, Target.LISTING, ("GET",)),
    (FaultKind.LATENCY, Target.LISTING, ("GET",)),
    (FaultKind.SERVER_ERROR, Target.BULK_DELETE, ("POST",)),
    (FaultKind.LOST_RESPONSE, Target.BULK_DELETE, ("POST",)),
)
"""The fault matrix's kinds x targets (with the methods each is aimed at); operations are the third axis."""


def matrix_rules(rate: float, budget: int, prefix: str) -> tuple[FaultRule, ...]:
    """A rule for every cell of the matrix, on the table's prefix."""
    return tuple(
        FaultRule(kind, target, methods, rate=rate, budget=budget, latency_seconds=0.2, prefix=prefix)
        for kind, target, methods in CELLS
    )


def orphaning_rules(prefix: str) -> tuple[FaultRule, ...]:
    """Every commit PUT reset before it reaches the store and every delete of data files answered 500: with
    `ORPHANING_SETTINGS` and no client retries the commit fails and its outputs cannot be deleted (orphans for
    `recluster clean`)."""
    return (
        FaultRule(FaultKind.RESET, Target.COMMIT, ("PUT",), prefix=prefix),
        FaultRule(FaultKind.SERVER_ERROR, Target.DATA, ("DELETE",), prefix=prefix),
        FaultRule(FaultKind.SERVER_ERROR, Target.BULK_DELETE, ("POST",), prefix=prefix),
    )


ORPHANING_SETTINGS = {"commit.max_attempts": 2}


@dataclass(frozen=True, slots=True)
class StepResult:
    """One command under faults: what was injected, what it said, what the log gained, how the table is."""

    operation: Operation
    faults: tuple[InjectedFault, ...]
    exit_code: int
    report: dict[str, Any] | None
    """The command's JSON (None when it ended with an error line instead)."""
    error: str
    """Its stderr when it failed (one line `recluster: error: ...`, by the command line's contract)."""
    landed: int
    """Commits of ours the log gained during the step."""
    check: TableCheck
    seconds: float
    client_retries: int | None
    """object_store's retries the command ran with (None: its default)."""

    def honesty_problem(self) -> str | None:
        """Why the command's exit code or report does not match what the log gained, or its error is not one line
        (warnings logged before it aside), or None."""
        last = (self.error.splitlines() or [""])[-1]
        if self.exit_code and self.report is None and not last.startswith("recluster: error: "):
            return f"exit {self.exit_code} without a report or a one-line error: {last}"
        if "Traceback" in self.error:
            return f"a traceback: {last}"
        if self.operation not in COMMANDS_THAT_COMMIT:
            return None if (self.exit_code == 0) == (self.report is not None) else "exit code and output disagree"
        if self.report is None:
            return None if self.exit_code != 0 else "exit 0 without a report"
        tasks, conflicts, failures = (int(self.report[k]) for k in ("tasks", "conflicts", "failures"))
        if (self.exit_code == 0) != (failures == 0):
            return f"exit {self.exit_code} with {failures} failed commit(s)"
        if tasks > self.landed:
            return f"reported {tasks} commit(s), the log gained {self.landed}"
        if self.landed > tasks:
            was = "conflict" if conflicts else "failure"
            return f"{self.landed - tasks} commit(s) that landed reported as {was} ({conflicts} conflicts)"
        if conflicts:
            return f"{conflicts} conflict(s) reported with no concurrent writer"
        return None


@dataclass
class FaultRun:
    """One table on `s3`, reached by recluster's commands through `front` only."""

    s3: S3Server
    front: FaultFront
    referee: Referee
    work: Path
    seed: int
    client_retries: int | None = None
    """object_store's own retries for delta-rs (storage option max_retries; None: its default, 10): fewer let more
    faults through to recluster's code. obstore's commit PUTs keep the default: it retries a 5xx answer (then
    finds its own object: 412), never a PUT whose answer was lost or whose connection was reset."""
    in_process: bool = False
    """Commands run by `recluster.cli.main` in this process (no interpreter start per command) instead of as
    `python -m recluster.cli` subprocesses; `watch` is always a subprocess."""
    rows_per_append: int = 1_000
    uri: str = ""
    appended: list[pa.Table] = field(default_factory=list)
    steps: list[StepResult] = field(default_factory=list)
    task_ids: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.uri = self.uri or f"s3://{self.s3.bucket}/faults-{self.seed}"  # a name the seed fixes, as its faults
        self.rng = np.random.default_rng(self.seed)

    @property
    def prefix(self) -> str:
        return self.uri.removeprefix(f"s3://{self.s3.bucket}/")

    def append(self, batches: int = 1, rows: int | None = None) -> None:
        """delta-rs appends straight to the server; the first creates the table (CLUSTER BY k, no retention)."""
        for _ in range(batches):
            count = rows or self.rows_per_append
            keys = self.rng.integers(0, 10**9, count)
            data = pa.table(
                {
                    "k": pa.array(keys, pa.int64()),
                    "batch": pa.array([len(self.appended)] * count, pa.int32()),
                    "s": pa.array([f"v{x % 97}" for x in keys.tolist()]),
                }
            )
            created = bool(self.appended)
            retention = {"delta.deletedFileRetentionDuration": "interval 0 hours"}
            retention["delta.logRetentionDuration"] = "interval 0 seconds"
            write_deltalake(
                self.uri,
                data,
                mode="append",
                storage_options=self.s3.options(),
                configuration=None if created else retention,
            )
            if not created:
                set_table_properties(self.uri, {CLUSTER_BY_PROPERTY: "k"}, self.s3.options())
            self.appended.append(data)

    def environment(self) -> dict[str, str]:
        """The AWS variables of the front's endpoint, and object_store's retries for delta-rs."""
        via = s3_environment(self.s3.through(self.front.endpoint))
        if self.client_retries is None:
            return via
        return {**via, "RECLUSTER_STORAGE_OPTIONS__MAX_RETRIES": str(self.client_retries)}

    def settings(self, overrides: Mapping[str, object]) -> list[str]:
        values = {
            "clustering.target_rows": 3 * self.rows_per_append,
            "clustering.max_tasks_per_round": 2,
            "self_optimizing.history_location": self.work / "history",
            "self_optimizing.maintenance.retention_hours": 0,
            "self_optimizing.maintenance.checkpoint_every_versions": 1,
            "self_optimizing.maintenance.orphan_safety_age_seconds": 0,
            "commit.backoff_seconds": 0.1,
            **overrides,
        }
        return [arg for name, value in values.items() for arg in ("--set", f"{name}={value}")]

    def command(self, operation: Operation) -> list[str]:
        return {
            Operation.FINAL: ["run", self.uri, "--final"],
            Operation.INCREMENTAL: ["run", self.uri],
            Operation.OPTIMIZE: ["optimize", self.uri, "--type", "minor"],
            Operation.MAINTAIN: ["maintain", self.uri],
            Operation.CLEAN: ["clean", self.uri, "--safety-age-hours", "0"],
        }[operation]

    def step(
        self,
        operation: Operation,
        rules: Sequence[FaultRule],
        *,
        watch_appends: int = 3,
        watch_until: str = "",
        overrides: Mapping[str, object] | None = None,
    ) -> StepResult:
        """Prepare the table for `operation`, run it under `rules` (with settings `overrides`), then check the table
        with no faults. `watch` runs until it has seen `watch_appends` appends and, if given, logged `watch_until`."""
        if operation is Operation.INCREMENTAL:
            self.append(2)
        elif operation is Operation.OPTIMIZE:
            self.append(3, rows=self.rows_per_append // 10)
        already = len(self.front.faults())
        self.front.plan(self.seed * 1_000 + len(self.steps), *rules)
        started = time.monotonic()
        try:
            if operation is Operation.WATCH:
                code, report, error = self._watch(watch_appends, watch_until)
            else:
                arguments = [*self.command(operation), "--json", *self.settings(overrides or {})]
                code, stdout, error = self._cli(arguments)
                report = json.loads(stdout) if code == 0 or stdout.startswith("{") else None
        finally:
            self.front.plan(self.seed)
        seconds = time.monotonic() - started
        faults = tuple(self.front.faults()[already:])
        check = check_table(self.s3, self.uri, self.referee, pa.concat_tables(self.appended), self._copy())
        landed = len(check.task_ids - self.task_ids)
        self.task_ids |= check.task_ids
        error = error if code else ""
        result = StepResult(operation, faults, code, report, error, landed, check, seconds, self.client_retries)
        self.steps.append(result)
        return result

    def _cli(self, arguments: list[str]) -> tuple[int, str, str]:
        """`recluster ARGUMENTS` through the front: exit code, stdout, stderr (stripped). In this process with
        `in_process` (the exit code is what `main` returns; an exception it lets through is a traceback and 1)."""
        if not self.in_process:
            done = run_cli(*arguments, env=self.environment())
            return done.returncode, done.stdout, done.stderr.strip()
        from recluster.cli import main

        out, err = io.StringIO(), io.StringIO()
        with environment(cli_environment(self.environment())), redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(arguments)
            except Exception:
                traceback.print_exc(file=err)
                code = 1
        return code, out.getvalue(), err.getvalue().strip()

    def _copy(self) -> Path:
        return self.work / f"copy-{len(self.steps)}"

    def _watch(self, appends: int, until: str) -> tuple[int, dict[str, Any] | None, str]:
        """`recluster watch` through the front while `appends` appends land; SIGTERM once it has seen the last (and
        logged `until`)."""
        log = self.work / f"watch-{len(self.steps)}.log"
        checkpoint = self.work / "watch-checkpoint"
        process = start_watch(
            [self.uri],  # type: ignore[list-item]  # a URI, written into --table as given
            checkpoint,
            log,
            trigger_seconds=0.5,
            target_rows=3 * self.rows_per_append,
            env={
                **self.environment(),
                "RECLUSTER_SELF_OPTIMIZING__HISTORY_LOCATION": str(self.work / "history"),
                "RECLUSTER_STREAM__TABLE_RETRY_SECONDS": "1",  # a table whose load failed is tried again soon
            },
        )
        error = ""
        try:
            for _ in range(appends):
                self.append()
                version = self._version()
                wait_for(partial(seen_at_least, log, version), f"the job to see version {version}", process)
            if until:
                wait_for(partial(logged, log, until), f"the job to log {until!r}", process)
        except AssertionError as failed:  # it exited, or never caught up: the step failed, the checks still run
            error = str(failed)
        if process.poll() is None:
            with contextlib.suppress(AssertionError):  # a non-zero exit is recorded, not raised
                stop_watch(process, log)
        code = process.wait()
        if code and not error:
            error = (log.read_text(errors="replace").strip().splitlines() or [""])[-1]
        return code, ({"log": str(log)} if code == 0 and not error else None), error

    def _version(self) -> int:
        from deltalake import DeltaTable

        return int(DeltaTable(self.uri, storage_options=self.s3.options()).version())


def seen_at_least(log: Path, version: int) -> bool:
    return seen_version(log) >= version


def logged(log: Path, text: str) -> bool:
    return log.exists() and text in log.read_text(errors="replace")


@contextlib.contextmanager
def environment(variables: Mapping[str, str]) -> Iterator[None]:
    """os.environ is exactly `variables` inside, as it was outside."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(variables)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
