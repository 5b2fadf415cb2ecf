"""The in-process placement of the merge kernel: no JVM, no Spark job, the driver's memory bounded.

A task of at most `merge.in_process_max_bytes` is read, sorted and written in one piece (`merge_in_process`).
A bigger one is range-partitioned like Spark's placement, by this process (`merge_range_partitioned`): quantile
bounds of the first key column from a sample, every input file routed once into per-range Arrow IPC spill files
on local disk, then each range read back, sorted and handed to `kernel.write_sorted_partition` — `threads`
ranges at a time, so memory holds about `threads` output files' rows whatever the task's size. A key value never
spans two ranges (a value equal to a bound starts the range), NULLs go first and NaN last, as Spark orders them.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from recluster.core.blocks import WrittenFile
from recluster.core.curves import sample_quantile_bounds
from recluster.core.selection.plan import MergeTask
from recluster.delta.column_mapping import logical_batch, stored_columns
from recluster.delta.storage import file_location, table_filesystem
from recluster.merge.curve_column import CURVE_FIELD, curve_column, sort_columns, with_curve_column
from recluster.merge.kernel import (
    InputSpec,
    OutputSpec,
    read_data_files,
    sorted_schema,
    write_sorted_partition,
    written_files,
)

SAMPLE_ROWS_PER_RANGE = 1000
"""Key values sampled per output range to place the bounds (Spark's RangePartitioner takes a few dozen)."""


def range_count(task: MergeTask, spec: OutputSpec) -> int:
    """As many ranges as output files: the count the Spark placement range-partitions into."""
    return max(1, math.ceil(task.rows / spec.target_rows), math.ceil(task.bytes / spec.target_file_bytes))


def _input_spec(task: MergeTask, spec: OutputSpec) -> InputSpec:
    return InputSpec(
        table_root=spec.table_root,
        storage_options=spec.storage_options,
        paths=tuple(block.path for block in task.files),
        schema=spec.schema,
        deletion_vectors=tuple(block.deletion_vector for block in task.files),
        stored=spec.stored,
        row_tracking=spec.row_tracking,
    )


def _read_files(source: InputSpec, indexes: Sequence[int]) -> Iterator[pa.RecordBatch]:
    batch = pa.record_batch([pa.array(indexes, pa.int64())], names=["id"])
    return read_data_files(source, iter([batch]))


def _nan_rank(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """0 for NULL, 1 for a number, 2 for NaN: Spark's ascending order puts NaN above +inf, Arrow next to NULLs."""
    nan = pc.fill_null(pc.is_nan(column), False)
    return pc.if_else(pc.is_null(column), 0, pc.if_else(nan, 2, 1)).cast(pa.int8())


def sort_by_key(table: pa.Table, key: Sequence[str]) -> pa.Table:
    """Rows in key order, NULLs first and NaN above +inf (Spark's asc_nulls_first)."""
    columns: dict[str, pa.ChunkedArray] = {}
    sort_keys = []
    for index, name in enumerate(key):
        column = table.column(name)
        if pa.types.is_floating(column.type):
            columns[f"rank{index}"] = _nan_rank(column)
            sort_keys.append((f"rank{index}", "ascending", "at_start"))
        columns[f"key{index}"] = column
        sort_keys.append((f"key{index}", "ascending", "at_start"))
    return table.take(pc.sort_indices(pa.table(columns), sort_keys=sort_keys))


def merge_in_process(task: MergeTask, spec: OutputSpec, threads: int = 1) -> list[WrittenFile]:
    """The kernel on a small task in one piece: its files read with their deletion vectors applied, sorted,
    and handed to `write_sorted_partition` as one sorted partition (`threads` output files written at once)."""
    source = _input_spec(task, spec)
    table = pa.Table.from_batches(list(_read_files(source, range(len(source.paths)))), schema=spec.schema)
    table = with_curve_column(table, spec.curve) if spec.key else table
    return written_files(task, write_range(dataclasses.replace(spec, write_threads=threads), table))


def range_ids(column: pa.ChunkedArray | pa.Array, bounds: Sequence[Any]) -> npt.NDArray[np.int32]:
    """Per row, its range: the number of bounds at or below its value (NULL: 0, NaN: the last range)."""
    ids = np.zeros(len(column), dtype=np.int32)
    for bound in bounds:
        at_or_above = pc.greater_equal(column, pa.scalar(bound).cast(column.type))
        ids += pc.fill_null(at_or_above, False).to_numpy(zero_copy_only=False)
    if pa.types.is_floating(column.type):
        ids[pc.fill_null(pc.is_nan(column), False).to_numpy(zero_copy_only=False)] = len(bounds)
    return ids


def _sample_columns(spec: OutputSpec) -> tuple[pa.Schema, pa.Schema]:
    """The columns a sample reads (all key columns under a curve, else the first) as logical and stored schemas."""
    names = spec.key if spec.curve is not None else spec.key[:1]
    schema = pa.schema([spec.schema.field(name) for name in names])
    stored = pa.schema([(spec.stored or spec.schema).field(spec.schema.get_field_index(name)) for name in names])
    return schema, stored


def sample_file(spec: OutputSpec, path: str, share: float, seed: int) -> pa.Table:
    """About `share` of one file's rows, chosen at random (`seed`), of the sampled key columns only (deleted
    rows may be among them, which only moves bounds)."""
    schema, stored = _sample_columns(spec)
    filesystem = table_filesystem(spec.table_root, spec.storage_options)
    with filesystem.open_input_file(file_location(spec.table_root, path)) as handle:
        parquet = pq.ParquetFile(handle, pre_buffer=True, coerce_int96_timestamp_unit="us")  # as `read_data_files`
        read = parquet.read(columns=stored_columns(stored, parquet.schema_arrow.names))
        table = pa.Table.from_batches([logical_batch(b, schema, stored) for b in read.to_batches()], schema)
    take = min(table.num_rows, math.ceil(table.num_rows * share))
    chosen = np.random.default_rng(seed).choice(table.num_rows, size=take, replace=False)
    return table.take(pa.array(np.sort(chosen)))


FileSampler = Callable[[int], pa.Table]


def range_bounds(
    task: MergeTask, spec: OutputSpec, map_files: Callable[[FileSampler], Sequence[pa.Table]]
) -> list[Any]:
    """The bounds of the task's ranges (none without a key), at quantiles of the first key column (of the curve
    value under a curve key) in a sample of about SAMPLE_ROWS_PER_RANGE rows per range, every file sampled in
    proportion to its rows with a seed of its own. `map_files` runs the sampler on every file index (threads in
    the process, Spark tasks on a cluster): both placements place the same bounds."""
    if not spec.key:
        return []
    ranges = range_count(task, spec)
    seeds = [int(s) for s in np.random.default_rng(len(task.files)).integers(0, 2**31, size=len(task.files))]
    share = SAMPLE_ROWS_PER_RANGE * ranges / max(task.rows, 1)
    paths = [block.path for block in task.files]
    sampled = pa.concat_tables(map_files(lambda index: sample_file(spec, paths[index], share, seeds[index])))
    values = pa.chunked_array([curve_column(sampled, spec.curve)]) if spec.curve is not None else sampled.column(0)
    return sample_quantile_bounds(values, ranges)


def with_curve_batch(batch: pa.RecordBatch, spec: OutputSpec) -> pa.RecordBatch:
    """A batch with its rows' curve values appended (unchanged without a curve)."""
    if spec.curve is None:
        return batch
    return pa.record_batch(
        [*batch.columns, curve_column(pa.Table.from_batches([batch]), spec.curve)], schema=sorted_schema(spec)
    )


class _SpillFiles:
    """One Arrow IPC stream file per range; batches from any thread, one writer lock per range."""

    def __init__(self, directory: str, schema: pa.Schema, ranges: int) -> None:
        self.paths = [os.path.join(directory, f"range-{index:05d}.arrows") for index in range(ranges)]
        self._writers = [pa.ipc.new_stream(pa.OSFile(path, "wb"), schema) for path in self.paths]
        self._locks = [threading.Lock() for _ in range(ranges)]

    def append(self, index: int, batch: pa.RecordBatch) -> None:
        with self._locks[index]:
            self._writers[index].write_batch(batch)

    def close(self) -> None:
        for writer in self._writers:
            writer.close()


@dataclass(frozen=True, slots=True)
class RangeRouter:
    """Where each input row goes (picklable: Spark tasks route with it too): by the first key column's (or the
    curve value's) bounds, or, without a key (compaction), consecutive rows of the task filling the ranges in turn."""

    spec: OutputSpec
    source: InputSpec
    bounds: tuple[Any, ...]
    ranges: int
    offsets: tuple[int, ...]
    """Per input file, the task's row count before it."""
    rows: int

    def route(self, index: int) -> Iterator[tuple[int, pa.RecordBatch]]:
        """The rows of input file `index`, as (range, rows of that range) pieces."""
        spec = self.spec
        partition_column = CURVE_FIELD.name if spec.curve is not None else spec.key[0] if spec.key else ""
        position = self.offsets[index]
        for read in _read_files(self.source, [index]):
            batch = with_curve_batch(read, spec)
            if spec.key:
                ids = range_ids(batch.column(partition_column), self.bounds)
            else:
                rows = np.arange(position, position + batch.num_rows)
                ids = np.minimum(rows * self.ranges // max(self.rows, 1), self.ranges - 1).astype(np.int32)
            position += batch.num_rows
            routed = batch.take(pa.array(np.argsort(ids, kind="stable")))
            edges = np.concatenate(([0], np.cumsum(np.bincount(ids, minlength=self.ranges))))
            for part in np.flatnonzero(np.diff(edges)):
                yield int(part), routed.slice(int(edges[part]), int(edges[part + 1] - edges[part]))


def range_router(task: MergeTask, spec: OutputSpec, bounds: Sequence[Any]) -> RangeRouter:
    """The router of `task` over `bounds` (from `sample_quantile_bounds`; ignored without a key)."""
    ranges = len(bounds) + 1 if spec.key else range_count(task, spec)
    offsets = tuple(int(offset) for offset in np.cumsum([0, *(block.rows for block in task.files)])[:-1])
    return RangeRouter(spec, _input_spec(task, spec), tuple(bounds) if spec.key else (), ranges, offsets, task.rows)


def write_range(spec: OutputSpec, table: pa.Table) -> list[dict[str, Any]]:
    """One range's rows sorted and written: the result row of each file written."""
    if table.num_rows == 0:
        return []
    if spec.key:
        table = sort_by_key(table, sort_columns(spec.key, spec.curve))
    return [row for batch in write_sorted_partition(spec, iter(table.to_batches())) for row in batch.to_pylist()]


def merge_range_partitioned(
    task: MergeTask, spec: OutputSpec, *, threads: int, spill_dir: str | None = None
) -> list[WrittenFile]:
    """The kernel on a big task in this process: range-partition through local spill files, then sort and
    write each range (see the module's docstring)."""
    with ThreadPoolExecutor(threads) as pool:
        bounds = range_bounds(task, spec, lambda sample: list(pool.map(sample, range(len(task.files)))))
    router = range_router(task, spec, bounds)
    directory = tempfile.mkdtemp(prefix="recluster-merge-", dir=spill_dir)
    try:
        spill = _SpillFiles(directory, sorted_schema(spec), router.ranges)

        def route(index: int) -> None:
            for part, rows in router.route(index):
                spill.append(part, rows)

        try:
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(route, range(len(task.files))))
        finally:
            spill.close()

        def write_spilled(path: str) -> list[dict[str, Any]]:
            with pa.OSFile(path) as source_file:
                table = pa.ipc.open_stream(source_file).read_all()
            os.remove(path)
            return write_range(spec, table)

        with ThreadPoolExecutor(threads) as pool:
            results = [row for rows in pool.map(write_spilled, spill.paths) for row in rows]
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return written_files(task, results)
