"""Writing the Delta log ourselves: a commit is the JSON file `_delta_log/<version>.json`, created only if absent
(storage.put_if_absent), so of two writers of one version exactly one wins. delta-rs cannot write our commits
exactly: its RemoveAction has no deletion vector, it URL-encodes logged paths a second time, and its property change
adds reader and writer features.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from obstore.exceptions import BaseError

from recluster.core.errors import StorageError, TableError
from recluster.delta.log import CommitEntry, commits_after, read_commits
from recluster.delta.replay import LogState, replay_log
from recluster.delta.snapshot import open_table
from recluster.delta.storage import normalize_uri, put_if_absent, read_log_actions
from recluster.delta.storage_faults import StorageFault, describe_storage_error, storage_fault
from recluster.settings import CommitSettings

ENGINE_INFO = "recluster/0.1.0"
IN_COMMIT_TIMESTAMPS = "delta.enableInCommitTimestamps"
log = logging.getLogger(__name__)


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


def own_commit(
    table_uri: str, storage_options: Mapping[str, str] | None, task_id: str, first: int, last: int
) -> int | None:
    """The version first..last whose commitInfo carries `task_id`, if any: a commit of ours whose creation was not
    seen (its response lost, the store reporting "already exists" to the client's own retry)."""
    found = (e.version for e in read_commits(table_uri, max(first, 0), last, storage_options) if e.task_id == task_id)
    return next(found, None)


class CommitFailed(Exception):
    """A commit could not be written within its attempts or deadline: nothing was committed."""


Prepare = Callable[[Sequence[CommitEntry], int], list[dict[str, Any]]]
"""Given the commits read since the previous attempt (or since the version the commit started from) and the latest
version, the actions of the next version; raises to give up (a conflict)."""


def commit_next_version(
    table_uri: str,
    storage_options: Mapping[str, str] | None,
    prepare: Prepare,
    settings: CommitSettings,
    *,
    read_version: int | None = None,
    task_id: str | None = None,
) -> int:
    """THE retry loop of every commit recluster writes; returns the version created.

    Each attempt reads the commits after the newest version it knows (from `read_version`, else the table's version
    when the loop starts) until the next one is absent: that one is the version to create, and what was read is
    what `prepare` checks, without listing the log or reopening the table (docs/architecture.md#the-log-state).
    It creates that version only if absent. Another writer took it: prepare again on top of that (the rewrite
    checks the new commit). A transient storage error: back off and try again; a permanent one: CommitFailed at
    once. With a `task_id` (carried in the commitInfo) a commit is idempotent: once an attempt may have created a
    version unseen (an error, or "already exists" that can be our own PUT whose response was lost), every later
    attempt first looks for our task id from that version on, and finding it is success, never a conflict.
    Bounded by `settings.max_attempts` and `settings.deadline_seconds`; then CommitFailed. See
    docs/guarantees.md#idempotent-commits.
    """
    deadline = time.monotonic() + settings.deadline_seconds
    delay, problem = settings.backoff_seconds, "no attempt"
    known = read_version
    """The newest version whose commits a `prepare` has been given."""
    unseen: int | None = None
    """The first version an attempt of ours may have created without seeing it."""
    for attempt in range(1, settings.max_attempts + 1):
        if time.monotonic() > deadline:
            problem = f"deadline of {settings.deadline_seconds:g} s passed"
            break
        try:
            if known is None:
                known = open_table(table_uri, storage_options).version()
            new = commits_after(table_uri, known, storage_options)
            latest = (
                open_table(table_uri, storage_options).version() if any(e.is_gap for e in new) else known + len(new)
            )
            if task_id is not None and unseen is not None:
                found = own_commit(table_uri, storage_options, task_id, unseen, latest)
                if found is not None:
                    return found
            actions = prepare(new, latest)
            known = latest
            if task_id is not None:
                unseen = latest + 1 if unseen is None else unseen
            if write_commit(table_uri, storage_options, latest + 1, actions):
                return latest + 1
            if task_id is not None and own_commit(table_uri, storage_options, task_id, latest + 1, latest + 1):
                return latest + 1  # "already exists": our own PUT, its response lost
            problem = f"version {latest + 1} was taken by another writer"
        except (OSError, BaseError, TableError) as error:
            fault = error_fault(error)
            problem = describe_storage_error(error)
            if fault is None:
                raise
            if fault is StorageFault.PERMANENT:
                raise CommitFailed(problem) from None  # retrying cannot help
            log.warning("commit attempt=%d task=%s error=%s", attempt, task_id, problem)
            time.sleep(min(delay, settings.max_backoff_seconds) * (0.5 + random.random()))
            delay *= 2
    raise CommitFailed(f"{settings.max_attempts} attempts: {problem}")


def error_fault(error: BaseException) -> StorageFault | None:
    """How a commit attempt's error is retried: a storage error by its kind, a table that cannot be opened by the
    kind of its cause, any other table problem (a log that cannot be replayed) as transient."""
    if isinstance(error, StorageError):
        return StorageFault.TRANSIENT if error.transient else StorageFault.PERMANENT
    if isinstance(error, TableError):
        return StorageFault.TRANSIENT
    return storage_fault(error)


REQUIRED_METADATA_FIELDS = ("id", "format", "schemaString", "partitionColumns")
"""Fields every metaData action must have (Delta protocol); a replay that lacks one is not written back."""


def set_table_properties(
    table_uri: str | os.PathLike[str],
    properties: Mapping[str, str],
    storage_options: Mapping[str, str] | None = None,
    *,
    domains: Sequence[Mapping[str, Any]] = (),
) -> int:
    """Set table properties (e.g. `recluster.clusterBy`) in one commit of the metaData action, exactly as logged
    but for its configuration, and the given domainMetadata actions (a liquid table's clustering columns): the
    protocol (reader/writer features) never changes. Returns the version."""
    location = normalize_uri(str(table_uri))
    state: list[LogState] = []
    """The log at the version the last attempt prepared on: replayed once, then advanced."""

    def prepare(new: Sequence[CommitEntry], version: int) -> list[dict[str, Any]]:
        if state and not any(entry.is_gap for entry in new):
            state[0] = state[0].advanced(new)
        else:
            state[:] = [replay_log(location, storage_options, version)]
        metadata = dict(state[0].metadata)
        missing = [field for field in REQUIRED_METADATA_FIELDS if field not in metadata]
        if missing:  # never write a metaData action that would make the table unreadable; retrying cannot help
            raise CommitFailed(
                f"the metaData replayed from the log of {location} up to version {version} lacks "
                f"{', '.join(missing)} (a store whose listings or reads come back wrong?)"
            )
        configuration = {**metadata.get("configuration", {}), **properties}
        metadata["configuration"] = configuration
        parameters = {"properties": dict(properties)}
        operation = "CLUSTER BY" if domains else "SET TBLPROPERTIES"
        info = commit_info(location, storage_options, version, operation, parameters, {}, configuration)
        return [info, {"metaData": metadata}, *({"domainMetadata": dict(domain)} for domain in domains)]

    try:
        return commit_next_version(location, storage_options, prepare, CommitSettings())
    except CommitFailed as error:
        raise TableError(f"cannot set table properties: {error}") from None
