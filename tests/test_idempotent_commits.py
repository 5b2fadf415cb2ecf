"""Idempotent commits: a commit whose PUT landed but whose answer was lost is ours wherever it is found (never a
conflict), outputs a committed version references are never deleted, and storage errors are retried or not by kind.

The faults are injected into the one function that creates a log version (`log_writer.write_commit`): it applies
the PUT and then reports what a client whose response was lost reports ("already exists" from its own retry, or a
connection error). tests/reliability/test_storage_faults.py does the same through a faulty S3 front.
"""

from __future__ import annotations

import errno
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from deltalake import DeltaTable
from obstore.exceptions import GenericError, PermissionDeniedError

from recluster.core.errors import StorageError, TableError
from recluster.delta import log_writer
from recluster.delta.log import TASK_ID_KEY
from recluster.delta.storage_faults import StorageFault, storage_fault
from tests.helpers import append_random, main_json, row_multiset, run_main

SMALL_FILES = ("--set", "clustering.target_rows=400", "--set", "commit.backoff_seconds=0.01")


@pytest.fixture
def table(tmp_path: Path) -> Path:
    location = tmp_path / "t"
    rng = np.random.default_rng(5)
    for batch in range(4):
        append_random(location, rng, batch, rows=500)
    return location


def _rows(location: Path) -> tuple[int, str]:
    return row_multiset(DeltaTable(str(location)).to_pyarrow_table())


def _live_files_exist(location: Path) -> list[str]:
    """Paths the latest snapshot references that are not on disk (must be none)."""
    table = DeltaTable(str(location))
    return [p for p in table.file_uris() if not Path(p.removeprefix("file://")).exists()]


def _data_files(location: Path) -> set[str]:
    return {str(p.relative_to(location)) for p in location.rglob("*.parquet") if "_delta_log" not in p.parts}


def _inject(monkeypatch: pytest.MonkeyPatch, after_put: Callable[[int], Any], times: int = 1) -> list[int]:
    """Make the next `times` commit writes apply their PUT and then answer `after_put(version)` (returned, or
    raised when it is an exception); the versions they wrote are returned in the list."""
    real = log_writer.write_commit
    faulted: list[int] = []

    def write(uri: str, options: Any, version: int, actions: Any) -> bool:
        created = real(uri, options, version, actions)
        if not created or len(faulted) >= times:
            return created
        faulted.append(version)
        answer = after_put(version)
        if isinstance(answer, BaseException):
            raise answer
        return bool(answer)

    monkeypatch.setattr(log_writer, "write_commit", write)
    return faulted


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(lambda v: False, id="already-exists"),
        pytest.param(lambda v: ConnectionResetError(errno.ECONNRESET, "connection reset by peer"), id="reset"),
        pytest.param(lambda v: GenericError(f"Generic S3 error: PUT {v}.json: timed out"), id="obstore"),
    ],
)
def test_a_commit_whose_answer_was_lost_is_reported_as_made_and_the_table_stays_whole(
    table: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], answer: Callable[[int], Any]
) -> None:
    before = _rows(table)
    faulted = _inject(monkeypatch, answer)
    report = main_json(capsys, "run", table, "--final", *SMALL_FILES)
    assert faulted, "no fault was injected"
    assert report["conflicts"] == 0 and report["failures"] == 0
    assert report["tasks"] >= 1 and report["after"]["average_depth"] == 1.0
    assert _rows(table) == before
    assert _live_files_exist(table) == []
    history = DeltaTable(str(table)).history()
    ours = [h for h in history if h.get("recluster.taskId")]
    assert len(ours) == report["tasks"]  # the lost-answer version counted once, not committed twice
    assert len({h["recluster.taskId"] for h in ours}) == len(ours)


