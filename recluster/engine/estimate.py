"""`recluster estimate` (docs/commands.md#recluster-estimate): what automatic clustering will cost a table before it is
turned on.

Reads the table's data commits (`recluster.delta.append_history`), learns the shape of its appends, runs the
configured policy and the alternatives over synthetic appends of that shape in the table model
(`recluster.core.estimate`), and prices a first FINAL: the first round of the product's own FINAL plan on the
table's files, at the merge speed this machine measures (the in-process kernel's read, sort and write of a
synthetic batch), or the speed given.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote, unquote

from recluster.core.blocks import Block, new_run_id
from recluster.core.errors import TableError
from recluster.core.estimate.project import ModelScale, Strategy, run_final, run_model
from recluster.core.estimate.projection import MB, Calibration, InitialCost, ProjectedCost, TableEstimate, scaled
from recluster.core.estimate.shape import CURVE_COLUMNS, KeyShape, learn_shape
from recluster.core.scheduling import ProcessRecord, ProcessStatus, ProcessType
from recluster.core.segments import files_for_rows
from recluster.core.selection import select_merge_tasks
from recluster.core.selection.plan import MergeTask, Reason
from recluster.delta.append_history import late_samples, read_appends
from recluster.delta.history import HistoryStore, new_process_id
from recluster.delta.maintenance import DEFAULT_DELETED_FILE_RETENTION_HOURS, parse_delta_interval
from recluster.delta.ranges import sample_range_bounds
from recluster.delta.snapshot import TableSnapshot
from recluster.delta.storage import file_location, table_filesystem
from recluster.delta.storage_faults import describe_storage_error, storage_fault
from recluster.engine.api import read_snapshot, selection_bounds
from recluster.engine.estimate_record import latest_projection
from recluster.settings import Settings

log = logging.getLogger("recluster.estimate")

CALIBRATION_MIN_BYTES = 8 * MB
"""The calibration merges at least this much (or the whole table), and about a target file of rows: smaller
merges are timed mostly by their fixed costs (a 100 KB sample on a busy machine: 4 MB/s instead of 25)."""
CALIBRATION_MAX_BYTES = 64 * MB
CALIBRATION_REPEATS = 3
"""Each merge of the calibration is timed this many times, the fastest counting (others share the machine)."""
LOADS_PER_ROUND = 2
"""A FINAL loads the table's snapshot before each round and after its last (each as long as estimate's), once more
on a curve key without range bounds (after storing them), and each round's commit reads the log's newest versions
and writes one: priced as one more load a round."""
RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"


def _repeated(root: str, chosen: list[Block]) -> list[Block]:
    """`chosen` (copied under `root`) and copies of them until CALIBRATION_MIN_BYTES: a small table's merge lasts
    tens of milliseconds, which a shared machine's noise swamps (calibrated speeds of 9 to 48 MB/s on alike tables)."""
    size = sum(b.bytes for b in chosen)
    copies = math.ceil(CALIBRATION_MIN_BYTES / max(size, 1)) - 1
    repeated = list(chosen)
    for copy in range(1, max(copies, 0) + 1):
        for block in chosen:
            directory, name = os.path.split(unquote(block.path))
            path = os.path.join(directory, f"copy{copy}-{name}")
            shutil.copyfile(os.path.join(root, unquote(block.path)), os.path.join(root, path))
            repeated.append(dataclasses.replace(block, path=quote(path)))
    return repeated


def _load_seconds(uri: str, settings: Settings, cluster_by: Sequence[str] | None) -> float:
    """One more load of the table's snapshot, warm as a running job's (the first one paid for the imports)."""
    loading = time.perf_counter()
    read_snapshot(uri, settings=settings, cluster_by=cluster_by)
    return time.perf_counter() - loading


