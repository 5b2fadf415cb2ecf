"""Committing a rewrite safely (docs/guarantees.md): rows out equal the live rows in, the commit is a value
(`RewriteCommit`), and the one retry loop of log_writer writes it.

Every attempt checks the commits since the last version checked (a removed input, a new deletion vector on one, a
metadata or protocol change: conflict, nothing committed), then creates the next version only if absent. Another
writer took that version: check it, try on top of it. A commit that carries our task id is ours wherever it is found:
success, never a conflict. Outputs are deleted only once the log shows no version references them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from obstore.exceptions import BaseError

from recluster.core.blocks import Block, WrittenFile
from recluster.core.errors import TableError
from recluster.core.outcomes import CommitOutcome, CommitStatus
from recluster.core.selection.plan import MergeTask
from recluster.delta.file_stats import stats_text
from recluster.delta.log import PRODUCER, PRODUCER_KEY, TASK_ID_KEY, CommitEntry, commits_after
from recluster.delta.log_state import SnapshotLog
from recluster.delta.log_writer import CommitFailed, commit_info, commit_next_version
from recluster.delta.replay import LogState
from recluster.delta.row_tracking import FEATURE as ROW_TRACKING
from recluster.delta.row_tracking import assign_row_ids
from recluster.delta.storage import commit_safety_problem, remove_stored_files
from recluster.delta.storage_faults import describe_storage_error
from recluster.settings import CommitSettings

LIQUID_PROVIDER = "liquid"
"""The `clusteringProvider` Delta liquid clustering gives the files it clustered (Delta Spark's OPTIMIZE writes it)."""


class CommitConflict(Exception):
    """A concurrent transaction changed files this rewrite read: nothing was committed."""


@dataclass(frozen=True, slots=True)
class RewriteCommit:
    """One rewrite, as a value: the inputs it removes, the outputs it adds, the version it was planned on, and the
    commitInfo it carries (with its task id: the transaction id a retry looks for)."""

    table_uri: str
    read_version: int
    removed: tuple[Block, ...]
    added: tuple[WrittenFile, ...]
    task_id: str
    metadata: Mapping[str, str] = field(default_factory=dict)
    clustering_provider: str | None = None
    """Set on every add when the outputs are clustered by the table's own clustering columns (Delta liquid)."""
    log: SnapshotLog | None = field(default=None, repr=False, compare=False)
    """The log at `read_version` (the snapshot's, replayed once for all its tasks); None: one of its own."""

    def actions(self, now: int) -> list[dict[str, Any]]:
        """Removes that match their adds exactly (path as logged, deletion vector) and the outputs' adds."""
        removes = [{"remove": _remove(block, now)} for block in self.removed]
        adds = [
            {
                "add": {
                    "path": f.path,
                    "partitionValues": dict(f.partition),
                    "size": f.bytes,
                    "modificationTime": now,
                    "dataChange": False,
                    "stats": stats_text(f.stats),
                }
                | ({"clusteringProvider": self.clustering_provider} if self.clustering_provider else {})
            }
            for f in self.added
        ]
        return [*removes, *adds]

    def __str__(self) -> str:
        return (
            f"rewrite table={self.table_uri} read_version={self.read_version} task={self.task_id} "
            f"remove={len(self.removed)} add={len(self.added)}"
        )


def _remove(block: Block, now: int) -> dict[str, Any]:
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
    return remove


def rewrite_conflict(paths: Sequence[str], commits: Sequence[CommitEntry]) -> str | None:
    """Why a rewrite of `paths` may not commit over `commits` (those since the version it read), or None: one of
    them removed an input file (a delete, an update, a new deletion vector, another rewrite), changed the metadata
    or protocol, or is no longer in the log."""
    inputs = {unquote(p) for p in paths}
    for entry in commits:
        if entry.is_gap:
            return f"commit {entry.version} is no longer in the log"
        if entry.metadata_changed:
            return f"commit {entry.version} changed the table metadata or protocol"
        removed = inputs.intersection(unquote(r) for r in entry.removes)
        if removed:
            return f"commit {entry.version} removed input {sorted(removed)[0]}"
    return None


def commit_rewrite(
    commit: RewriteCommit, storage_options: Mapping[str, str] | None, settings: CommitSettings | None = None
) -> int:
    """Write `commit` into the log; returns its version. Every attempt first checks the commits since the last
    version checked: CommitConflict when one removed an input or changed the metadata (nothing committed), a
    concurrent append goes through. CommitFailed when attempts or the deadline ran out."""
    paths = [b.path for b in commit.removed]
    parameters = {"strategy": "recluster", "filesRemoved": len(commit.removed), "filesAdded": len(commit.added)}
    metadata = {**commit.metadata, TASK_ID_KEY: commit.task_id}
    log = commit.log or SnapshotLog(commit.table_uri, storage_options, commit.read_version)
    state: list[LogState] = []
    """The log at the version read, advanced by the commits checked since: no metaData or protocol among them (a
    conflict), so its configuration and features are the latest; its domains move on (docs/architecture.md)."""

    def prepare(new: Sequence[CommitEntry], latest: int) -> list[dict[str, Any]]:
        reason = rewrite_conflict(paths, new)
        if reason:
            raise CommitConflict(reason)
        state[:] = [(state[0] if state else log.state()).advanced(new)]
        configuration = state[0].metadata.get("configuration", {})
        info = commit_info(commit.table_uri, storage_options, latest, "OPTIMIZE", parameters, metadata, configuration)
        actions = commit.actions(int(time.time() * 1000))
        if ROW_TRACKING in state[0].protocol.get("writerFeatures", []):  # fresh ids above the latest high water mark
            actions += assign_row_ids([a for a in actions if "add" in a], state[0].domains, latest + 1)
        return [info, *actions]

    return commit_next_version(
        commit.table_uri,
        storage_options,
        prepare,
        settings or CommitSettings(),
        read_version=commit.read_version,
        task_id=commit.task_id,
    )


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
    clustering_provider: str | None = None,
    log: SnapshotLog | None = None,
) -> CommitOutcome:
    """Commit one task's outputs, or delete them and say why. Never loses or duplicates a row. `log`: the
    snapshot's at `read_version` (shared by its tasks)."""
    files = tuple(written)
    rows_out = sum(f.rows for f in files)
    unsafe = commit_safety_problem(table_uri, storage_options)
    failure = None
    if unsafe and not settings.allow_unsafe_single_writer:
        failure = f"unsafe_storage: {unsafe}"
    elif rows_out != task.live_rows:
        failure = f"row_count_mismatch in={task.live_rows} out={rows_out}"
    if failure:
        delete_files(table_uri, [f.path for f in files], storage_options)
        return CommitOutcome(task, CommitStatus.FAILED, None, files, failure)
    metadata = commit_metadata(task, run_id=run_id, task_id=task_id, read_version=read_version)
    commit = RewriteCommit(table_uri, read_version, task.files, files, task_id, metadata, clustering_provider, log)
    try:
        return CommitOutcome(task, CommitStatus.COMMITTED, commit_rewrite(commit, storage_options, settings), files)
    except CommitConflict as conflict:
        status, reason = CommitStatus.CONFLICT, f"concurrent_change: {conflict}"
    except CommitFailed as error:
        status, reason = CommitStatus.FAILED, f"commit_failed: {error}"
    try:
        landed = own_commit_after(commit, storage_options)
    except (OSError, BaseError, TableError) as error:  # unknown whether it landed: keep the outputs for `clean`
        problem = describe_storage_error(error)
        return CommitOutcome(task, CommitStatus.FAILED, None, files, f"{reason}; outputs kept: {problem}")
    if landed is not None:
        return CommitOutcome(task, CommitStatus.COMMITTED, landed, files)
    delete_files(table_uri, [f.path for f in files], storage_options)
    return CommitOutcome(task, status, None, files, reason)


def own_commit_after(commit: RewriteCommit, storage_options: Mapping[str, str] | None) -> int | None:
    """The version after the commit's read version that carries its task id, or that references one of its
    outputs (which only it could have added): there the commit landed after all. None when the log, read whole
    from the read version on, holds neither; raises when it cannot be read whole (a gap included)."""
    outputs = {unquote(f.path) for f in commit.added}
    for entry in commits_after(commit.table_uri, commit.read_version, storage_options):
        if entry.is_gap:
            raise TableError(f"commit {entry.version} is no longer in the log")
        if entry.task_id == commit.task_id or outputs.intersection(unquote(a["path"]) for a in entry.adds):
            return entry.version
    return None


def delete_files(table_uri: str, paths: Sequence[str], storage_options: Mapping[str, str] | None) -> None:
    """Delete files a rewrite wrote but could not commit (they are referenced by no version)."""
    remove_stored_files(table_uri, [unquote(p) for p in paths], storage_options)
