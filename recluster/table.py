"""All Delta access, through delta-rs (`deltalake`): open, snapshot -> blocks, commit a rewrite.

Stats come from the Delta log; for a key column the log has no usable stats for, the Parquet footer is
read once and cached (data files are immutable, so the cache never goes stale).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.fs import DeltaStorageHandler
from deltalake.transaction import AddAction, RemoveAction, Transaction

from recluster.blocks import (
    Block,
    KeyColumn,
    KeyType,
    Partition,
    encode_key,
    encode_partition,
    key_fingerprint,
    parse_data_file_name,
)
from recluster.settings import CLUSTER_BY_PROPERTY

log = logging.getLogger(__name__)

SUPPORTED_READER_FEATURES = frozenset({"timestampNtz", "deletionVectors", "v2Checkpoint", "vacuumProtocolCheck"})


class TableError(Exception):
    """A table problem the user must fix (not a Delta table, bad key, unsupported feature): one line."""


class CommitConflict(Exception):
    """A concurrent transaction changed files this rewrite read: nothing was committed."""


def normalize_uri(uri: str) -> str:
    """Local paths and `file://` URIs become absolute paths; object-store URIs pass through."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return os.path.abspath(unquote(parsed.path))
    if parsed.scheme in ("", "c", "d") or len(parsed.scheme) == 1:  # plain or Windows-drive paths
        return os.path.abspath(uri)
    return uri.rstrip("/")


def open_table(uri: str, storage_options: Mapping[str, str] | None = None) -> DeltaTable:
    location = normalize_uri(uri)
    try:
        return DeltaTable(location, storage_options=dict(storage_options or {}))
    except TableNotFoundError:
        raise TableError(f"{uri} is not a Delta table (no _delta_log found)") from None
    except (DeltaError, OSError) as error:
        raise TableError(f"cannot open Delta table {uri}: {_first_line(error)}") from None


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


_KEY_TYPES: tuple[tuple[Any, KeyType], ...] = (
    (pa.types.is_integer, KeyType.INTEGER),
    (pa.types.is_floating, KeyType.FLOAT),
    (pa.types.is_decimal, KeyType.DECIMAL),
    (
        lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t),
        KeyType.STRING,
    ),
    (
        lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t),
        KeyType.BINARY,
    ),
    (pa.types.is_boolean, KeyType.BOOLEAN),
    (pa.types.is_date, KeyType.DATE),
    (pa.types.is_timestamp, KeyType.TIMESTAMP),
)


def key_column(name: str, arrow_type: pa.DataType) -> KeyColumn:
    if pa.types.is_nested(arrow_type):
        raise TableError(f"key column {name!r} has nested type {arrow_type}; cluster keys must be primitive")
    for matches, key_type in _KEY_TYPES:
        if matches(arrow_type):
            scale = arrow_type.scale if key_type is KeyType.DECIMAL else 0
            return KeyColumn(name, key_type, scale)
    raise TableError(f"key column {name!r} has unsupported type {arrow_type}")