def calibrate(snapshot: TableSnapshot, settings: Settings) -> Calibration:
    """Copy the newest files (about one target file of rows and `CALIBRATION_MIN_BYTES`, at most
    `CALIBRATION_MAX_BYTES`, none with a deletion vector) into a temporary directory and merge them there with the
    in-process kernel as a merge of the table would (a curve key without range bounds yet: bounds sampled from the
    files first, as the first merge on a curve does): the first file alone, then all of them. The two times give
    the speed (per byte) and the fixed seconds of a merge. Nothing is written to the table."""
    from recluster.merge.curve_column import CurveSpec
    from recluster.merge.in_process import merge_in_process
    from recluster.merge.kernel import output_spec

    blocks = sorted(
        (snapshot.blocks[i] for i in range(len(snapshot.blocks))), key=lambda b: b.modified_ms or 0, reverse=True
    )
    chosen: list[Block] = []
    for block in blocks:
        if block.has_deletion_vector:
            continue
        chosen.append(block)
        rows, size = sum(b.rows for b in chosen), sum(b.bytes for b in chosen)
        if (rows >= settings.clustering.target_rows and size >= CALIBRATION_MIN_BYTES) or size >= CALIBRATION_MAX_BYTES:
            break
    if not chosen:
        raise TableError(f"{snapshot.uri}: no data files to measure a merge on (give --merge-mb-per-second)")
    filesystem = table_filesystem(snapshot.uri, snapshot.storage_options)
    with tempfile.TemporaryDirectory(prefix="recluster-estimate-") as root:
        for block in chosen:
            target = os.path.join(root, unquote(block.path))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with filesystem.open_input_stream(file_location(snapshot.uri, block.path)) as source:
                Path(target).write_bytes(source.read())
        timed = _repeated(root, chosen)

        def merge(files: Sequence[Block]) -> tuple[float, int]:
            started = time.perf_counter()
            key = snapshot.key
            if key.on_curve and key.bounds is None:  # as a first merge on a curve: its bounds sampled from the files
                key = dataclasses.replace(key, bounds=sample_range_bounds(root, {}, files, key))
            task = MergeTask(files[0].partition, 0, 1, tuple(files), Reason.UNCLUSTERED, 0)
            spec = output_spec(
                task,
                table_root=root,
                data_schema=snapshot.data_schema,
                properties=snapshot.properties,
                key=snapshot.key.names,
                fingerprint=snapshot.key.fingerprint,
                run_id=new_run_id(),
                target_rows=settings.clustering.target_rows,
                target_file_bytes=settings.clustering.target_file_bytes,
                parquet=settings.merge.parquet,
                curve=CurveSpec.of(key),
            )
            written = merge_in_process(task, spec, threads=settings.merge.resolved_threads)
            return time.perf_counter() - started, sum(w.bytes for w in written)

        merge(chosen[:1])  # warm-up: the first merge of a process loads what the kernel uses
        one = min(merge(chosen[:1])[0] for _ in range(CALIBRATION_REPEATS))
        seconds, written = min(merge(timed) for _ in range(CALIBRATION_REPEATS))
        if len(timed) > len(chosen):  # copies compress better sorted side by side: bytes out from the files alone
            written = merge(chosen)[1]
    read, first = sum(b.bytes for b in timed), chosen[0].bytes
    slope = (seconds - one) / (read - first) if read > first and seconds > one else seconds / read
    return Calibration(
        mb_per_second=1 / slope / MB,
        fixed_seconds=max(one - slope * first, 0.0),
        written_per_read=written / sum(b.bytes for b in chosen),
        files=len(timed),
        bytes=read,
        seconds=seconds,
    )


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
    samples = late_samples(uri, column, snapshot.storage_options, appends, entries)
    shape = learn_shape(appends, samples, len(snapshot.key.columns))
    target_rows = settings.clustering.target_rows
    scale = ModelScale.of(shape, target_rows)
    calibration = calibrate(snapshot, settings) if merge_mb_per_second is None else None
    speed = calibration.mb_per_second if calibration is not None else float(merge_mb_per_second or 0)
    fixed = calibration.fixed_seconds if calibration is not None else 0.0
    written_per_read = calibration.written_per_read if calibration is not None else 1.0
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
            fixed_seconds=fixed,
            written_per_read=written_per_read,
            retention_days=retention_days,
        )
        for strategy in Strategy
    )
    plan = select_merge_tasks(uri, snapshot.version, snapshot.blocks, bounds, final=True)
    snapshot_seconds = min(_load_seconds(uri, settings, cluster_by) for _ in range(CALIBRATION_REPEATS))
    first_bytes = sum(f.bytes for t in plan.tasks for f in t.files)
    final = run_final(shape, scale, bounds, settings.clustering.max_final_rounds)
    total_bytes = round(first_bytes * final.rows_rewritten / max(final.first_round_rows, 1))
    tasks = max(len(plan.tasks), final.tasks)
    unbounded = snapshot.key.on_curve and snapshot.key.bounds is None  # the FINAL stores bounds, then loads again
    rounds = max(final.rounds, 1 if plan.tasks else 0)
    loads = LOADS_PER_ROUND * rounds + 1 + (1 if unbounded and plan.tasks else 0)
    initial = InitialCost(
        files=sum(len(t.files) for t in plan.tasks),
        rows=sum(f.rows for t in plan.tasks for f in t.files),
        first_round_bytes=first_bytes,
        files_written=sum(files_for_rows(sum(f.rows for f in t.files), target_rows) for t in plan.tasks),
        rounds=rounds,
        bytes=total_bytes,
        seconds=loads * snapshot_seconds + tasks * fixed + total_bytes / (speed * MB),
    )
    return TableEstimate(
        table=uri,
        version=snapshot.version,
        key=names,
        policy=str(bounds.policy),
        shape=shape,
        scale=scale,
        merge_mb_per_second=speed,
        calibration=calibration,
        retention_days=retention_days,
        initial=initial,
        strategies=estimates,
        notes=_notes(shape.kind, scale, names, shape.late_share_measured, calibration is not None),
        seconds=time.perf_counter() - started,
    )


