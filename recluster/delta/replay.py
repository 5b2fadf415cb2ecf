"""What delta-rs does not expose, read from the Delta log itself: the latest protocol, metaData and
domainMetadata actions exactly as logged, and the deletion vector and row-tracking fields of every live file.

A replay starts at a complete checkpoint at or below the wanted version (classic, multi-part or v2 with sidecars;
the one `_last_checkpoint` names, else the newest a listing finds) and applies the JSON commits after it. Only the
columns needed are read from checkpoints. One replay per snapshot version; later versions advance a state with the
commits read since (docs/architecture.md#the-log-state).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from recluster.core.deletion_vectors import (
    ABSOLUTE,
    INLINE,
    DeletionVector,
    DeletionVectorError,
    deleted_positions,
    inline_bytes,
    stored_bytes,
)
from recluster.core.errors import TableError
from recluster.delta.log import CommitEntry
from recluster.delta.log_listing import checkpoint_files, list_log
from recluster.delta.storage import (
    log_file,
    normalize_uri,
    read_last_checkpoint,
    read_log_actions,
    stored_location,
    table_filesystem,
)


class LogReplayError(TableError):
    """The log cannot be replayed to the wanted version (missing commits, unreadable checkpoint)."""


@dataclass(frozen=True, slots=True)
class LogState:
    """The parts of a snapshot that only the raw log has."""

    version: int
    protocol: Mapping[str, Any]
    metadata: Mapping[str, Any]
    deletion_vectors: Mapping[str, DeletionVector] = field(default_factory=dict)
    """Live file path (as logged) -> its deletion vector; files without one are absent."""
    row_ids: Mapping[str, tuple[int | None, int | None]] = field(default_factory=dict)
    """Live file path -> its baseRowId and defaultRowCommitVersion (files of a row-tracking table)."""
    domains: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Domain name -> its latest domainMetadata action (removed domains are absent), e.g. `delta.clustering`."""

    def advanced(self, commits: Sequence[CommitEntry]) -> LogState:
        """The state after `commits`, the versions after this one in order, applied to a copy (no replay); those
        at or below this version are already in it. LogReplayError when one is a gap or a version is skipped."""
        commits = [entry for entry in commits if entry.version > self.version]
        replay = _Replay(self)
        version = self.version
        for entry in commits:
            if entry.is_gap or entry.version != version + 1:
                raise LogReplayError(f"commit {entry.version} cannot follow version {version} of {entry.table}")
            for action in entry.actions:
                replay.apply(action)
            version = entry.version
        return replay.state(version) if commits else self


def _plain(value: Any, arrow_type: pa.DataType) -> Any:
    """A checkpoint value as the JSON log holds it: maps become objects (an empty map `{}`, not `[]`), struct
    fields that are null are left out."""
    if value is None:
        return None
    if pa.types.is_map(arrow_type):
        return {k: _plain(v, arrow_type.item_type) for k, v in value}
    if pa.types.is_struct(arrow_type):
        fields = {f.name: f.type for f in arrow_type}
        return {k: _plain(v, fields[k]) for k, v in value.items() if v is not None}
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return [_plain(v, arrow_type.value_type) for v in value]
    return value


def _carries_log_fields(adds: pa.ChunkedArray) -> pa.ChunkedArray:
    """Which of a checkpoint's adds have a deletion vector or row-tracking fields: a live file without any adds
    nothing to a state (a checkpoint names each file once), so a million plain files are never made objects."""
    fields = [f.name for f in adds.type if f.name != "path"]
    carried = pc.and_(pc.is_valid(adds), pc.is_valid(pc.struct_field(adds, "path")))
    extra = [pc.is_valid(pc.struct_field(adds, name)) for name in fields]
    if not extra:
        return pc.and_(carried, pa.scalar(False))
    anything = extra[0]
    for found in extra[1:]:
        anything = pc.or_(anything, found)
    return pc.and_(carried, anything)


