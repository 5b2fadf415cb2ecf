"""Data files as blocks: a snapshot's add actions (delta-rs's flattened file list) or a commit's `add` actions
-> `Block`s with encoded key ranges, levels from file names, deletion vectors.

Built column-wise: the log's stats become each key column's effective min/max arrays at once (a file with
NULLs has a NULL minimum, an all-NULL file NULL..NULL) and numeric keys are encoded with numpy
(`key_encoding.encode_keys`); only a key column without usable log stats falls back to the Parquet footer, read once
per file and cached (data files are immutable, so the cache never goes stale).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from recluster.core.block_table import NO_HORIZON, BlockTable
from recluster.core.blocks import Block, Partition
from recluster.core.curves import whole_curve
from recluster.core.deletion_vectors import DeletionVector, match_deletion_vectors
from recluster.core.key_encoding import (
    arrow_numbers,
    encode_key,
    encode_keys,
    encode_partition,
    number_words,
    signed_words,
)
from recluster.core.keys import ClusterKey, KeyColumn, KeyType
from recluster.core.ranks import IntArray, key_arrays
from recluster.delta.file_names import parse_file_names
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
    return ColumnStats(  # (the log's own arrays when nothing is blanked: no copy of a million values)
        lows=pc.if_else(has_nulls, pa.scalar(None, lows.type), lows) if pc.any(has_nulls).as_py() else lows,
        highs=pc.if_else(all_null, pa.scalar(None, highs.type), highs) if pc.any(all_null).as_py() else highs,
        usable=usable.to_numpy(zero_copy_only=False),
    )


def _epoch_ms(column: Column | None, count: int) -> Column:
    """modificationTime as epoch milliseconds (delta-rs gives int64 ms; a timestamp type is converted)."""
    if column is None:
        return pa.array(np.zeros(count, dtype=np.int64))
    if pa.types.is_timestamp(column.type):
        column = pc.cast(column, pa.timestamp("ms", column.type.tz), safe=False)
    return column.cast(pa.int64())


def _as_logged(column: Column) -> Column | IntArray:
    """The log's column as it is (the floor holds it already), or numbers of our own when it has NULLs (0)."""
    return column if not column.null_count else _numbers(column)


def _numbers(column: Column) -> IntArray:
    """An integer column as int64 numbers of our own (NULL: 0)."""
    numbers: IntArray = arrow_numbers(column.cast(pa.int64()), 0)
    return numbers


def file_partitions(actions: pa.Table, partition_columns: Sequence[str]) -> tuple[IntArray, list[Partition]]:
    """Every file's partition as a code into the distinct partitions (one Python tuple per partition)."""
    count = actions.num_rows
    if not partition_columns:
        return np.zeros(count, dtype=np.int32), [()]
    combined = np.zeros(count, dtype=np.int64)  # mixed-radix code of the column codes
    dictionaries: list[list[str | None]] = []
    for name in partition_columns:
        values = _column(actions, f"partition.{name}")
        if values is None:
            values = pa.nulls(count, pa.string())
        elif isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        encoded = pc.dictionary_encode(values, null_encoding="encode")
        texts = [partition_value_text(v) for v in encoded.dictionary.to_pylist()]
        combined = combined * max(len(texts), 1) + encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        dictionaries.append(texts)
    distinct, codes = np.unique(combined, return_inverse=True)
    partitions = []
    for value in distinct.tolist():
        parts = []
        for name, texts in zip(reversed(partition_columns), reversed(dictionaries), strict=True):
            value, at = divmod(value, max(len(texts), 1))
            parts.append((name, texts[at]))
        partitions.append(tuple(reversed(parts)))
    return codes.astype(np.int32), partitions


def _encoded(columns_values: Sequence[Column], key: ClusterKey, prefixes: Sequence[bytes]) -> list[bytes | None]:
    """Every file's key from per-column values: numpy where the types allow, else one `encode_key` per file."""
    fast = encode_keys(columns_values, key.columns, prefixes)
    if fast is not None:
        return list(fast)
    values = [c.to_pylist() for c in columns_values]
    return [
        encode_key(row, key.columns, prefix) for row, prefix in zip(zip(*values, strict=True), prefixes, strict=True)
    ]


