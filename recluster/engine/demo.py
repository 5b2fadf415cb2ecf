"""Demo data: a local table receiving random-key appends, for `recluster demo` and tests."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import DeltaError

from recluster.core.errors import TableError, first_line
from recluster.delta.log import PRODUCER, read_commits
from recluster.delta.log_writer import set_table_properties
from recluster.delta.snapshot import open_table
from recluster.settings import CLUSTER_BY_PROPERTY

DEMO_KEY = "event_id"


def demo_batch(rng: np.random.Generator, rows: int, batch: int) -> pa.Table:
    """One append of uniformly random keys: every batch spans the whole key domain."""
    keys = rng.integers(0, 1 << 40, size=rows, dtype=np.int64)
    return pa.table(
        {
            DEMO_KEY: keys,
            "batch": pa.array(np.full(rows, batch, dtype=np.int32)),
            "value": rng.random(rows),
            "label": pa.array([f"k{k % 1000:03d}" for k in keys.tolist()]),
        }
    )


def append_demo_batch(
    location: str | Path,
    rng: np.random.Generator,
    rows: int,
    batch: int,
    storage_options: Mapping[str, str] | None = None,
) -> None:
    """Append one batch (to a local folder or an object-store URI); the first creates the table with its cluster
    key property."""
    options = dict(storage_options or {})
    try:
        create = not DeltaTable.is_deltatable(str(location), options)
        write_deltalake(str(location), demo_batch(rng, rows, batch), mode="append", storage_options=options)
    except (DeltaError, OSError) as error:
        raise TableError(f"cannot write the demo table {location}: {first_line(error)}") from None
    if create:
        set_table_properties(location, {CLUSTER_BY_PROPERTY: DEMO_KEY}, options)


def history_totals(location: str, storage_options: Mapping[str, str] | None = None) -> tuple[int, int, int]:
    """(bytes the writers appended, bytes recluster wrote, recluster commits) over the table's whole log: the
    demo's summary from the table's history, whenever the job started."""
    appended = written = merges = 0
    for entry in read_commits(location, 0, open_table(location, storage_options).version(), storage_options):
        if entry.producer == PRODUCER:  # a rewrite (its property commits add no file)
            written, merges = written + entry.bytes_added, merges + bool(entry.adds)
        else:
            appended += entry.bytes_added
    return appended, written, merges
