"""Writing the Delta log ourselves: a commit is the JSON file `_delta_log/<version>.json`, created only if absent
(storage.put_if_absent), so of two writers of one version exactly one wins. delta-rs cannot write our commits
exactly: its RemoveAction has no deletion vector, it URL-encodes logged paths a second time, and its property change
adds reader and writer features.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from deltalake import DeltaTable

from recluster.core.errors import TableError
from recluster.delta.log import TASK_ID_KEY
from recluster.delta.replay import LogReplayError, replay_log
from recluster.delta.snapshot import open_table
from recluster.delta.storage import normalize_uri, put_if_absent, read_log_actions
from recluster.settings import CommitSettings

ENGINE_INFO = "recluster/0.1.0"
IN_COMMIT_TIMESTAMPS = "delta.enableInCommitTimestamps"
log = logging.getLogger(__name__)

PERMANENT_ERRNOS = frozenset({errno.EPERM, errno.EACCES, errno.EROFS, errno.ENOTDIR, errno.EISDIR})
"""Storage errors a retry cannot fix (no permission, read-only): the commit fails at once."""


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


class CommitFailed(Exception):
    """A commit could not be written within its attempts or deadline: nothing was committed."""


Prepare = Callable[[DeltaTable, int], list[dict[str, Any]]]
"""Given the table at its latest version, the actions of the next version; raises to give up (a conflict)."""


def commit_next_version(
    table_uri: str,
    storage_options: Mapping[str, str] | None,
    prepare: Prepare,
    settings: CommitSettings,
    *,
    task_id: str | None = None,
    since: int = -1,
) -> int:
    """THE retry loop of every commit recluster writes; returns the version created.

    Each attempt prepares the actions on top of the latest version and creates the next one only if absent. Another
    writer took it: prepare again on top of that (the rewrite checks the new commit). A storage error: if the log
    already holds a commit with our `task_id` after `since` it happened, else back off and try again. Bounded by
    `settings.max_attempts` and `settings.deadline_seconds`; then CommitFailed.
    """
    deadline = time.monotonic() + settings.deadline_seconds
    delay, problem = settings.backoff_seconds, "no attempt"
    for attempt in range(1, settings.max_attempts + 1):
        if time.monotonic() > deadline:
            problem = f"deadline of {settings.deadline_seconds:g} s passed"
            break
        try:
            table = open_table(table_uri, storage_options)
            latest = table.version()
            if write_commit(table_uri, storage_options, latest + 1, prepare(table, latest)):
                return latest + 1
            problem = f"version {latest + 1} was taken by another writer"
        except (OSError, TableError) as error:
            if isinstance(error, OSError) and error.errno in PERMANENT_ERRNOS:
                raise CommitFailed(str(error).splitlines()[0]) from None  # retrying cannot help
            if task_id is not None:
                earlier = committed_with(table_uri, storage_options, {TASK_ID_KEY: task_id}, since)
                if earlier is not None:
                    return earlier
            problem = str(error).splitlines()[0] if str(error) else type(error).__name__
            log.warning("commit attempt=%d task=%s error=%s", attempt, task_id, problem)
            time.sleep(min(delay, settings.max_backoff_seconds) * (0.5 + random.random()))
            delay *= 2
    raise CommitFailed(f"{settings.max_attempts} attempts: {problem}")


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

    def prepare(table: DeltaTable, version: int) -> list[dict[str, Any]]:
        try:
            metadata = dict(replay_log(location, storage_options, version, with_files=False).metadata)
        except LogReplayError as error:
            raise TableError(str(error)) from None
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