def blocks_from_actions(
    actions: pa.Table,
    key: ClusterKey,
    partition_columns: Sequence[str],
    table_uri: str,
    storage_options: Mapping[str, str] | None = None,
    deletion_vectors: Mapping[str, DeletionVector] | None = None,
) -> BlockTable:
    """Blocks from `get_add_actions(flatten=True)` rows; footer fallback for key columns without stats.
    `deletion_vectors` maps a path (as logged) to its file's deletion vector."""
    count = actions.num_rows
    paths = actions.column("path")
    sizes = _as_logged(actions.column("size_bytes").cast(pa.int64()))
    row_column = _column(actions, "num_records")
    row_column = pa.nulls(count, pa.int64()) if row_column is None else row_column.cast(pa.int64())
    modified = _as_logged(_epoch_ms(_column(actions, "modification_time"), count))
    partition_codes, partitions = file_partitions(actions, partition_columns)
    stats = [column_stats(actions, column.stored_name, row_column) for column in key.columns]
    from_log = np.logical_and.reduce([s.usable for s in stats]) if stats else np.zeros(count, dtype=bool)
    on_curve = key.on_curve
    linear = bool(stats) and not on_curve
    lows, highs = [s.lows for s in stats], [s.highs for s in stats]
    words = (
        (number_words(lows[0], key.columns[0]), number_words(highs[0], key.columns[0]))
        if linear
        and len(stats) == 1
        and from_log.all()
        and lows[0].null_count == 0
        and highs[0].null_count == 0  # (a NULL minimum is a shorter key)
        else (None, None)
    )
    min_keys: npt.NDArray[Any]
    max_keys: npt.NDArray[Any]
    key_list: tuple[list[bytes | None], list[bytes | None]] | None = None
    prefix_of = [encode_partition(p) for p in partitions]
    prefixes: list[bytes] = []
    if words[0] is not None and words[1] is not None:
        min_keys, max_keys = words[0], words[1]
    elif on_curve:  # words of the curve values in the file names, below
        min_keys, max_keys = np.zeros(count, np.uint64), np.zeros(count, np.uint64)
    else:
        prefixes = [prefix_of[c] for c in partition_codes.tolist()]
        key_list = (
            (_encoded(lows, key, prefixes), _encoded(highs, key, prefixes))
            if linear
            else ([None] * count, [None] * count)
        )
    footer_rows: dict[int, int] = {}
    clustered = from_log & linear
    ranged = np.full(count, bool(stats))
    overrides: dict[int, tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]] = {}
    for i in np.flatnonzero(~from_log).tolist() if key.columns else ():  # no usable log stats: the footer's
        path = paths[i].as_py()
        footer = footer_stats(table_uri, path, [c.stored_name for c in key.columns], storage_options)
        footer_rows[i] = footer.rows
        overrides[i] = (footer.mins, footer.maxes)
        ranged[i] = bool(footer.mins) and bool(footer.maxes)
        usable = linear and footer.mins is not None and footer.maxes is not None
        clustered[i] = usable
        if key_list is not None:
            key_list[0][i] = encode_key(footer.mins, key.columns, prefixes[i]) if usable else None  # type: ignore[arg-type]
            key_list[1][i] = encode_key(footer.maxes, key.columns, prefixes[i]) if usable else None  # type: ignore[arg-type]
    for i in np.flatnonzero(pc.is_null(row_column).to_numpy(zero_copy_only=False)).tolist() if not key.columns else ():
        footer_rows[i] = footer_stats(table_uri, paths[i].as_py(), (), storage_options).rows  # keyless: only rows
    names = parse_file_names(paths)
    fingerprint_codes, fingerprints = names.fingerprint_codes, list(names.fingerprints)
    curve_ranges: dict[int, tuple[int, int]] = {}
    if on_curve:  # ranged by the curve values in its name
        fingerprint_codes = fingerprint_codes.astype(np.int32)  # (a writable copy)
        current = fingerprints.index(key.fingerprint) if key.fingerprint in fingerprints else -1
        if None not in fingerprints:
            fingerprints.append(None)
        on = (fingerprint_codes == current) & (names.curve_lows >= 0)
        fingerprint_codes[~on] = fingerprints.index(None)
        curve_lows, curve_highs = np.where(on, names.curve_lows, 0), np.where(on, names.curve_highs, 0)
        if key.bounds is not None:  # not sorted on this curve yet: it may hold any curve value (absorbing merges it)
            spanning = ~on
            spanning[[i for i, (mins, _) in overrides.items() if not mins]] = False  # (no footer stats: no range)
            curve_lows[spanning], curve_highs[spanning] = whole_curve(len(key.columns))
            on |= spanning
        chosen = np.flatnonzero(on)
        ranges = zip(curve_lows[chosen].tolist(), curve_highs[chosen].tolist(), strict=True)
        curve_ranges = dict(zip(chosen.tolist(), ranges, strict=True))
        clustered |= on
        min_keys, max_keys = signed_words(curve_lows.astype(np.int64)), signed_words(curve_highs.astype(np.int64))
    if key_list is not None:
        min_keys, max_keys = key_arrays(*key_list)
    if fingerprints == [None]:  # nothing recluster wrote: every file appended, level 0
        levels = np.broadcast_to(np.int8(0), (count,))
    else:
        has_fingerprint = np.array([f is not None for f in fingerprints], dtype=bool)[fingerprint_codes]
        levels = np.where(has_fingerprint, names.levels, 0).astype(np.int8)
    absorbed = names.horizons != NO_HORIZON
    rows: Column | IntArray = row_column
    if footer_rows or row_column.null_count:  # rows the log lacks: filled in from the footers, else 0
        rows = _numbers(row_column)
        rows[list(footer_rows)] = list(footer_rows.values())
    modified_ms = modified if isinstance(modified, np.ndarray) else arrow_numbers(modified, 0)
    vectors = match_deletion_vectors(paths.to_pylist(), deletion_vectors) if deletion_vectors else {}
    return BlockTable(
        paths=paths,
        rows=rows,
        sizes=sizes,
        min_keys=min_keys,
        max_keys=max_keys,
        clustered=clustered,
        ranged=ranged,
        lows=lows,
        highs=highs,
        levels=levels,
        partition_codes=partition_codes,
        partitions=partitions,
        fingerprint_codes=fingerprint_codes,
        fingerprints=fingerprints,
        modified_ms=modified,
        ages=np.where(absorbed, names.run_numbers, modified_ms) if absorbed.any() else modified_ms,
        horizons=names.horizons,
        curve_ranges=curve_ranges,
        partition_prefixes=prefix_of if partition_columns and key_list is None else None,
        stats_overrides=overrides,
        deletion_vectors=vectors,
    )


def _stat_from_json(value: Any, column: KeyColumn) -> Any:
    """A Delta JSON stats value as the Python value `encode_key` expects for the column's type."""
    if value is None:
        return None
    match column.type:
        case KeyType.DECIMAL:
            # delta-rs writes decimal stats as JSON doubles: trust only a value written at the column's scale
            # (ours and Delta Spark's, digit for digit) or short enough to be exact, else let the footer supply
            # it (as delta-rs itself does).
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
            name = column.stored_name
            row[f"min.{name}"] = _stat_from_json(stats.get("minValues", {}).get(name), column)
            row[f"max.{name}"] = _stat_from_json(stats.get("maxValues", {}).get(name), column)
            row[f"null_count.{name}"] = stats.get("nullCount", {}).get(name)
        for name in partition_columns:
            row[f"partition.{name}"] = add.get("partitionValues", {}).get(name)
        rows.append(row)
    if not rows:
        return []
    vectors = {a["path"]: DeletionVector.from_log(a["deletionVector"]) for a in adds if a.get("deletionVector")}
    actions = pa.Table.from_pylist(rows)
    return list(blocks_from_actions(actions, key, partition_columns, table_uri, storage_options, vectors))