@dataclass(frozen=True, slots=True)
class ClusterKey:
    columns: tuple[KeyColumn, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def fingerprint(self) -> str:
        return key_fingerprint(self.names)

    def __str__(self) -> str:
        return ", ".join(self.names)


def arrow_schema(table: DeltaTable) -> pa.Schema:
    return pa.schema(table.schema().to_arrow())


def parse_columns(text: str) -> list[str]:
    return [c.strip().strip("`") for c in text.split(",") if c.strip()]


def resolve_cluster_key(table: DeltaTable, cluster_by: Sequence[str] | None, uri: str = "") -> ClusterKey:
    """The key from `cluster_by`, else the table property `recluster.clusterBy`, else a clear error."""
    names = list(cluster_by or [])
    if not names:
        names = parse_columns(table.metadata().configuration.get(CLUSTER_BY_PROPERTY, ""))
    if not names:
        raise TableError(
            f"table {uri or table.table_uri} has no cluster key: pass --cluster-by col1,col2 "
            f"or run ALTER TABLE ... CLUSTER BY (col1, col2)"
        )
    schema = arrow_schema(table)
    partition_columns = set(table.metadata().partition_columns)
    columns = []
    for name in names:
        index = schema.get_field_index(name)
        if index < 0:
            known = ", ".join(schema.names)
            raise TableError(f"unknown key column {name!r} (table columns: {known})")
        if name in partition_columns:
            raise TableError(f"key column {name!r} is a partition column; cluster by data columns only")
        columns.append(key_column(name, schema.field(index).type))
    if len(set(names)) != len(names):
        raise TableError(f"key column listed twice in {', '.join(names)}")
    return ClusterKey(tuple(columns))


def _has_variant(schema_node: Any) -> bool:
    """Whether a Delta schema (JSON) has a column of variant type anywhere (names and metadata aside)."""
    if isinstance(schema_node, dict):
        return any(_has_variant(v) for k, v in schema_node.items() if k not in ("name", "metadata"))
    if isinstance(schema_node, list):
        return any(_has_variant(v) for v in schema_node)
    return bool(schema_node == "variant")


def check_supported(table: DeltaTable) -> None:
    """Refuse tables whose layout this engine cannot rewrite correctly."""
    mode = table.metadata().configuration.get("delta.columnMapping.mode", "none")
    if mode != "none":
        raise TableError(f"column mapping mode {mode!r} is not supported (files use physical column names)")
    features = set(table.protocol().reader_features or []) - SUPPORTED_READER_FEATURES
    if "variantType" in features and not _has_variant(json.loads(table.schema().to_json())):
        features.discard("variantType")  # delta-rs adds it on any property change of a table with features
    if features:
        raise TableError(f"unsupported Delta reader features: {', '.join(sorted(features))}")


def partition_text(value: Any) -> str | None:
    """A typed partition value back to its Delta log string form."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, dt.date | decimal.Decimal | int | float):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


@cache
def _filesystem(table_uri: str, options: tuple[tuple[str, str], ...]) -> pafs.FileSystem:
    if "://" not in table_uri:
        return pafs.LocalFileSystem()
    return pafs.PyFileSystem(DeltaStorageHandler(table_uri, dict(options)))


def table_filesystem(table_uri: str, storage_options: Mapping[str, str] | None) -> pafs.FileSystem:
    return _filesystem(table_uri, tuple(sorted((storage_options or {}).items())))


def file_location(table_uri: str, path: str) -> str:
    """Where `path` (relative to the table, as in the log) is for the table's filesystem."""
    if "://" in path:
        return path
    path = unquote(path)
    if "://" not in table_uri:
        return os.path.join(table_uri, path)
    return path  # DeltaStorageHandler is rooted at the table


@dataclass(frozen=True, slots=True)
class FooterStats:
    rows: int
    mins: tuple[Any, ...] | None
    maxes: tuple[Any, ...] | None


_FOOTER_CACHE: dict[tuple[str, str, tuple[str, ...]], FooterStats] = {}


def footer_stats(
    table_uri: str, path: str, columns: Sequence[str], storage_options: Mapping[str, str] | None = None
) -> FooterStats:
    """Min/max tuples of `columns` from a Parquet footer; NULL min when the column has nulls.

    mins/maxes are None when a row group lacks statistics for a key column: the file is unclustered.
    """
    cache_key = (table_uri, path, tuple(columns))
    if cache_key in _FOOTER_CACHE:
        return _FOOTER_CACHE[cache_key]
    filesystem = table_filesystem(table_uri, storage_options)
    with filesystem.open_input_file(file_location(table_uri, path)) as handle:
        metadata = pq.ParquetFile(handle).metadata
    names = [metadata.schema.column(i).name for i in range(metadata.num_columns)]
    mins: list[Any] = []
    maxes: list[Any] = []
    usable = True
    for column in columns:
        lows, highs, nulls = [], [], 0
        if column not in names:  # column added after this file was written: all NULL
            mins.append(None)
            maxes.append(None)
            continue
        index = names.index(column)
        for group in range(metadata.num_row_groups):
            stats = metadata.row_group(group).column(index).statistics
            if stats is None or not stats.has_null_count:
                usable = False
                break
            nulls += stats.null_count
            if stats.has_min_max:
                lows.append(stats.min)
                highs.append(stats.max)
            elif stats.null_count != metadata.row_group(group).num_rows:
                usable = False
                break
        if not usable:
            break
        mins.append(None if nulls or not lows else min(lows))
        maxes.append(max(highs) if highs else None)
    result = FooterStats(metadata.num_rows, tuple(mins) if usable else None, tuple(maxes) if usable else None)
    _FOOTER_CACHE[cache_key] = result
    return result


@dataclass(frozen=True, slots=True)
class TableSnapshot:
    """One version of a table as the engine sees it: blocks with key ranges, plus what a commit needs."""

    uri: str
    version: int
    key: ClusterKey
    partition_columns: tuple[str, ...]
    blocks: tuple[Block, ...]
    properties: Mapping[str, str]
    data_schema: pa.Schema = field(compare=False)
    """The table schema without partition columns: what data files hold."""
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)


def _column(actions: pa.Table, name: str) -> list[Any] | None:
    return actions.column(name).to_pylist() if name in actions.column_names else None


