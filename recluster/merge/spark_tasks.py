"""The Spark placement of the merge kernel: the in-process range partitioning (merge/in_process.py) spread over
Spark tasks, with Spark moving whole Arrow pieces, never rows.

Spark tasks sample the key columns (the bounds are placed by the driver, on the same sample the in-process
placement takes), then read the task's files through pyarrow.fs and route every row to its range: each piece of one
range is serialized as an Arrow IPC stream and shuffled as one record (`partitionBy`, one partition per range).
Each range's task sorts its pieces with Arrow and runs `kernel.write_sorted_partition`. Rows never become JVM rows:
no row-wise Arrow conversion, no JVM sort, no sampling pass over whole rows (Spark's `repartitionByRange` read the
input twice). Nothing but one result row per written file comes back to the driver; the outputs are the ones the
in-process placement writes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from recluster.core.blocks import WrittenFile
from recluster.core.selection.plan import MergeTask
from recluster.delta.storage import executor_storage_options
from recluster.merge.in_process import RangeRouter, range_bounds, range_router, write_range
from recluster.merge.kernel import OutputSpec, written_files

READ_SPLIT_BYTES = 128 << 20
"""Input bytes per routing task (Spark's own Parquet reader splits at the same size)."""

Piece = tuple[int, tuple[int, int, bytes]]
"""(range, (input file, piece number, the rows as an Arrow IPC stream)): one shuffled record."""


def _ipc(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def route_pieces(router: RangeRouter, index: int) -> Iterator[Piece]:
    """A routing task's body for one input file: its rows as shuffled pieces, keyed by range."""
    for number, (part, rows) in enumerate(router.route(index)):
        yield part, (index, number, _ipc(rows))


def write_pieces(spec: OutputSpec, pieces: Iterable[Piece]) -> Iterator[dict[str, Any]]:
    """A range task's body: its pieces in input order (so that rows with equal keys keep one order), sorted and
    written; one result per written file."""
    ordered = sorted(piece for _, piece in pieces)
    if ordered:
        table = pa.concat_tables(pa.ipc.open_stream(blob).read_all() for _, _, blob in ordered)
        yield from write_range(spec, table)


def _slices(spark: Any, task: MergeTask) -> int:
    """Routing tasks: at least one per READ_SPLIT_BYTES, a whole number of waves of the cluster's cores (three
    tasks on two cores take two waves), at most one per input file."""
    cores: int = max(1, spark.sparkContext.defaultParallelism)
    waves = math.ceil(task.bytes / READ_SPLIT_BYTES / cores)
    return min(len(task.files), max(1, waves) * cores)


def execute_task(spark: Any, task: MergeTask, spec: OutputSpec) -> list[WrittenFile]:
    """The kernel in Spark tasks (see the module's docstring): sample, route and shuffle Arrow pieces, sort and
    write each range. Nothing but the result rows reaches the driver."""
    spec = dataclasses.replace(spec, storage_options=executor_storage_options(spec.table_root, spec.storage_options))
    context = spark.sparkContext
    files = context.parallelize(range(len(task.files)), _slices(spark, task))
    bounds = range_bounds(task, spec, lambda sample: files.map(sample).collect())
    router = range_router(task, spec, bounds)
    shuffled = files.flatMap(lambda index: route_pieces(router, index)).partitionBy(router.ranges, int)
    results = shuffled.mapPartitions(lambda pieces: write_pieces(spec, pieces)).collect()
    return written_files(task, results)
