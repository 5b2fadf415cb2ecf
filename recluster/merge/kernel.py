"""The merge kernel (docs/guarantees.md), plain Arrow: sorted rows in, Parquet files with full Delta stats out.

`write_sorted_partition` cuts files where the key value changes (a value never spans two outputs unless it alone
exceeds the target), names them with their level and key fingerprint and writes them through pyarrow.fs with the
table's storage options, so the same code writes to a local disk, S3, GCS or Azure. It runs in Spark tasks for big
merges (merge/spark_tasks.py) and in the process for small ones (`merge_in_process`): one function, both placements.
Inputs are read with their deletion vectors applied (`read_data_files`). Each file's Delta stats come from
delta/file_stats.py; its Parquet options keep every reader's row-group filters right (`float_column_options`).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from recluster.core.blocks import LEVEL_CONSTANT, WrittenFile, data_file_name
from recluster.core.deletion_vectors import DeletionVector, DeletionVectorError, keep_mask
from recluster.core.segments import file_segments, files_for_rows
from recluster.core.selection.plan import MergeTask, UpperRun
from recluster.delta.column_mapping import (
    is_mapped,
    logical_batch,
    stored_columns,
    stored_schema,
    stored_stats,
    stored_table,
)
from recluster.delta.file_stats import delta_stats, parse_stats, stats_columns, stats_text
from recluster.delta.replay import read_deleted_positions
from recluster.delta.row_tracking import RowTracking, with_row_tracking
from recluster.delta.storage import file_location, table_filesystem
from recluster.merge.curve_column import CURVE_FIELD, CurveSpec, with_curve_column
from recluster.settings import ParquetSettings


def key_run_starts(table: pa.Table, key: Sequence[str]) -> npt.NDArray[np.int64]:
    """Row positions where the key value changes in a sorted table (NULL equals NULL, NaN equals NaN)."""
    n = table.num_rows
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    differs = np.zeros(n - 1, dtype=bool)
    for name in key:
        column = table.column(name).combine_chunks()
        previous, current = column.slice(0, n - 1), column.slice(1)
        not_equal = pc.not_equal(previous, current)
        if pa.types.is_floating(column.type):
            both_nan = pc.fill_null(pc.and_(pc.is_nan(previous), pc.is_nan(current)), False)
            not_equal = pc.and_not(not_equal, both_nan)
        null_differs = pc.xor(pc.is_null(previous), pc.is_null(current))
        changed = pc.or_(pc.fill_null(not_equal, False), null_differs)
        differs |= changed.to_numpy(zero_copy_only=False)
    return np.concatenate(([0], np.flatnonzero(differs) + 1)).astype(np.int64)


@dataclass(frozen=True, slots=True)
class InputSpec:
    """What a Spark task needs to read a task's files through pyarrow.fs (picklable, no Spark objects)."""

    table_root: str
    storage_options: Mapping[str, str] = field(repr=False)
    paths: tuple[str, ...]
    """Relative to the table root, URL-encoded as in the log."""
    schema: pa.Schema
    """The Arrow schema Spark expects back: the table's data columns as Spark types them."""
    deletion_vectors: tuple[DeletionVector | None, ...] = ()
    """Per path, its deletion vector: the rows it deletes are never read."""
    stored: pa.Schema | None = None
    """The schema as data files hold it under column mapping (physical names); None: as `schema`."""
    row_tracking: RowTracking | None = None
    """Row ids and commit versions to keep (`schema` then ends with the materialized columns)."""


