"""Committing a rewrite safely (DESIGN §6), written into the Delta log by recluster itself.

and a table-property change. delta-rs cannot write either exactly: its RemoveAction has no deletion vector (so a
file with one stayed live), it URL-encodes paths a second time, and its property change adds reader features.

A commit is the JSON file `_delta_log/<version>.json`, created only if absent (storage.put_if_absent): every
commit after the version we read is checked first, then ours is created at the next version; if another writer
took that version in between, it is checked in turn and we try again on top of it. No window is left in which
a rewrite of the same inputs can commit unseen.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import unquote

from deltalake.exceptions import DeltaError

from recluster.core.blocks import Block, WrittenFile
from recluster.core.errors import TableError
from recluster.core.selection.plan import MergeTask
from recluster.delta.log import PRODUCER, PRODUCER_KEY, read_commits
from recluster.delta.replay import LogReplayError, replay_log
from recluster.delta.snapshot import open_table
from recluster.delta.storage import (
    commit_safety_problem,
    normalize_uri,
    put_if_absent,
    read_log_actions,
    remove_stored_files,
)
from recluster.settings import CommitSettings


class CommitConflict(Exception):
    """A concurrent transaction changed files this rewrite read: nothing was committed."""


def check_writable(table_uri: str) -> None:
    """Fail with one clear line, before any merge starts, when a local table location cannot be written."""
    if "://" in table_uri:
        return  # object stores: a merge that cannot write fails its task and leaves the table as it was
    probe = os.path.join(table_uri, f".recluster-write-probe-{os.getpid()}")
    try:
        with open(probe, "w", encoding="utf-8") as handle:
            handle.write("ok")
        os.remove(probe)
    except OSError as error:
        raise TableError(f"table location {table_uri} is not writable: {error.strerror}") from None


def delete_files(table_uri: str, paths: Sequence[str], storage_options: Mapping[str, str] | None) -> None:
    """Delete files a rewrite wrote but could not commit (they are referenced by no version)."""
    remove_stored_files(table_uri, [unquote(p) for p in paths], storage_options)


ENGINE_INFO = "recluster/0.1.0"


MAX_REWRITE_ATTEMPTS = 20


IN_COMMIT_TIMESTAMPS = "delta.enableInCommitTimestamps"


def _now_ms() -> int:
    return int(time.time() * 1000)


def commit_info(
    table_uri: str,
    storage_options: Mapping[str, str] | None,
    previous: int,
    operation: str,
    parameters: Mapping[str, Any],
    extra: Mapping[str, Any],
    configuration: Mapping[str, str],
) -> dict[str, Any]:
    """The commitInfo action (first in the commit, as in-commit timestamps require)."""
    now = _now_ms()
    info: dict[str, Any] = {}
    if configuration.get(IN_COMMIT_TIMESTAMPS, "false").lower() == "true" and previous >= 0:
        before: dict[str, Any] = next(
            (a["commitInfo"] for a in read_log_actions(table_uri, previous, storage_options) if "commitInfo" in a), {}
        )
        now = max(now, int(before.get("inCommitTimestamp", 0)) + 1)
        info["inCommitTimestamp"] = now
    info.update(
        {
            "timestamp": now,
            "operation": operation,
            "operationParameters": {k: json.dumps(v) if not isinstance(v, str) else v for k, v in parameters.items()},
            "readVersion": previous,
            "isolationLevel": "SnapshotIsolation",
            "isBlindAppend": False,
            "engineInfo": ENGINE_INFO,
            **extra,
        }
    )
    return {"commitInfo": info}


def write_commit(
    table_uri: str, storage_options: Mapping[str, str] | None, version: int, actions: Sequence[Mapping[str, Any]]
) -> bool:
    """Create commit `version` with `actions`; False when another writer created it first."""
    data = "".join(json.dumps(a, separators=(",", ":"), default=str) + "\n" for a in actions).encode("utf-8")
    return put_if_absent(normalize_uri(table_uri), f"_delta_log/{version:020d}.json", data, storage_options)


def rewrite_actions(removed: Sequence[Block], added: Sequence[WrittenFile], now: int) -> list[dict[str, Any]]:
    """Removes that match their adds exactly (path as logged, deletion vector) and the outputs' adds."""
    actions: list[dict[str, Any]] = []
    for block in removed:
        remove: dict[str, Any] = {
            "path": block.path,
            "deletionTimestamp": now,
            "dataChange": False,
            "extendedFileMetadata": True,
            "partitionValues": dict(block.partition),
            "size": block.bytes,
        }
        if block.deletion_vector is not None:
            remove["deletionVector"] = block.deletion_vector.to_log()
        actions.append({"remove": remove})
    actions.extend(
        {
            "add": {
                "path": f.path,
                "partitionValues": dict(f.partition),
                "size": f.bytes,
                "modificationTime": now,
                "dataChange": False,
                "stats": json.dumps(f.stats, default=str),
            }
        }
        for f in added
    )
    return actions


