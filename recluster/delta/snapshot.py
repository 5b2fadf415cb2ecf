"""A Delta table as the engine sees it, through delta-rs (`deltalake`): open, refuse what cannot be
rewritten, resolve the key, snapshot -> blocks.

Stats come from the Delta log; for a key column the log has no usable stats for, the Parquet footer is read once
and cached (data files are immutable, so the cache never goes stale). Deletion vectors come from the log itself.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from recluster.core.blocks import Block, Partition, parse_data_file_name
from recluster.core.curves import MAX_CURVE_COLUMNS, Curve, default_curve, parse_curve, whole_curve
from recluster.core.deletion_vectors import DeletionVector
from recluster.core.errors import TableError
from recluster.core.keys import (
    CURVE_COLUMN,
    ClusterKey,
    KeyColumn,
    KeyType,
    encode_key,
    encode_partition,
    key_column,
    parse_columns,
)
from recluster.delta.ranges import load_range_bounds
from recluster.delta.storage import (
    describe_storage_error,
    file_location,
    normalize_uri,
    table_filesystem,
)
from recluster.settings import CLUSTER_BY_PROPERTY, CURVE_PROPERTY, RANGES_PROPERTY

log = logging.getLogger(__name__)


SUPPORTED_READER_FEATURES = frozenset({"timestampNtz", "deletionVectors", "v2Checkpoint", "vacuumProtocolCheck"})


SUPPORTED_WRITER_FEATURES = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "columnMapping",  # mode 'none' only, checked on its own
        "identityColumns",
        "timestampNtz",
        "deletionVectors",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "domainMetadata",
        "inCommitTimestamp",
        "allowColumnDefaults",
    }
)
"""Writer features a rewrite with dataChange=false keeps valid. Not among them, each refused with its name:
rowTracking (outputs would need the inputs' row ids), icebergCompat* (Iceberg metadata on every add),
clustering (Delta liquid clustering owns the layout), typeWidening (files of an older type), and any newer one."""


def open_table(uri: str, storage_options: Mapping[str, str] | None = None) -> DeltaTable:
    location = normalize_uri(uri)
    try:
        return DeltaTable(location, storage_options=dict(storage_options or {}))
    except TableNotFoundError:
        raise TableError(f"{uri} is not a Delta table (no _delta_log found)") from None
    except (DeltaError, OSError) as error:
        raise TableError(f"cannot open Delta table {uri}: {describe_storage_error(error)}") from None


def arrow_schema(table: DeltaTable) -> pa.Schema:
    return pa.schema(table.schema().to_arrow())


def resolve_cluster_key(
    table: DeltaTable,
    cluster_by: Sequence[str] | None,
    uri: str = "",
    *,
    keyless: bool = False,
    curve: str | None = None,
) -> ClusterKey:
    """The key from `cluster_by`, else the table property `recluster.clusterBy`, else a clear error (or, with
    `keyless`, the empty key: compaction needs none). Its curve: `curve`, else the table property
    `recluster.curve`, else hilbert for two or more columns. Range bounds are the snapshot's (`with_bounds`)."""
    names = list(cluster_by or [])
    if not names:
        names = parse_columns(table.metadata().configuration.get(CLUSTER_BY_PROPERTY, ""))
    if not names and keyless:
        return ClusterKey(())
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
    chosen = curve or table.metadata().configuration.get(CURVE_PROPERTY)
    resolved = parse_curve(chosen) if chosen else default_curve(len(columns))
    if resolved is not Curve.LINEAR and len(columns) > MAX_CURVE_COLUMNS:
        raise TableError(
            f"a {resolved} curve takes at most {MAX_CURVE_COLUMNS} key columns, not {len(columns)}; "
            "use fewer columns or USING LINEAR"
        )
    return ClusterKey(tuple(columns), resolved)


def with_bounds(
    key: ClusterKey, properties: Mapping[str, str], uri: str, storage_options: Mapping[str, str] | None
) -> ClusterKey:
    """A curve key with the range bounds the table property `recluster.curveRanges` names (None when it names
    none, or bounds of other columns: the first merge samples new ones)."""
    if not key.on_curve:
        return key
    bounds_id = properties.get(RANGES_PROPERTY)
    if not bounds_id:
        return dataclasses.replace(key, bounds=None)
    bounds = load_range_bounds(uri, storage_options or {}, bounds_id)
    return dataclasses.replace(key, bounds=bounds if bounds.columns == key.names else None)


def _has_variant(schema_node: Any) -> bool:
    """Whether a Delta schema (JSON) has a column of variant type anywhere (names and metadata aside)."""
    if isinstance(schema_node, dict):
        return any(_has_variant(v) for k, v in schema_node.items() if k not in ("name", "metadata"))
    if isinstance(schema_node, list):
        return any(_has_variant(v) for v in schema_node)
    return bool(schema_node == "variant")


def check_supported(table: DeltaTable) -> None:
    """Refuse tables whose layout this engine cannot rewrite correctly: one line naming the feature."""
    mode = table.metadata().configuration.get("delta.columnMapping.mode", "none")
    if mode != "none":
        raise TableError(f"column mapping mode {mode!r} is not supported (files use physical column names)")
    protocol = table.protocol()
    features = set(protocol.reader_features or []) - SUPPORTED_READER_FEATURES
    if "variantType" in features and not _has_variant(json.loads(table.schema().to_json())):
        features.discard("variantType")  # older delta-rs added it on any property change of a table with features
    if features:
        raise TableError(f"unsupported Delta reader features: {', '.join(sorted(features))}")
    writer = set(protocol.writer_features or []) - SUPPORTED_WRITER_FEATURES
    if "variantType" in writer and not _has_variant(json.loads(table.schema().to_json())):
        writer.discard("variantType")
    if writer:
        raise TableError(
            f"unsupported Delta writer features: {', '.join(sorted(writer))} (recluster cannot "
            f"rewrite files of such a table correctly)"
        )


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


def _epoch_ms(value: Any) -> int:
    """modificationTime as epoch milliseconds (delta-rs gives int64 ms; a timestamp type is converted)."""
    if value is None:
        return 0
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return int(aware.timestamp() * 1000)
    return int(value)


def blocks_from_actions(
    actions: pa.Table,
    key: ClusterKey,
    partition_columns: Sequence[str],
    table_uri: str,
    storage_options: Mapping[str, str] | None = None,
    deletion_vectors: Mapping[str, DeletionVector] | None = None,
) -> list[Block]:
    """Blocks from `get_add_actions(flatten=True)` rows; footer fallback for key columns without stats.
    `deletion_vectors` maps a path (as logged) to its file's deletion vector."""
    paths = actions.column("path").to_pylist()
    sizes = actions.column("size_bytes").to_pylist()
    rows = _column(actions, "num_records") or [None] * len(paths)
    modified = _column(actions, "modification_time") or [0] * len(paths)
    per_column = [
        (_column(actions, f"min.{c}"), _column(actions, f"max.{c}"), _column(actions, f"null_count.{c}"))
        for c in key.names
    ]
    partitions = [_column(actions, f"partition.{c}") or [None] * len(paths) for c in partition_columns]
    vectors = deletion_vectors or {}
    blocks = []
    for i, path in enumerate(paths):
        partition: Partition = tuple(
            (name, partition_text(values[i])) for name, values in zip(partition_columns, partitions, strict=True)
        )
        row_count = rows[i]
        parsed = [_log_value(lo, hi, nc, row_count, i) for lo, hi, nc in per_column]
        low_values: tuple[Any, ...] | None = None
        high_values: tuple[Any, ...] | None = None
        if not key.columns:  # no key: no range; the file only counts for its size (compaction)
            if row_count is None:
                row_count = footer_stats(table_uri, path, (), storage_options).rows
        elif all(ok for ok, _, _ in parsed) and row_count is not None:
            low_values = tuple(v for _, v, _ in parsed)
            high_values = tuple(v for _, _, v in parsed)
        else:
            footer = footer_stats(table_uri, path, key.names, storage_options)
            row_count, low_values, high_values = footer.rows, footer.mins, footer.maxes
        prefix = encode_partition(partition)
        written = parse_data_file_name(path)
        fingerprint = written.fingerprint if written else None
        curve_range = None
        if key.on_curve:  # ranged by the curve values in its name; any other file is not sorted on this curve yet
            if written is not None and written.fingerprint == key.fingerprint and written.curve_range is not None:
                curve_range = written.curve_range
            else:  # it may hold any curve value: it spans the whole curve (and is merged onto it by absorbing)
                fingerprint = None
                curve_range = whole_curve(len(key.columns)) if key.bounds is not None and low_values else None
        min_key: bytes | None
        max_key: bytes | None
        if curve_range is not None:
            min_key = encode_key(curve_range[:1], (CURVE_COLUMN,), prefix)
            max_key = encode_key(curve_range[1:], (CURVE_COLUMN,), prefix)
        elif key.on_curve or low_values is None or high_values is None:
            min_key = max_key = None
        else:
            min_key, max_key = encode_key(low_values, key.columns, prefix), encode_key(high_values, key.columns, prefix)
        blocks.append(
            Block(
                path=path,
                rows=int(row_count or 0),
                bytes=int(sizes[i]),
                min_key=min_key,
                max_key=max_key,
                min_values=low_values,
                max_values=high_values,
                level=written.level if written and fingerprint else 0,
                partition=partition,
                key_fingerprint=fingerprint,
                modified_ms=_epoch_ms(modified[i]),
                deletion_vector=vectors.get(path),
                curve_range=curve_range,
            )
        )
    return blocks


def live_deletion_vectors(
    table: DeltaTable, location: str, storage_options: Mapping[str, str] | None
) -> Mapping[str, DeletionVector]:
    """The deletion vector of every live file that has one, read from the log itself (delta-rs's file list does
    not carry them). Only a table whose protocol has the deletionVectors feature can have any."""
    if "deletionVectors" not in (table.protocol().reader_features or []):
        return {}
    from recluster.delta.replay import LogReplayError, replay_log

    try:
        return replay_log(location, storage_options, table.version()).deletion_vectors
    except LogReplayError as error:
        raise TableError(str(error)) from None


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
    key = with_bounds(key, metadata.configuration, location, storage_options)
    vectors = live_deletion_vectors(table, location, storage_options)
    blocks = blocks_from_actions(actions, key, partition_columns, location, storage_options, vectors)
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
            "modification_time": int(add.get("modificationTime") or 0),
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
    vectors = {a["path"]: DeletionVector.from_log(a["deletionVector"]) for a in adds if a.get("deletionVector")}
    return blocks_from_actions(pa.Table.from_pylist(rows), key, partition_columns, table_uri, storage_options, vectors)
