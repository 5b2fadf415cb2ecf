"""Our commits, written into the Delta log ourselves: a rewrite (remove inputs, add outputs, dataChange=false)
and a table-property change. delta-rs cannot write either exactly: its RemoveAction has no deletion vector (so a
file with one stayed live), it URL-encodes paths a second time, and its property change adds reader features.

A commit is the JSON file `_delta_log/<version>.json`, created only if absent (storage.put_if_absent): every
commit after the version we read is checked first, then ours is created at the next version; if another writer
took that version in between, it is checked in turn and we try again on top of it. No window is left in which
a rewrite of the same inputs can commit unseen.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import unquote

from recluster.blocks import Block
from recluster.log_replay import LogReplayError, replay_log
from recluster.storage import normalize_uri, put_if_absent, read_log_actions
from recluster.table import CommitConflict, TableError, WrittenFile, open_table

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
    from triggers.delta_log import LOG_GAP, CommitRange, commit_rows

    inputs = {unquote(p) for p in paths}
    options = tuple(sorted((storage_options or {}).items()))
    for _, version, _, operation, _, _, _, _, _, removes, metadata_changed in commit_rows(
        CommitRange(table_uri, after + 1, through, options)
    ):
        if operation == LOG_GAP:
            return f"commit {version} is no longer in the log"
        if metadata_changed:
            return f"commit {version} changed the table metadata or protocol"
        removed = inputs.intersection(unquote(r) for r in removes)
        if removed:
            return f"commit {version} removed input {sorted(removed)[0]}"
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
