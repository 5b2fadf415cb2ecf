"""Data files as blocks: a snapshot's add actions (delta-rs's flattened file list) or a commit's `add` actions
-> `Block`s with encoded key ranges, levels from file names, deletion vectors.

Built column-wise: the log's stats become each key column's effective min/max arrays at once (a file with
NULLs has a NULL minimum, an all-NULL file NULL..NULL) and numeric keys are encoded with numpy
(`keys.encode_keys`); only a key column without usable log stats falls back to the Parquet footer, read once per
file and cached (data files are immutable, so the cache never goes stale).
"""

from __future__ import annotations

import datetime as dt
import decimal
import gc
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from recluster.core.blocks import Block, Partition, parse_data_file_name
from recluster.core.curves import whole_curve
from recluster.core.deletion_vectors import DeletionVector
from recluster.core.keys import CURVE_COLUMN, ClusterKey, KeyColumn, KeyType, encode_key, encode_keys, encode_partition
from recluster.delta.storage import file_location, table_filesystem

Column: TypeAlias = pa.Array | pa.ChunkedArray


def partition_value_text(value: Any) -> str | None:
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


def _column(actions: pa.Table, name: str) -> Column | None:
    return actions.column(name) if name in actions.column_names else None


@dataclass(frozen=True, slots=True)
class ColumnStats:
    """One key column's log stats for every file, as ranges use them."""

    lows: Column
    """The file's minimum; NULL when the file holds NULLs (they sort first)."""
    highs: Column
    """The file's maximum; NULL when every value is NULL."""
    usable: npt.NDArray[np.bool_]
    """The log has a row count and a null count, and min/max unless every value is NULL."""


def column_stats(actions: pa.Table, name: str, rows: Column) -> ColumnStats:
    count = actions.num_rows
    nulls = _column(actions, f"null_count.{name}")
    lows = _column(actions, f"min.{name}")
    highs = _column(actions, f"max.{name}")
    if nulls is None:
        return ColumnStats(pa.nulls(count), pa.nulls(count), np.zeros(count, dtype=bool))
    lows = pa.nulls(count) if lows is None else lows  # no file has a minimum (all NULL, say): NULL for each
    highs = pa.nulls(count) if highs is None else highs
    nulls = nulls.cast(pa.int64())
    all_null = pc.fill_null(pc.equal(nulls, rows), False)
    has_nulls = pc.fill_null(pc.greater(nulls, 0), False)
    valid_range = pc.and_(pc.is_valid(lows), pc.is_valid(highs))
    usable = pc.and_(pc.and_(pc.is_valid(nulls), pc.is_valid(rows)), pc.or_(all_null, valid_range))
    return ColumnStats(
        lows=pc.if_else(has_nulls, pa.scalar(None, lows.type), lows),
        highs=pc.if_else(all_null, pa.scalar(None, highs.type), highs),
        usable=usable.to_numpy(zero_copy_only=False),
    )


def _epoch_ms(column: Column | None, count: int) -> list[int]:
    """modificationTime as epoch milliseconds (delta-rs gives int64 ms; a timestamp type is converted)."""
    if column is None:
        return [0] * count
    if pa.types.is_timestamp(column.type):
        column = pc.cast(column, pa.timestamp("ms", column.type.tz), safe=False)
    return list(column.cast(pa.int64()).fill_null(0).to_pylist())


def _encoded(columns_values: Sequence[Column], key: ClusterKey, prefixes: Sequence[bytes]) -> list[bytes | None]:
    """Every file's key from per-column values: numpy where the types allow, else one `encode_key` per file."""
    fast = encode_keys(columns_values, key.columns, prefixes)
    if fast is not None:
        return list(fast)
    values = [c.to_pylist() for c in columns_values]
    return [
        encode_key(row, key.columns, prefix) for row, prefix in zip(zip(*values, strict=True), prefixes, strict=True)
    ]