def _notes(
    kind: KeyShape, scale: ModelScale, key: Sequence[str], late_share_measured: bool, calibrated: bool
) -> tuple[str, ...]:
    notes = [
        f"modelled as {scale.appends:,} appends of {scale.rows_per_append:,} rows, files of {scale.target_rows:,} "
        f"rows (one model row stands for {scale.rows_scale:,.1f} rows)"
    ]
    if scale.sampled:
        notes.append(f"sampled: one modelled append stands for {scale.commits_per_append} commits")
    if len(key) > CURVE_COLUMNS or (len(key) > 1 and kind is KeyShape.TIME_LIKE):
        notes.append(f"a {len(key)}-column key is modelled by its order alone: files read for {key[0]} only")
    elif len(key) == CURVE_COLUMNS:
        notes.append("a two-column key is modelled on a Hilbert curve of uniformly random ranks")
    if kind is KeyShape.TIME_LIKE and not late_share_measured:
        notes.append("late share assumed: the sampled appended files are gone")
    if not calibrated:
        notes.append("merge speed given: bytes written per byte rewritten taken as 1 (no calibration merge)")
    notes.append(
        "initial cost: the first FINAL round as planned on the table's files, later rounds in proportion to the same "
        "FINAL on the model"
    )
    return tuple(notes)


def record_estimate(uri: str, *, settings: Settings, store: HistoryStore) -> ProjectedCost | None:
    """When the job takes a table up: estimate it once (a table that has a projection keeps it) and store the
    projection as an `estimate` row of the history table. A table that cannot be estimated is logged, not raised."""
    if latest_projection(store.records(), uri) is not None:
        return None
    try:
        estimate = estimate_table(uri, settings=settings)
    except Exception as error:  # a storage error too: the estimate thread must not die (tried again on restart)
        if not isinstance(error, TableError) and storage_fault(error) is None:
            log.exception("recluster table=%s reason=estimate_failed", uri)
        else:
            log.warning("recluster table=%s reason=estimate_failed error=%s", uri, describe_storage_error(error))
        return None
    now = time.time()
    projected = estimate.projected(now)
    store.append(
        ProcessRecord(
            process_id=new_process_id(),
            table=uri,
            type=ProcessType.ESTIMATE,
            group="",
            start=now,
            end=now,
            status=ProcessStatus.SUCCESS,
            detail=projected.to_json(),
        )
    )
    log.info(
        "recluster table=%s reason=estimated policy=%s written_per_appended=%.3f depth=%.3f",
        uri,
        projected.policy,
        projected.written_per_appended,
        projected.time_averaged_depth,
    )
    return projected