def _read_parquet(filesystem: pafs.FileSystem, location: str) -> Iterator[dict[str, Any]]:
    with filesystem.open_input_file(location) as handle:
        parquet = pq.ParquetFile(handle)
        present = set(parquet.schema_arrow.names)
        wanted = [c for c in ("protocol", "metaData", "domainMetadata", "sidecar") if c in present]
        if "add" in present:
            add_fields = {f.name for f in parquet.schema_arrow.field("add").type}
            wanted += [
                f"add.{f}"
                for f in ("path", "deletionVector", "baseRowId", "defaultRowCommitVersion")
                if f in add_fields
            ]
        if not wanted:
            return
        table = parquet.read(columns=wanted)
    for name in table.column_names:
        column = table.column(name)
        if name == "add":
            column = column.filter(_carries_log_fields(column))
        for value in column.to_pylist():
            if value is not None and (name != "add" or value.get("path") is not None):
                yield {name: _plain(value, column.type)}


def _read_json(filesystem: pafs.FileSystem, location: str) -> list[dict[str, Any]]:
    with filesystem.open_input_stream(location) as stream:
        return [json.loads(line) for line in stream.read().decode("utf-8").splitlines() if line.strip()]


def _checkpoint_actions(table_uri: str, filesystem: pafs.FileSystem, files: list[str]) -> Iterator[dict[str, Any]]:
    for name in files:
        location = log_file(table_uri, name)
        actions = _read_json(filesystem, location) if name.endswith(".json") else _read_parquet(filesystem, location)
        for action in actions:
            if "sidecar" in action:
                sidecar = log_file(table_uri, f"_sidecars/{unquote(action['sidecar']['path'])}")
                yield from _read_parquet(filesystem, sidecar)
            else:
                yield action


class _Replay:
    """The live state being built: a checkpoint's actions, then commits, applied in log order."""

    def __init__(self, base: LogState | None = None) -> None:
        self.protocol: dict[str, Any] = dict(base.protocol) if base else {}
        self.metadata: dict[str, Any] = dict(base.metadata) if base else {}
        self.vectors: dict[str, DeletionVector] = dict(base.deletion_vectors) if base else {}
        self.row_ids: dict[str, tuple[int | None, int | None]] = dict(base.row_ids) if base else {}
        self.domains: dict[str, Mapping[str, Any]] = dict(base.domains) if base else {}

    def apply(self, action: Mapping[str, Any], in_checkpoint: bool = False) -> None:
        if "protocol" in action:
            self.protocol = dict(action["protocol"])
        elif "metaData" in action:
            self.metadata = dict(action["metaData"])
        elif "domainMetadata" in action:
            domain = action["domainMetadata"]
            if domain.get("removed"):
                self.domains.pop(domain["domain"], None)
            else:
                self.domains[domain["domain"]] = domain
        elif "add" in action:
            add = action["add"]
            if add.get("deletionVector"):
                self.vectors[add["path"]] = DeletionVector.from_log(add["deletionVector"])
            else:
                self.vectors.pop(add["path"], None)
            row_ids = (add.get("baseRowId"), add.get("defaultRowCommitVersion"))
            if row_ids == (None, None):
                self.row_ids.pop(add["path"], None)
            else:
                self.row_ids[add["path"]] = row_ids
        elif "remove" in action and not in_checkpoint:  # a checkpoint's removes are tombstones
            # A file is its path AND its vector: Delta Spark's DELETE/UPDATE/MERGE log the file with its new
            # vector and remove it with its old one in the same commit, in either order.
            remove = action["remove"]
            live = self.vectors.get(remove["path"])
            gone = remove.get("deletionVector")
            if (live.unique_id if live else None) == (DeletionVector.from_log(gone).unique_id if gone else None):
                self.vectors.pop(remove["path"], None)
                self.row_ids.pop(remove["path"], None)

    def state(self, version: int) -> LogState:
        return LogState(version, self.protocol, self.metadata, self.vectors, self.row_ids, self.domains)


_replays = [0]
_replays_lock = threading.Lock()


def replays() -> int:
    """How many replays of a log (a checkpoint and the commits after it) this process has made: the figure
    tests hold to one per snapshot version (docs/architecture.md#the-log-state)."""
    return _replays[0]