@contextmanager
def cycle_collection_paused() -> Iterator[None]:
    """Pause Python's cycle collector while a million blocks are made: it would scan every live object again and
    again (about 40% of the time at 1,000,000 files). Blocks hold no cycles; reference counting still frees."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


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
    with cycle_collection_paused():
        return _blocks_from_actions(actions, key, partition_columns, table_uri, storage_options, deletion_vectors)


def _blocks_from_actions(
    actions: pa.Table,
    key: ClusterKey,
    partition_columns: Sequence[str],
    table_uri: str,
    storage_options: Mapping[str, str] | None,
    deletion_vectors: Mapping[str, DeletionVector] | None,
) -> list[Block]:
    count = actions.num_rows
    paths = actions.column("path").to_pylist()
    sizes = actions.column("size_bytes").to_pylist()
    row_column = _column(actions, "num_records")
    row_column = pa.nulls(count, pa.int64()) if row_column is None else row_column.cast(pa.int64())
    rows = row_column.to_pylist()
    modified = _epoch_ms(_column(actions, "modification_time"), count)
    part_values = [_column(actions, f"partition.{c}") for c in partition_columns]
    partition_lists = [[None] * count if v is None else v.to_pylist() for v in part_values]
    partitions: list[Partition] = (
        [
            tuple(zip(partition_columns, map(partition_value_text, row), strict=True))
            for row in zip(*partition_lists, strict=True)
        ]
        if partition_columns
        else [()] * count
    )
    prefix_of = {p: encode_partition(p) for p in set(partitions)}
    prefixes = [prefix_of[p] for p in partitions]
    stats = [column_stats(actions, name, row_column) for name in key.names]
    from_log = np.logical_and.reduce([s.usable for s in stats]) if stats else np.zeros(count, dtype=bool)
    lows: list[tuple[Any, ...] | None] = (
        list(zip(*(s.lows.to_pylist() for s in stats), strict=True)) if stats else [None] * count
    )
    highs: list[tuple[Any, ...] | None] = (
        list(zip(*(s.highs.to_pylist() for s in stats), strict=True)) if stats else [None] * count
    )
    on_curve = key.on_curve
    linear = bool(stats) and not on_curve
    min_keys: list[bytes | None] = _encoded([s.lows for s in stats], key, prefixes) if linear else [None] * count
    max_keys: list[bytes | None] = _encoded([s.highs for s in stats], key, prefixes) if linear else [None] * count
    for i in np.flatnonzero(~from_log).tolist() if key.columns else ():  # no usable log stats: the footer's
        footer = footer_stats(table_uri, paths[i], key.names, storage_options)
        rows[i], lows[i], highs[i] = footer.rows, footer.mins, footer.maxes
        usable = linear and footer.mins is not None and footer.maxes is not None
        min_keys[i] = encode_key(footer.mins, key.columns, prefixes[i]) if usable else None  # type: ignore[arg-type]
        max_keys[i] = encode_key(footer.maxes, key.columns, prefixes[i]) if usable else None  # type: ignore[arg-type]
    for i in [i for i, r in enumerate(rows) if r is None] if not key.columns else ():  # keyless: only the rows
        rows[i] = footer_stats(table_uri, paths[i], (), storage_options).rows
    written = list(map(parse_data_file_name, paths))
    fingerprints = [w.fingerprint if w else None for w in written]
    curve_ranges: list[tuple[int, int] | None] = [None] * count
    for i in range(count) if on_curve else ():  # ranged by the curve values in its name
        name = written[i]
        if name is not None and name.fingerprint == key.fingerprint and name.curve_range is not None:
            curve_ranges[i] = name.curve_range
        else:  # not sorted on this curve yet: it may hold any curve value (and is merged onto it by absorbing)
            fingerprints[i] = None
            curve_ranges[i] = whole_curve(len(key.columns)) if key.bounds is not None and lows[i] else None
        if (curve := curve_ranges[i]) is not None:
            min_keys[i] = encode_key(curve[:1], (CURVE_COLUMN,), prefixes[i])
            max_keys[i] = encode_key(curve[1:], (CURVE_COLUMN,), prefixes[i])
    levels = [w.level if w and f else 0 for w, f in zip(written, fingerprints, strict=True)]
    vectors = deletion_vectors or {}
    dvs = [vectors.get(p) for p in paths] if vectors else [None] * count
    # positional, in Block's field order: a million keyword calls cost a third more
    return list(
        map(
            Block,
            paths,
            [r or 0 for r in rows],
            sizes,
            min_keys,
            max_keys,
            lows,
            highs,
            levels,
            partitions,
            fingerprints,
            modified,
            dvs,
            curve_ranges,
        )
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
