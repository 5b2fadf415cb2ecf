"""What delta-rs does not expose, read from the Delta log itself: the latest protocol and metaData actions
exactly as logged, and the deletion vector descriptor of every live file.

A replay starts at the newest complete checkpoint at or below the wanted version (classic, multi-part or v2
with sidecars) and applies the JSON commits after it. Only the columns needed are read from checkpoints.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import numpy as np
import numpy.typing as npt
import pyarrow as pa
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
from recluster.delta.storage import (
    LOG_DIR,
    log_file,
    normalize_uri,
    read_log_actions,
    stored_location,
    table_filesystem,
)

_CHECKPOINT = re.compile(
    r"^(?P<version>\d{20})\.checkpoint(?:\.(?P<part>\d{10})\.(?P<parts>\d{10})|\.(?P<uuid>[0-9a-fA-F-]{36}))?"
    r"\.(?P<format>parquet|json)$"
)
_COMMIT = re.compile(r"^(?P<version>\d{20})\.json$")


class LogReplayError(Exception):
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
    """Live file path -> its baseRowId and defaultRowCommitVersion (with `with_row_ids`: row tracking)."""
    domains: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Domain name -> its latest domainMetadata action (removed domains are absent), e.g. `delta.clustering`."""


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


def _checkpoint_files(names: list[str], version: int) -> tuple[int, list[str]] | None:
    """The newest complete checkpoint at or below `version`: (its version, its files)."""
    found: dict[tuple[int, str], list[str]] = {}
    expected: dict[tuple[int, str], int] = {}
    for name in names:
        match = _CHECKPOINT.match(name)
        if not match or int(match["version"]) > version:
            continue
        kind = "multi" if match["parts"] else ("v2:" + match["uuid"] if match["uuid"] else "single")
        slot = (int(match["version"]), kind)
        found.setdefault(slot, []).append(name)
        expected[slot] = int(match["parts"] or 1)
    complete = [slot for slot, files in found.items() if len(files) == expected[slot]]
    if not complete:
        return None
    best = max(complete, key=lambda slot: (slot[0], slot[1] == "single"))
    return best[0], sorted(found[best])


def _read_parquet(filesystem: pafs.FileSystem, location: str, with_files: bool) -> Iterator[dict[str, Any]]:
    with filesystem.open_input_file(location) as handle:
        parquet = pq.ParquetFile(handle)
        present = set(parquet.schema_arrow.names)
        wanted = [c for c in ("protocol", "metaData", "domainMetadata", "sidecar") if c in present]
        if with_files and "add" in present:
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
        for value in column.to_pylist():
            if value is not None and (name != "add" or value.get("path") is not None):
                yield {name: _plain(value, column.type)}


def _read_json(filesystem: pafs.FileSystem, location: str) -> list[dict[str, Any]]:
    with filesystem.open_input_stream(location) as stream:
        return [json.loads(line) for line in stream.read().decode("utf-8").splitlines() if line.strip()]


def _checkpoint_actions(
    table_uri: str, filesystem: pafs.FileSystem, files: list[str], with_files: bool
) -> Iterator[dict[str, Any]]:
    for name in files:
        location = log_file(table_uri, name)
        actions = (
            _read_json(filesystem, location)
            if name.endswith(".json")
            else _read_parquet(filesystem, location, with_files)
        )
        for action in actions:
            if "sidecar" in action:
                sidecar = log_file(table_uri, f"_sidecars/{unquote(action['sidecar']['path'])}")
                yield from _read_parquet(filesystem, sidecar, with_files)
            else:
                yield action


def replay_log(
    table_uri: str,
    storage_options: Mapping[str, str] | None,
    version: int,
    *,
    with_files: bool = True,
    with_row_ids: bool = False,
) -> LogState:
    """Protocol, metadata, domain metadata and (with `with_files`) the live files' deletion vectors (and with
    `with_row_ids` their baseRowId and defaultRowCommitVersion) at `version`."""
    location = normalize_uri(table_uri)
    filesystem = table_filesystem(location, storage_options)
    selector = pafs.FileSelector(stored_location(location, LOG_DIR), allow_not_found=True)
    names = [info.base_name for info in filesystem.get_file_info(selector) if info.type == pafs.FileType.File]
    checkpoint = _checkpoint_files(names, version)
    start = -1 if checkpoint is None else checkpoint[0]
    commits = {int(m["version"]) for m in map(_COMMIT.match, names) if m}
    missing = [v for v in range(start + 1, version + 1) if v not in commits]
    if missing:
        raise LogReplayError(f"the log of {table_uri} has no commit {missing[0]} (and no checkpoint after it)")
    protocol: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    vectors: dict[str, DeletionVector] = {}
    row_ids: dict[str, tuple[int | None, int | None]] = {}
    domains: dict[str, Mapping[str, Any]] = {}

    def apply(action: Mapping[str, Any], in_checkpoint: bool = False) -> None:
        nonlocal protocol, metadata
        if "protocol" in action:
            protocol = dict(action["protocol"])
        elif "metaData" in action:
            metadata = dict(action["metaData"])
        elif "domainMetadata" in action:
            domain = action["domainMetadata"]
            if domain.get("removed"):
                domains.pop(domain["domain"], None)
            else:
                domains[domain["domain"]] = domain
        elif with_files and "add" in action:
            add = action["add"]
            if add.get("deletionVector"):
                vectors[add["path"]] = DeletionVector.from_log(add["deletionVector"])
            else:
                vectors.pop(add["path"], None)
            if with_row_ids:
                row_ids[add["path"]] = (add.get("baseRowId"), add.get("defaultRowCommitVersion"))
        elif with_files and "remove" in action and not in_checkpoint:  # a checkpoint's removes are tombstones
            # A file is its path AND its vector: Delta Spark's DELETE/UPDATE/MERGE log the file with its new
            # vector and remove it with its old one in the same commit, in either order.
            remove = action["remove"]
            live = vectors.get(remove["path"])
            gone = remove.get("deletionVector")
            if (live.unique_id if live else None) == (DeletionVector.from_log(gone).unique_id if gone else None):
                vectors.pop(remove["path"], None)
                row_ids.pop(remove["path"], None)

    try:
        if checkpoint is not None:
            for action in _checkpoint_actions(location, filesystem, checkpoint[1], with_files):
                apply(action, in_checkpoint=True)
        for commit in range(start + 1, version + 1):
            for action in read_log_actions(location, commit, storage_options):
                apply(action)
    except (OSError, ValueError, KeyError) as error:
        raise LogReplayError(f"cannot read the log of {table_uri}: {error}") from None
    return LogState(version, protocol, metadata, vectors, row_ids, domains)


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