def _hinted_files(
    location: str, storage_options: Mapping[str, str] | None, version: int
) -> tuple[int, list[str]] | None:
    """The checkpoint `_delta_log/_last_checkpoint` names, when it is at or below `version`: (its version, its
    files by name, never listed). A hint only (the Delta protocol): a missing or stale one is checked later."""
    found = read_last_checkpoint(location, storage_options)
    if found is None or found[0] > version:
        return None
    checkpoint, hint = found
    parts = hint.get("parts")
    v2 = hint.get("v2Checkpoint") or {}
    if v2.get("path"):
        return checkpoint, [str(v2["path"]).rsplit("/", 1)[-1]]
    if parts:
        return checkpoint, [
            f"{checkpoint:020d}.checkpoint.{p:010d}.{int(parts):010d}.parquet" for p in range(1, int(parts) + 1)
        ]
    return checkpoint, [f"{checkpoint:020d}.checkpoint.parquet"]


def _listed_files(
    location: str, storage_options: Mapping[str, str] | None, version: int
) -> tuple[int, list[str]] | None:
    """The newest complete checkpoint at or below `version` from a listing of `_delta_log/`, after checking
    every commit after it is there."""
    listing = list_log(location, storage_options)
    checkpoint = checkpoint_files(list(listing.names), version)
    start = -1 if checkpoint is None else checkpoint[0]
    commits = set(listing.commits)
    missing = [v for v in range(start + 1, version + 1) if v not in commits]
    if missing:
        raise LogReplayError(f"the log of {location} has no commit {missing[0]} (and no checkpoint after it)")
    return checkpoint


def _replay(
    location: str,
    storage_options: Mapping[str, str] | None,
    filesystem: pafs.FileSystem,
    version: int,
    checkpoint: tuple[int, list[str]] | None,
) -> LogState:
    replay = _Replay()
    if checkpoint is not None:
        for action in _checkpoint_actions(location, filesystem, checkpoint[1]):
            replay.apply(action, in_checkpoint=True)
    for commit in range(-1 if checkpoint is None else checkpoint[0], version):
        for action in read_log_actions(location, commit + 1, storage_options):
            replay.apply(action)
    return replay.state(version)


def replay_log(table_uri: str, storage_options: Mapping[str, str] | None, version: int) -> LogState:
    """Protocol, metadata, domain metadata and the live files' deletion vectors, baseRowIds and
    defaultRowCommitVersions at `version`: the checkpoint `_last_checkpoint` names and the commits after it, read
    by name; when one of them is missing (a stale hint, no hint), the checkpoint a listing of the log finds."""
    location = normalize_uri(table_uri)
    filesystem = table_filesystem(location, storage_options)
    with _replays_lock:
        _replays[0] += 1
    try:
        try:
            hinted = _hinted_files(location, storage_options, version)
            if hinted is not None:
                return _replay(location, storage_options, filesystem, version, hinted)
        except (FileNotFoundError, ValueError):  # malformed, cleaned up, never written as named: the listing decides
            pass
        listed = _listed_files(location, storage_options, version)
        return _replay(location, storage_options, filesystem, version, listed)
    except (OSError, ValueError, KeyError) as error:
        raise LogReplayError(f"cannot read the log of {table_uri}: {error}") from None


def read_deleted_positions(
    table_uri: str, storage_options: Mapping[str, str] | None, vector: DeletionVector
) -> npt.NDArray[np.uint64]:
    """Row positions a deletion vector deletes, reading its file (a range of it) when it is not inline."""
    if vector.storage_type == INLINE:
        return deleted_positions(inline_bytes(vector))
    path = vector.file_path()
    if vector.storage_type == ABSOLUTE:
        root = normalize_uri(table_uri).rstrip("/") + "/"
        absolute = normalize_uri(path)
        if not absolute.startswith(root):
            raise DeletionVectorError(f"deletion vector {path} is outside the table")
        path = absolute[len(root) :]
    filesystem = table_filesystem(normalize_uri(table_uri), storage_options)
    with filesystem.open_input_file(stored_location(normalize_uri(table_uri), path)) as handle:
        handle.seek(vector.offset or 0)
        block = handle.read(vector.size_in_bytes + 8)
    return deleted_positions(stored_bytes(vector, block))