def _log_value(
    mins: list[Any] | None, maxes: list[Any] | None, nulls: list[Any] | None, rows: int | None, i: int
) -> tuple[bool, Any, Any]:
    """(usable, min, max) for one file and one key column from the log's stats."""
    null_count = nulls[i] if nulls is not None else None
    if rows is None or null_count is None:
        return False, None, None
    if null_count == rows:
        return True, None, None
    low = mins[i] if mins is not None else None
    high = maxes[i] if maxes is not None else None
    if low is None or high is None:
        return False, None, None
    return True, (None if null_count else low), high


def blocks_from_actions(
    actions: pa.Table,
    key: ClusterKey,
    partition_columns: Sequence[str],
    table_uri: str,
    storage_options: Mapping[str, str] | None = None,
) -> list[Block]:
    """Blocks from `get_add_actions(flatten=True)` rows; footer fallback for key columns without stats."""
    paths = actions.column("path").to_pylist()
    sizes = actions.column("size_bytes").to_pylist()
    rows = _column(actions, "num_records") or [None] * len(paths)
    per_column = [
        (_column(actions, f"min.{c}"), _column(actions, f"max.{c}"), _column(actions, f"null_count.{c}"))
        for c in key.names
    ]
    partitions = [_column(actions, f"partition.{c}") or [None] * len(paths) for c in partition_columns]
    dv_columns = [n for n in actions.column_names if n.lower().startswith(("deletionvector", "deletion_vector"))]
    deletion_vectors = _column(actions, dv_columns[0]) if dv_columns else None
    blocks = []
    for i, path in enumerate(paths):
        partition: Partition = tuple(
            (name, partition_text(values[i])) for name, values in zip(partition_columns, partitions, strict=True)
        )
        row_count = rows[i]
        parsed = [_log_value(lo, hi, nc, row_count, i) for lo, hi, nc in per_column]
        if all(ok for ok, _, _ in parsed) and row_count is not None:
            low_values: tuple[Any, ...] | None = tuple(v for _, v, _ in parsed)
            high_values: tuple[Any, ...] | None = tuple(v for _, _, v in parsed)
        else:
            footer = footer_stats(table_uri, path, key.names, storage_options)
            row_count, low_values, high_values = footer.rows, footer.mins, footer.maxes
        prefix = encode_partition(partition)
        written = parse_data_file_name(path)
        blocks.append(
            Block(
                path=path,
                rows=int(row_count or 0),
                bytes=int(sizes[i]),
                min_key=None if low_values is None else encode_key(low_values, key.columns, prefix),
                max_key=None if high_values is None else encode_key(high_values, key.columns, prefix),
                min_values=low_values,
                max_values=high_values,
                level=written.level if written else 0,
                partition=partition,
                key_fingerprint=written.fingerprint if written else None,
                has_deletion_vector=bool(deletion_vectors and deletion_vectors[i]),
            )
        )
    return blocks


def load_snapshot(
    table: DeltaTable,
    key: ClusterKey,
    *,
    uri: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    partition: Mapping[str, str] | None = None,
) -> TableSnapshot:
    """The table's current blocks (optionally of one partition), keyed and leveled."""
    metadata = table.metadata()
    partition_columns = tuple(metadata.partition_columns)
    if partition:
        unknown = set(partition) - set(partition_columns)
        if unknown:
            raise TableError(
                f"unknown partition column {sorted(unknown)[0]!r} "
                f"(partition columns: {', '.join(partition_columns) or 'none'})"
            )
    actions = pa.table(table.get_add_actions(flatten=True))
    location = normalize_uri(uri or table.table_uri)
    blocks = blocks_from_actions(actions, key, partition_columns, location, storage_options)
    if partition:
        wanted = {k: str(v) for k, v in partition.items()}
        blocks = [b for b in blocks if all(dict(b.partition).get(k) == v for k, v in wanted.items())]
    schema = arrow_schema(table)
    return TableSnapshot(
        uri=location,
        version=table.version(),
        key=key,
        partition_columns=partition_columns,
        blocks=tuple(blocks),
        properties=dict(metadata.configuration),
        data_schema=pa.schema([f for f in schema if f.name not in partition_columns]),
        storage_options=dict(storage_options or {}),
    )


@dataclass(frozen=True, slots=True)
class WrittenFile:
    """A data file a merge wrote into the table location, with the Delta stats to commit it with."""

    path: str
    rows: int
    bytes: int
    partition: Partition
    stats: Mapping[str, Any]
    level: int


REWRITE_APP_ID = "recluster"
"""Every rewrite commits a SetTransaction of this app id: delta-rs then fails a rewrite that raced another one."""
MAX_REWRITE_ATTEMPTS = 20