def test_a_permanent_storage_error_fails_at_once_and_leaves_no_orphan(
    table: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before, files = _rows(table), _data_files(table)
    calls: list[int] = []

    def refuse(uri: str, options: Any, version: int, actions: Any) -> bool:
        calls.append(version)
        raise PermissionDeniedError("AccessDenied: not allowed to write the log")

    monkeypatch.setattr(log_writer, "write_commit", refuse)
    code, out, err = run_main(capsys, "run", table, "--final", "--json", *SMALL_FILES)
    report = json.loads(out)
    assert report["failures"] >= 1 and report["tasks"] == 0 and code != 0, (code, err)
    assert len(calls) == report["failures"]  # one attempt each: retrying cannot help
    assert _rows(table) == before
    assert _data_files(table) == files  # the outputs were referenced by no version: deleted


def test_outputs_stay_when_it_cannot_be_told_whether_the_commit_landed(
    table: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every attempt's PUT lands and its answer is lost, and the log cannot be read afterwards: the outputs
    may be referenced, so they are kept (for `recluster clean`), and the run says it failed."""
    before, files = _rows(table), _data_files(table)
    _inject(monkeypatch, lambda v: ConnectionResetError(errno.ECONNRESET, "reset"), times=1)

    def unreadable(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EIO, "Generic S3 error: 500 Internal Server Error")

    monkeypatch.setattr(log_writer, "own_commit", lambda *a, **k: unreadable())
    monkeypatch.setattr("recluster.delta.commit.own_commit_after", unreadable)
    code, out, _ = run_main(capsys, "run", table, "--final", "--json", *SMALL_FILES, "--set", "commit.max_attempts=2")
    report = json.loads(out)
    assert report["failures"] == 1 and report["tasks"] == 0 and code != 0, code
    dt = DeltaTable(str(table))
    assert _live_files_exist(table) == []  # the version that landed names only files that are there
    assert row_multiset(dt.to_pyarrow_table()) == before
    referenced = {str(Path(p.removeprefix("file://")).relative_to(table)) for p in dt.file_uris()}
    written = _data_files(table) - files
    assert written and written <= referenced


@pytest.mark.parametrize(
    ("error", "fault"),
    [
        (ConnectionResetError(errno.ECONNRESET, "reset"), StorageFault.TRANSIENT),
        (TimeoutError("timed out"), StorageFault.TRANSIENT),
        (OSError(errno.EIO, "Generic S3 error: 503 SlowDown"), StorageFault.TRANSIENT),
        (GenericError("Generic S3 error: error sending request"), StorageFault.TRANSIENT),
        (PermissionError(errno.EACCES, "denied"), StorageFault.PERMANENT),
        (OSError(errno.EROFS, "read-only file system"), StorageFault.PERMANENT),
        (PermissionDeniedError("denied"), StorageFault.PERMANENT),
        (OSError("<Code>NoSuchBucket</Code><Message>The bucket does not exist</Message>"), StorageFault.PERMANENT),
        (OSError("<Code>InvalidAccessKeyId</Code><Message>bad key</Message>"), StorageFault.PERMANENT),
        (ValueError("a bug"), None),
        (KeyError("x"), None),
    ],
)
def test_storage_errors_are_transient_or_permanent_by_kind(error: BaseException, fault: StorageFault | None) -> None:
    assert storage_fault(error) is fault


def test_the_commit_loop_retries_transient_errors_and_stops_at_permanent_ones(table: Path) -> None:
    settings = log_writer.CommitSettings(backoff_seconds=0.001, max_attempts=5)
    attempts: list[int] = []

    def flaky(errors: Iterator[BaseException]) -> log_writer.Prepare:
        def prepare(dt: DeltaTable, latest: int) -> list[dict[str, Any]]:
            attempts.append(latest)
            failure = next(errors, None)
            if failure is not None:
                raise failure
            return [{"commitInfo": {"operation": "TEST", TASK_ID_KEY: "t-1"}}]

        return prepare

    transient = iter([GenericError("timed out"), StorageError("cannot open: 500", transient=True)])
    version = log_writer.commit_next_version(str(table), None, flaky(transient), settings, task_id="t-1")
    assert version == DeltaTable(str(table)).version() and len(attempts) == 3
    attempts.clear()
    with pytest.raises(log_writer.CommitFailed):
        permanent = iter([StorageError("cannot open: AccessDenied", transient=False)])
        log_writer.commit_next_version(str(table), None, flaky(permanent), settings)
    assert len(attempts) == 1
    with pytest.raises(ValueError):  # not a storage error: never swallowed by the retry loop
        log_writer.commit_next_version(str(table), None, flaky(iter([ValueError("bug")])), settings)
    assert isinstance(StorageError("x", transient=True), TableError)
