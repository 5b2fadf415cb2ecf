"""Seeded Arrow batches of streaming appends and the Delta append that sets a table's cluster key: the data of the
tests that check the benchmarks' measures (tests/test_estimate.py) and of the benchmarks themselves (bench/ imports
them from here; no test imports bench).

The batches: (a) uniform random int64 keys; (b) microsecond timestamps increasing with the batch index (one hour per
batch), 5% late rows drawn uniformly from the past (or at most 4 hours back); (c) a two-column key (int in [0, 1000),
10-letter string); (d) numpy zipf(a=1.3) keys clipped to 1,000,000. Each batch also carries a float and a
20-character string payload.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import write_deltalake

from recluster.delta.log_writer import set_table_properties
from recluster.settings import CLUSTER_BY_PROPERTY

STRING_WIDTH = 20


def letters(rng: np.random.Generator, rows: int, width: int) -> pa.Array:
    """`rows` random strings of `width` lowercase letters, built from one buffer."""
    chars = rng.integers(ord("a"), ord("z") + 1, size=rows * width, dtype=np.uint8)
    offsets = np.arange(0, (rows + 1) * width, width, dtype=np.int32)
    return pa.StringArray.from_buffers(rows, pa.py_buffer(offsets.tobytes()), pa.py_buffer(chars.tobytes()))


def append(path: Path, table: pa.Table, key: Sequence[str] = ("k",)) -> None:
    """Append `table`; the append that creates the table also sets its cluster key (`recluster.clusterBy`)."""
    create = not (path / "_delta_log").exists()
    write_deltalake(str(path), table, mode="append")
    if create:
        set_table_properties(path, {CLUSTER_BY_PROPERTY: ",".join(key)})


def payload(rng: np.random.Generator, rows: int) -> dict[str, pa.Array]:
    return {"v": pa.array(rng.random(rows)), "s": letters(rng, rows, STRING_WIDTH)}


def uniform_batch(rng: np.random.Generator, index: int, rows: int) -> pa.Table:
    return pa.table({"k": pa.array(rng.integers(-(1 << 62), 1 << 62, size=rows, dtype=np.int64)), **payload(rng, rows)})


T0 = int(dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp() * 1_000_000)
HOUR = 3_600_000_000
LATE_SHARE = 0.05


def late_rows_batch(
    rng: np.random.Generator, index: int, rows: int, lateness_hours: int | None, share: float = LATE_SHARE
) -> pa.Table:
    """Rows in this batch's hour but a `share` of late rows (5%), uniformly from the `lateness_hours` hours before
    it (None: from T0, late by any amount)."""
    start = T0 + index * HOUR
    ts = rng.integers(start, start + HOUR, size=rows, dtype=np.int64)
    late = rng.random(rows) < share
    if index > 0:
        earliest = T0 if lateness_hours is None else max(T0, start - lateness_hours * HOUR)
        ts[late] = rng.integers(earliest, start, size=int(late.sum()), dtype=np.int64)
    return pa.table({"ts": pa.array(ts, pa.timestamp("us", tz="UTC")), **payload(rng, rows)})


def time_batch(rng: np.random.Generator, index: int, rows: int) -> pa.Table:
    """Late rows from anywhere in the past (workload b)."""
    return late_rows_batch(rng, index, rows, None)


def bounded_time_batch(rng: np.random.Generator, index: int, rows: int) -> pa.Table:
    """Late rows from at most 4 hours (appends) back (issue 20)."""
    return late_rows_batch(rng, index, rows, 4)


def two_column_batch(rng: np.random.Generator, index: int, rows: int) -> pa.Table:
    return pa.table(
        {
            "a": pa.array(rng.integers(0, 1_000, size=rows, dtype=np.int64)),
            "b": letters(rng, rows, 10),
            **payload(rng, rows),
        }
    )


ZIPF_A = 1.3
ZIPF_CLIP = 1_000_000


def zipf_batch(rng: np.random.Generator, index: int, rows: int) -> pa.Table:
    keys = np.minimum(rng.zipf(ZIPF_A, size=rows), ZIPF_CLIP).astype(np.int64)
    return pa.table({"z": pa.array(keys), **payload(rng, rows)})


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    key: tuple[str, ...]
    make: Callable[[np.random.Generator, int, int], pa.Table]