def rewrite_conflict(
    table_uri: str, storage_options: Mapping[str, str] | None, paths: Sequence[str], after: int, through: int
) -> str | None:
    """Why a rewrite of `paths` may not commit over versions after..through, or None: one of them removed an
    input file (a delete, an update, a new deletion vector, another rewrite), changed the metadata or protocol,
    or is no longer in the log."""
    inputs = {unquote(p) for p in paths}
    for entry in read_commits(table_uri, after + 1, through, storage_options):
        if entry.is_gap:
            return f"commit {entry.version} is no longer in the log"
        if entry.metadata_changed:
            return f"commit {entry.version} changed the table metadata or protocol"
        removed = inputs.intersection(unquote(r) for r in entry.removes)
        if removed:
            return f"commit {entry.version} removed input {sorted(removed)[0]}"
    return None


def commit_rewrite(
    table_uri: str,
    storage_options: Mapping[str, str] | None,
    read_version: int,
    removed: Sequence[Block],
    added: Sequence[WrittenFile],
    metadata: Mapping[str, str],
) -> int:
    """One transaction: remove the inputs, add the outputs, all with dataChange=false; returns its version.

    Raises CommitConflict when a commit after `read_version` removed an input (a delete, an update, a compaction,
    another recluster instance) or changed the metadata. A concurrent append goes through.
    """
    now = _now_ms()
    body = rewrite_actions(removed, added, now)
    paths = [b.path for b in removed]
    parameters = {"strategy": "recluster", "filesRemoved": len(removed), "filesAdded": len(added)}
    checked = read_version
    for _ in range(MAX_REWRITE_ATTEMPTS):
        table = open_table(table_uri, storage_options)
        latest = table.version()
        reason = rewrite_conflict(table_uri, storage_options, paths, checked, latest)
        if reason:
            raise CommitConflict(reason)
        checked = latest
        configuration = table.metadata().configuration
        info = commit_info(table_uri, storage_options, checked, "OPTIMIZE", parameters, metadata, configuration)
        if write_commit(table_uri, storage_options, checked + 1, [info, *body]):
            return checked + 1
    raise CommitConflict(f"{MAX_REWRITE_ATTEMPTS} concurrent commits were created first")


def committed_with(
    table_uri: str, storage_options: Mapping[str, str] | None, metadata: Mapping[str, str], since: int
) -> int | None:
    """The version after `since` whose commitInfo holds all of `metadata`, if any (retry idempotency)."""
    latest = open_table(table_uri, storage_options)
    history = latest.history(limit=max(latest.version() - since, 0) + 1)
    return next(
        (
            int(entry["version"])
            for entry in history
            if entry.get("version", -1) > since and all(entry.get(k) == v for k, v in metadata.items())
        ),
        None,
    )


def set_table_properties(
    table_uri: str | os.PathLike[str], properties: Mapping[str, str], storage_options: Mapping[str, str] | None = None
) -> int:
    """Set table properties (e.g. `recluster.clusterBy`) in one commit of the metaData action alone, exactly as
    logged but for its configuration: the protocol (reader/writer features) never changes. Returns the version."""
    location = normalize_uri(str(table_uri))
    for _ in range(MAX_REWRITE_ATTEMPTS):
        version = open_table(location, storage_options).version()
        try:
            state = replay_log(location, storage_options, version, with_files=False)
        except LogReplayError as error:
            raise TableError(f"cannot set table properties: {error}") from None
        metadata = dict(state.metadata)
        configuration = {**metadata.get("configuration", {}), **properties}
        metadata["configuration"] = configuration
        info = commit_info(
            location, storage_options, version, "SET TBLPROPERTIES", {"properties": dict(properties)}, {}, configuration
        )
        try:
            if write_commit(location, storage_options, version + 1, [info, {"metaData": metadata}]):
                return version + 1
        except OSError as error:
            raise TableError(f"cannot set table properties: {error}") from None
    raise TableError(f"cannot set table properties: {MAX_REWRITE_ATTEMPTS} concurrent commits were created first")


log = logging.getLogger(__name__)


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