def read_data_files(spec: InputSpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """File indexes in, the rows of those files out, read through pyarrow.fs (in the process or a Spark task)."""
    filesystem = table_filesystem(spec.table_root, spec.storage_options)
    for batch in batches:
        for index in batch.column(0).to_pylist():
            location = file_location(spec.table_root, spec.paths[index])
            vector = spec.deletion_vectors[index] if spec.deletion_vectors else None
            with filesystem.open_input_file(location) as handle:
                # pre_buffer coalesces a row group's column chunks into few large reads: on an object store
                # 4 GETs instead of 34 for a 2,000,000-row, 8-row-group file (4x faster against a local S3 server)
                parquet = pq.ParquetFile(handle, pre_buffer=True, coerce_int96_timestamp_unit="us")
                keep = None if vector is None else live_rows_mask(spec, vector, parquet.metadata.num_rows)
                stored = spec.stored or spec.schema
                start = 0
                for piece in parquet.iter_batches(columns=stored_columns(stored, parquet.schema_arrow.names)):
                    first, start = start, start + piece.num_rows
                    if spec.row_tracking is not None:  # before the vector's filter: ids count deleted rows
                        piece = with_row_tracking(piece, spec.row_tracking, index, first)
                    if keep is not None:
                        piece = piece.filter(pa.array(keep[first:start]))
                    yield logical_batch(piece, spec.schema, stored)


def live_rows_mask(spec: InputSpec, vector: DeletionVector, rows: int) -> npt.NDArray[np.bool_]:
    """Which of a file's rows its deletion vector leaves live; the vector must delete exactly `cardinality` rows
    of this file, else the merge fails (nothing is committed) rather than resurrect or drop a row."""
    deleted = read_deleted_positions(spec.table_root, spec.storage_options, vector)
    if len(deleted) != vector.cardinality:
        raise DeletionVectorError(
            f"deletion vector holds {len(deleted)} rows, its cardinality says {vector.cardinality}"
        )
    return keep_mask(rows, deleted)


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """Everything a Spark task needs to write one merge task's outputs (picklable, no Spark objects)."""

    table_root: str
    storage_options: Mapping[str, str] = field(repr=False)
    directory: str
    schema: pa.Schema
    key: tuple[str, ...]
    stats_columns: tuple[str, ...]
    output_level: int
    fingerprint: str
    run_id: str
    target_rows: int
    target_file_bytes: int
    bytes_per_row: float
    horizon_ms: int | None = None
    split_values: tuple[Any, ...] = ()
    upper_run: UpperRun | None = None
    """Pieces whose first key column starts above its value are written into its run (`MergeTask.upper_run`)."""
    parquet: ParquetSettings = field(default_factory=ParquetSettings)
    curve: CurveSpec | None = None
    """A curve key's spec: rows are sorted and files cut on the curve value (None: on the key columns)."""
    write_threads: int = 1
    """Output files of one sorted partition written at once (in the process; Spark tasks write one at a time)."""
    stored: pa.Schema | None = None
    """The schema as data files hold it under column mapping (physical names, field ids); None: as `schema`."""
    row_tracking: RowTracking | None = None
    """The inputs' row ids to keep: `schema` ends with the materialized row-id and row-commit-version columns."""


def split_positions(column: pa.ChunkedArray | pa.Array, values: Sequence[Any]) -> list[int]:
    """Row positions in a sorted (NULLs first) column just before and just after each value's rows: cutting
    there keeps the output files apart from a file holding exactly that value range (absorb's neighbours)."""
    positions = []
    nulls = column.null_count
    for value in values:
        scalar = pc.cast(pa.scalar(value), column.type, safe=False)  # a cut point: truncating it is harmless
        positions.append(nulls + int(pc.sum(pc.less(column, scalar)).as_py() or 0))
        positions.append(nulls + int(pc.sum(pc.less_equal(column, scalar)).as_py() or 0))
    return positions


def starts_above(column: pa.ChunkedArray, value: Any) -> bool:
    """Whether a sorted (NULLs first) column's first value is above `value`."""
    first = column[0]
    return first.is_valid and bool(pc.greater(first, pc.cast(pa.scalar(value), column.type, safe=False)).as_py())


def write_output_file(spec: OutputSpec, filesystem: Any, piece: pa.Table, level: int) -> dict[str, Any]:
    """Write one output file of a sorted piece; its result row (path, rows, bytes, Delta stats, level). Under a
    curve key the piece's curve values are dropped from the data and their range goes into the file's name."""
    curve_range = None
    if spec.curve is not None:
        extremes = pc.min_max(piece.column(CURVE_FIELD.name))
        curve_range = (int(extremes["min"].as_py()), int(extremes["max"].as_py()))
        piece = piece.drop_columns([CURVE_FIELD.name])
    run_id, horizon_ms = spec.run_id, spec.horizon_ms
    if spec.upper_run is not None and starts_above(piece.column(spec.key[0]), spec.upper_run.above):
        run_id, horizon_ms = spec.upper_run.run_id, spec.upper_run.horizon_ms
    name = data_file_name(level, spec.fingerprint, run_id, horizon_ms, curve_range)
    relative = os.path.join(spec.directory, name)
    location = file_location(spec.table_root, relative)
    if os.path.dirname(location):
        filesystem.create_dir(os.path.dirname(location), recursive=True)  # object stores: no request
    stats = delta_stats(piece, spec.stats_columns, spec.key)
    if spec.stored is not None:
        piece, stats = stored_table(piece, spec.stored), stored_stats(stats, spec.schema, spec.stored)
    with filesystem.open_output_stream(location) as sink:
        pq.write_table(
            piece,
            sink,
            compression=spec.parquet.codec,
            compression_level=spec.parquet.level,
            row_group_size=spec.parquet.row_group_rows,
            **float_column_options(piece, spec.parquet.dictionary),
        )
        size = sink.tell()
    return {"path": relative, "rows": piece.num_rows, "bytes": size, "stats": stats_text(stats), "level": level}


def float_column_options(piece: pa.Table, dictionary: bool) -> dict[str, Any]:
    """`write_statistics` and `use_dictionary` for one output file: every column has statistics and (when
    `dictionary`) a dictionary, except a floating-point column of this file that holds NaN or a zero, which
    readers' row-group filters would otherwise drop rows of (docs/guarantees.md, "Statistics"):
    - NaN: Arrow leaves NaN out of min/max, so a row group of NaN and values up to 5 says max 5, and parquet-mr
      (Spark's Parquet reader) and DataFusion skip it for `f >= double('inf')` or `f = double('NaN')`, which NaN
      satisfies in their order (NaN above +inf, equal to itself). No min/max: nothing to skip it by.
    - zeros: parquet-mr's dictionary filter looks the predicate's value up among boxed Doubles, where -0.0 and 0.0
      differ, and skips a row group whose dictionary holds -0.0 for `f = 0.0` or `f >= 0.0`, though Spark holds
      -0.0 = 0.0 (and the other way round). Plain encoding: no dictionary to look up.
    A column without NaN or zeros keeps both: its min/max and dictionary are exact."""
    no_statistics, no_dictionary = set(), set()
    for path, column in float_columns(piece):
        if pc.any(pc.is_nan(column)).as_py():
            no_statistics.add(path)
        if pc.any(pc.equal(column, 0.0)).as_py():
            no_dictionary.add(path)
    paths = parquet_paths(piece.schema) if no_statistics or no_dictionary else ()
    return {
        "write_statistics": [p for p in paths if p not in no_statistics] if no_statistics else True,
        "use_dictionary": dictionary and ([p for p in paths if p not in no_dictionary] if no_dictionary else True),
    }


def float_columns(table: pa.Table) -> list[tuple[str, pa.ChunkedArray]]:
    """The floating-point columns and struct fields (those readers push predicates down to) by Parquet path."""
    while any(pa.types.is_struct(f.type) for f in table.schema):
        table = table.flatten()  # a struct's fields become columns named `struct.field`
    named = zip(table.column_names, table.columns, strict=True)
    return [(name, column) for name, column in named if pa.types.is_floating(column.type)]


@functools.lru_cache(maxsize=64)
def parquet_paths(schema: pa.Schema) -> tuple[str, ...]:
    """The leaf column paths pyarrow writes `schema` as (`s.x`, `l.list.element`): what per-column options name."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    metadata = pq.read_metadata(pa.BufferReader(sink.getvalue()))
    return tuple(metadata.schema.column(i).path for i in range(metadata.num_columns))


def sorted_schema(spec: OutputSpec) -> pa.Schema:
    """The schema of the rows the kernel sorts: the data columns, then the curve value under a curve key."""
    return spec.schema if spec.curve is None else spec.schema.append(CURVE_FIELD)


def write_sorted_partition(spec: OutputSpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One sorted range in, one result row per written file out (in the process or a Spark task)."""
    collected = [batch for batch in batches if batch.num_rows]
    if not collected:
        return
    table = pa.Table.from_batches(collected)
    schema = sorted_schema(spec) if table.num_columns > len(spec.schema) else spec.schema
    table = with_curve_column(table.rename_columns(schema.names).cast(schema), spec.curve)
    files_by_rows = files_for_rows(table.num_rows, spec.target_rows)
    files_by_bytes = math.ceil(table.num_rows * spec.bytes_per_row / spec.target_file_bytes)
    # A file's key range is per-column (min tuple, max tuple): two files that split one value of the first
    # key column overlap whatever the other columns hold, so files are cut where the first column changes,
    # and a first-column value too big for one file is split only where the whole key changes. Without a key
    # (compaction) every row may start a file: files are cut by size alone.
    # Under a curve key files are cut where the curve value changes.
    cut_key = (CURVE_FIELD.name,) if spec.curve is not None else spec.key
    run_starts = key_run_starts(table, cut_key) if cut_key else np.arange(table.num_rows, dtype=np.int64)
    first_starts = key_run_starts(table, cut_key[:1]) if len(cut_key) > 1 else run_starts
    segments = file_segments(
        first_starts,
        table.num_rows,
        spec.target_rows,
        max(1, files_by_rows, files_by_bytes),
        inner_starts=run_starts if len(cut_key) > 1 else None,
        forced=split_positions(table.column(cut_key[0]), spec.split_values) if cut_key else (),
    )
    filesystem = table_filesystem(spec.table_root, spec.storage_options)

    def write(segment: tuple[int, int]) -> dict[str, Any]:
        start, stop = segment
        constant = not np.any((run_starts > start) & (run_starts < stop))  # one key value only
        level = LEVEL_CONSTANT if constant and stop - start >= spec.target_rows else spec.output_level
        return write_output_file(spec, filesystem, table.slice(start, stop - start), level)

    if spec.write_threads > 1 and len(segments) > 1:  # pyarrow compresses and writes with the GIL released
        with ThreadPoolExecutor(min(spec.write_threads, len(segments))) as pool:
            results = list(pool.map(write, segments))
    else:
        results = [write(segment) for segment in segments]
    yield pa.RecordBatch.from_pylist(
        results,
        schema=pa.schema(
            [
                ("path", pa.string()),
                ("rows", pa.int64()),
                ("bytes", pa.int64()),
                ("stats", pa.string()),
                ("level", pa.int32()),
            ]
        ),
    )


def output_spec(
    task: MergeTask,
    *,
    table_root: str,
    data_schema: pa.Schema,
    properties: Mapping[str, str],
    key: Sequence[str],
    fingerprint: str,
    run_id: str,
    target_rows: int,
    target_file_bytes: int,
    storage_options: Mapping[str, str] | None = None,
    parquet: ParquetSettings | None = None,
    curve: CurveSpec | None = None,
    row_tracking: RowTracking | None = None,
) -> OutputSpec:
    """What the writer needs for one task's outputs, wherever the kernel runs."""
    schema = data_schema if row_tracking is None else pa.schema([*data_schema, *row_tracking.fields])
    return OutputSpec(
        table_root=table_root,
        storage_options=dict(storage_options or {}),
        directory=os.path.dirname(task.files[0].path),
        schema=schema,
        key=tuple(key),
        stats_columns=tuple(stats_columns(data_schema, properties)),
        output_level=task.output_level,
        fingerprint=fingerprint,
        run_id=task.output_run or run_id,
        target_rows=target_rows,
        target_file_bytes=target_file_bytes,
        bytes_per_row=task.bytes / max(task.rows, 1),
        horizon_ms=task.horizon_ms,
        split_values=task.split_values,
        upper_run=task.upper_run,
        parquet=parquet or ParquetSettings(),
        curve=curve,
        stored=stored_schema(schema, schema) if is_mapped(data_schema) else None,
        row_tracking=row_tracking,
    )


def written_files(task: MergeTask, rows: Iterable[Mapping[str, Any]]) -> list[WrittenFile]:
    return [
        WrittenFile(
            path=row["path"],
            rows=row["rows"],
            bytes=row["bytes"],
            partition=task.partition,
            stats=parse_stats(row["stats"]),
            level=row["level"],
        )
        for row in rows
    ]
