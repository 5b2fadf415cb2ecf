"""`recluster estimate` (issue 35): what automatic clustering will cost a table before it is turned on.

Reads the table's data commits (`recluster.delta.append_history`), learns the shape of its appends, runs the
configured policy and the alternatives over synthetic appends of that shape in the table model
(`recluster.core.estimate`), and prices a first FINAL: the first round of the product's own FINAL plan on the
table's files, at the merge speed this machine measures (the in-process kernel's read, sort and write of a
synthetic batch), or the speed given.
"""

from __future__ import annotations

import io
import time
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from recluster.core.errors import TableError
from recluster.core.estimate.project import ModelScale, Strategy, run_model
from recluster.core.estimate.projection import MB, InitialCost, TableEstimate, scaled
from recluster.core.estimate.shape import KeyShape, learn_shape
from recluster.core.segments import files_for_rows
from recluster.core.selection import select_merge_tasks
from recluster.delta.append_history import late_samples, read_appends
from recluster.delta.maintenance import DEFAULT_DELETED_FILE_RETENTION_HOURS, parse_delta_interval
from recluster.engine.api import read_snapshot, selection_bounds
from recluster.settings import Settings
from recluster.spark.in_process import sort_by_key

CALIBRATION_ROWS = 200_000
RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"


def measure_merge_speed(bytes_per_row: float, rows: int = CALIBRATION_ROWS) -> float:
    """MB of Parquet per second the in-process merge reads, sorts by key and writes, on a synthetic batch of
    random int64 keys and a random payload as wide as the table's rows (in memory: nothing on disk)."""
    rng = np.random.default_rng(35)
    width = max(1, int(bytes_per_row) - 8)
    payload = rng.integers(0, 256, size=rows * width, dtype=np.uint8).tobytes()
    offsets = pa.array(np.arange(0, rows * width + 1, width, dtype=np.int32))
    batch = pa.table(
        {
            "k": pa.array(rng.integers(-(1 << 62), 1 << 62, size=rows, dtype=np.int64)),
            "v": pa.BinaryArray.from_buffers(pa.binary(), rows, [None, offsets.buffers()[1], pa.py_buffer(payload)]),
        }
    )
    source = io.BytesIO()
    pq.write_table(batch, source)
    started = time.perf_counter()
    merged = sort_by_key(pq.read_table(io.BytesIO(source.getvalue())), ["k"])
    pq.write_table(merged, io.BytesIO())
    return len(source.getvalue()) / MB / max(time.perf_counter() - started, 1e-6)


def estimate_table(
    uri: str,
    *,
    settings: Settings,
    cluster_by: Sequence[str] | None = None,
    policy: str | None = None,
    days: float | None = None,
    every: int = 5,
    merge_mb_per_second: float | None = None,
) -> TableEstimate:
    """Project what the configured (or given) policy will cost the table, against the alternatives."""
    started = time.perf_counter()
    snapshot = read_snapshot(uri, settings=settings, cluster_by=cluster_by)
    if snapshot.key.keyless:
        raise TableError(f"{uri}: no cluster key (give --cluster-by or set recluster.clusterBy)")
    bounds = selection_bounds(settings, snapshot, None, policy=policy)
    column = snapshot.key.columns[0].stored_name
    since = None if days is None else int((time.time() - days * 86_400) * 1000)
    appends, entries = read_appends(uri, column, snapshot.storage_options, since)
    if not appends:
        window = "" if days is None else f" in the last {days:g} days"
        raise TableError(f"{uri}: no data commits{window} to learn from")
    shape = learn_shape(appends, late_samples(uri, column, snapshot.storage_options, appends, entries))
    target_rows = settings.clustering.target_rows
    scale = ModelScale.of(shape, target_rows)
    measured = merge_mb_per_second is None
    speed = measure_merge_speed(shape.bytes_per_row) if merge_mb_per_second is None else merge_mb_per_second
    retention = snapshot.properties.get(RETENTION_PROPERTY)
    retention_days = (
        parse_delta_interval(retention) / 3600.0 if retention else DEFAULT_DELETED_FILE_RETENTION_HOURS
    ) / 24
    names = snapshot.key.names
    estimates = tuple(
        scaled(
            run_model(shape, scale, strategy, bounds, every),
            shape=shape,
            scale=scale,
            key=names,
            policy=str(bounds.policy),
            every=every,
            mb_per_second=speed,
            retention_days=retention_days,
        )
        for strategy in Strategy
    )
    plan = select_merge_tasks(uri, snapshot.version, snapshot.blocks, bounds, final=True)
    initial_bytes = sum(f.bytes for t in plan.tasks for f in t.files)
    initial = InitialCost(
        files=sum(len(t.files) for t in plan.tasks),
        rows=sum(f.rows for t in plan.tasks for f in t.files),
        bytes=initial_bytes,
        files_written=sum(files_for_rows(sum(f.rows for f in t.files), target_rows) for t in plan.tasks),
        seconds=initial_bytes / (speed * MB),
    )
    return TableEstimate(
        table=uri,
        version=snapshot.version,
        key=names,
        policy=str(bounds.policy),
        shape=shape,
        scale=scale,
        merge_mb_per_second=speed,
        merge_speed_measured=measured,
        retention_days=retention_days,
        initial=initial,
        strategies=estimates,
        notes=_notes(shape.kind, scale, names, shape.late_share_measured),
        seconds=time.perf_counter() - started,
    )


def _notes(kind: KeyShape, scale: ModelScale, key: Sequence[str], late_share_measured: bool) -> tuple[str, ...]:
    notes = [
        f"modelled as {scale.appends:,} appends of {scale.rows_per_append:,} rows, files of {scale.target_rows:,} "
        f"rows (one model row stands for {scale.rows_scale:,.1f} rows)"
    ]
    if scale.sampled:
        notes.append(f"sampled: one modelled append stands for {scale.commits_per_append} commits")
    if len(key) > 1:
        notes.append(f"a {len(key)}-column key is modelled by its order on the curve: files read for {key[0]} only")
    if kind is KeyShape.TIME_LIKE and not late_share_measured:
        notes.append("late share assumed: the sampled appended files are gone")
    notes.append("initial cost: the first round of a FINAL (further rounds, if any, are not priced)")
    return tuple(notes)
