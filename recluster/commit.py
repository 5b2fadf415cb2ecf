"""Committing a rewrite safely (DESIGN §6): rows out equal rows in, one atomic transaction anchored to
the version the plan read, bounded retries that can never apply the same rewrite twice.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from deltalake.exceptions import DeltaError

from recluster.log_commit import commit_rewrite, committed_with
from recluster.selection import MergeTask
from recluster.settings import CommitSettings
from recluster.table import CommitConflict, WrittenFile, commit_safety_problem, delete_files

log = logging.getLogger(__name__)

PRODUCER = "recluster"
PRODUCER_KEY = "recluster.producer"
TASK_ID_KEY = "recluster.taskId"


class CommitStatus(StrEnum):
    COMMITTED = "committed"
    CONFLICT = "conflict"
    """A concurrent delete/update touched an input: outputs deleted, the next round re-plans."""
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class CommitOutcome:
    task: MergeTask
    status: CommitStatus
    version: int | None
    written: tuple[WrittenFile, ...]
    reason: str = ""

    def __str__(self) -> str:
        version = f" version={self.version}" if self.version is not None else ""
        reason = f" reason={self.reason}" if self.reason else ""
        files = f"files_in={len(self.task.files)} files_out={len(self.written)}"
        return f"commit status={self.status}{version} {files}{reason}"


def commit_metadata(task: MergeTask, *, run_id: str, task_id: str, read_version: int) -> dict[str, str]:
    """commitInfo of our rewrites: triggers recognise (and skip) their own commits by the producer tag."""
    return {
        PRODUCER_KEY: PRODUCER,
        "recluster.runId": run_id,
        TASK_ID_KEY: task_id,
        "recluster.readVersion": str(read_version),
        "recluster.levels": f"{task.level}->{task.output_level}",
        "recluster.reason": str(task.reason),
    }


def commit_task(
    task: MergeTask,
    written: Sequence[WrittenFile],
    *,
    table_uri: str,
    storage_options: Mapping[str, str] | None,
    read_version: int,
    run_id: str,
    task_id: str,
    settings: CommitSettings,
) -> CommitOutcome:
    """Commit one task's outputs, or delete them and say why. Never loses or duplicates a row."""
    files = tuple(written)
    rows_out = sum(f.rows for f in files)
    unsafe = commit_safety_problem(table_uri, storage_options)
    if unsafe and not settings.allow_unsafe_single_writer:
        delete_files(table_uri, [f.path for f in files], storage_options)
        return CommitOutcome(task, CommitStatus.FAILED, None, files, f"unsafe_storage: {unsafe}")
    if rows_out != task.live_rows:
        delete_files(table_uri, [f.path for f in files], storage_options)
        return CommitOutcome(
            task, CommitStatus.FAILED, None, files, f"row_count_mismatch in={task.live_rows} out={rows_out}"
        )
    metadata = commit_metadata(task, run_id=run_id, task_id=task_id, read_version=read_version)
    delay = settings.backoff_seconds
    for attempt in range(1, settings.max_attempts + 1):
        try:
            version = commit_rewrite(table_uri, storage_options, read_version, task.files, files, metadata)
            return CommitOutcome(task, CommitStatus.COMMITTED, version, files)
        except CommitConflict as conflict:
            delete_files(table_uri, [f.path for f in files], storage_options)
            return CommitOutcome(task, CommitStatus.CONFLICT, None, files, f"concurrent_change: {conflict}")
        except (DeltaError, OSError) as error:
            earlier = committed_with(table_uri, storage_options, {TASK_ID_KEY: task_id}, read_version)
            if earlier is not None:
                return CommitOutcome(task, CommitStatus.COMMITTED, earlier, files, "committed_before_error")
            log.warning("commit attempt=%d task=%s error=%s", attempt, task_id, error)
            if attempt < settings.max_attempts:
                time.sleep(min(delay, settings.max_backoff_seconds) * (0.5 + random.random()))
                delay *= 2
    delete_files(table_uri, [f.path for f in files], storage_options)
    return CommitOutcome(task, CommitStatus.FAILED, None, files, "commit_attempts_exhausted")


@dataclass
class OutcomeTotals:
    """What a set of commit outcomes did: the counters of `run --json` and of the metrics record."""

    tasks: int = 0
    files_removed: int = 0
    files_added: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    rows_rewritten: int = 0
    conflicts: int = 0
    failures: int = 0

    def add(self, outcome: CommitOutcome) -> None:
        if outcome.status is CommitStatus.COMMITTED:
            self.tasks += 1
            self.files_removed += len(outcome.task.files)
            self.files_added += len(outcome.written)
            self.bytes_read += outcome.task.bytes
            self.bytes_written += sum(f.bytes for f in outcome.written)
            self.rows_rewritten += outcome.task.rows
        elif outcome.status is CommitStatus.CONFLICT:
            self.conflicts += 1
        else:
            self.failures += 1