def rewrite_conflict(
    table_uri: str, storage_options: Mapping[str, str] | None, paths: Sequence[str], after: int, through: int
) -> str | None:
    """Why a rewrite of `paths` may not commit over versions after..through, or None: one of them removed an
    input file (whatever its dataChange: delta-rs does not fail a commit over another rewrite's removes), changed
    the metadata or protocol, or is no longer in the log."""
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
    another recluster instance) or changed the metadata. Every commit since `read_version` is checked here, then the
    transaction is anchored at the newest of them and carries the `recluster` SetTransaction: a rewrite committed
    in between makes delta-rs fail it, and it is checked and retried; a concurrent delete or update still fails it
    in delta-rs's own conflict check, a concurrent append goes through.
    """
    now = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = [
        RemoveAction(block.path, False, now, block.bytes, dict(block.partition)) for block in removed
    ]
    actions.extend(
        AddAction(f.path, f.bytes, dict(f.partition), now, False, json.dumps(f.stats, default=str)) for f in added
    )
    checked = read_version
    for _ in range(MAX_REWRITE_ATTEMPTS):
        table = open_table(table_uri, storage_options)
        reason = rewrite_conflict(table_uri, storage_options, [b.path for b in removed], checked, table.version())
        if reason:
            raise CommitConflict(reason)
        checked = table.version()
        try:
            table.create_write_transaction(
                actions,
                mode="append",
                schema=table.schema(),
                partition_by=list(table.metadata().partition_columns) or None,
                commit_properties=CommitProperties(
                    custom_metadata=dict(metadata), app_transactions=[Transaction(REWRITE_APP_ID, checked + 1)]
                ),
            )
        except CommitFailedError as error:
            if "Concurrent transaction" in str(error):
                continue  # another rewrite committed after `checked`: check it, then try again on top of it
            raise CommitConflict(_first_line(error)) from None
        version = committed_with(table_uri, storage_options, metadata, checked)
        return checked + 1 if version is None else version
    raise CommitConflict(f"{MAX_REWRITE_ATTEMPTS} concurrent rewrites committed first")


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
    filesystem = table_filesystem(table_uri, storage_options)
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            filesystem.delete_file(file_location(table_uri, path))


def set_table_properties(table: DeltaTable, properties: Mapping[str, str]) -> None:
    """Set table properties (e.g. `recluster.clusterBy`) in one metadata commit."""
    try:
        table.alter.set_table_properties(dict(properties), raise_if_not_exists=False)
    except (DeltaError, OSError) as error:
        raise TableError(f"cannot set table properties: {_first_line(error)}") from None


def _stat_from_json(value: Any, column: KeyColumn) -> Any:
    """A Delta JSON stats value as the Python value `encode_key` expects for the column's type."""
    if value is None:
        return None
    match column.type:
        case KeyType.DECIMAL:
            # delta-rs writes decimal stats as JSON doubles: trust only a value written at the column's
            # scale or short enough to be exact, else let the footer supply it (as delta-rs itself does).
            exact = decimal.Decimal(str(value))
            shape = exact.as_tuple()
            fits = isinstance(shape.exponent, int) and shape.exponent <= 0
            if fits and (shape.exponent == -column.scale or len(shape.digits) <= 15):
                return exact
            return None
        case KeyType.FLOAT:
            return float(value)
        case KeyType.DATE:
            return dt.date.fromisoformat(value)
        case KeyType.TIMESTAMP:
            parsed = dt.datetime.fromisoformat(value)
            return parsed.replace(tzinfo=None) - (parsed.utcoffset() or dt.timedelta())
        case KeyType.BINARY:
            return None  # Delta keeps no binary stats: the footer supplies them
    return value


def blocks_from_log_adds(
    adds: Sequence[Mapping[str, Any]],
    key: ClusterKey,
    partition_columns: Sequence[str],
    table_uri: str,
    storage_options: Mapping[str, str] | None = None,
) -> list[Block]:
    """Blocks from the `add` actions of commit JSON, through the same path as snapshot blocks."""
    rows = []
    for add in adds:
        stats = json.loads(add.get("stats") or "{}", parse_float=decimal.Decimal)
        row: dict[str, Any] = {
            "path": add["path"],
            "size_bytes": int(add.get("size", 0)),
            "num_records": stats.get("numRecords"),
            "deletionVector": add.get("deletionVector") is not None,
        }
        for column in key.columns:
            row[f"min.{column.name}"] = _stat_from_json(stats.get("minValues", {}).get(column.name), column)
            row[f"max.{column.name}"] = _stat_from_json(stats.get("maxValues", {}).get(column.name), column)
            row[f"null_count.{column.name}"] = stats.get("nullCount", {}).get(column.name)
        for name in partition_columns:
            row[f"partition.{name}"] = add.get("partitionValues", {}).get(name)
        rows.append(row)
    if not rows:
        return []
    return blocks_from_actions(pa.Table.from_pylist(rows), key, partition_columns, table_uri, storage_options)
