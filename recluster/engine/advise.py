"""`recluster advise` (docs/advise.md): cluster keys advised from the queries Spark's event logs recorded.

The logs give each Delta table's scans and their predicates (`recluster.core.advice`). For each table, every
candidate key is scored by the files the logged queries would read once the table is clustered on it: a sample of
the table's rows, ordered by the key as a FINAL would order them and cut into the files the table would have, and
each query's predicates held against those files' min/max. The current layout is scored the same way on the real
files' statistics. What keeping the best keys clustered costs comes from `recluster estimate`'s model.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable

from recluster.core.advice.layouts import Layout, files_for, files_read, simulated_layout
from recluster.core.advice.ranking import (
    CandidateKey,
    Scored,
    Workload,
    candidate_keys,
    mean_files_read,
    ranked,
    workloads,
)
from recluster.core.advice.scans import SQL_EVENTS, Scan, delta_scans
from recluster.core.curves import Curve, RangeBounds, sample_quantile_bounds
from recluster.core.errors import TableError
from recluster.core.estimate.projection import MB
from recluster.core.key_bounds import bound_to_json
from recluster.core.keys import ClusterKey, KeyColumn
from recluster.delta.snapshot import arrow_schema, load_snapshot, resolve_cluster_key
from recluster.delta.storage import file_location, normalize_uri, table_filesystem
from recluster.engine.api import open_checked_table, set_cluster_key, storage_options_for
from recluster.engine.estimate import estimate_table
from recluster.engine.event_logs import EventLogError, EventLogProblem, event_log_files, read_events
from recluster.merge.curve_column import CurveSpec, curve_column
from recluster.settings import Settings

log = logging.getLogger("recluster.advise")

SAMPLE_ROWS = 200_000
"""Rows of the table the layouts are simulated on."""
SAMPLE_FILES = 256
"""Live files the sample is drawn from, at most: the reading cost stays bounded on a table of many files."""
COSTED_CANDIDATES = 3
"""The best keys priced with the estimate's model (each prices the table's appends once)."""


@dataclass(frozen=True, slots=True)
class TableAdvice:
    """The advice for one table."""

    table: str
    version: int
    workload: Workload
    rows: int
    files: int
    """Files the table has now."""
    files_after: int
    """Files it would have once clustered at the target size."""
    current_key: tuple[str, ...]
    now_files_read: float
    """Files a logged query reads on today's files (their statistics), averaged over the queries."""
    observed_files_read: float | None
    """The same from the scans' own metrics, when the logs have them."""
    candidates: tuple[Scored, ...]
    """Best first."""
    sample_rows: int
    applied: CandidateKey | None = None
    notes: tuple[str, ...] = ()

    @property
    def best(self) -> Scored:
        return self.candidates[0]

    @property
    def predicted_factor(self) -> float:
        """How many times fewer files the logged queries would read clustered on the best key than today."""
        return self.now_files_read / max(self.best.files_read, 1e-9)

    def to_dict(self) -> dict[str, Any]:
        workload = self.workload
        return {
            "table": self.table,
            "names": list(workload.names),
            "version": self.version,
            "queries": workload.queries,
            "days": round(workload.days, 4),
            "confidence": str(workload.confidence),
            "columns": dict(workload.column_use().most_common()),
            "shapes": {c: {str(s): n for s, n in shapes.items()} for c, shapes in workload.shapes().items()},
            "patterns": [{"queries": p.queries, "where": [str(x) for x in p.predicates]} for p in workload.patterns],
            "rows": self.rows,
            "files": self.files,
            "files_after": self.files_after,
            "current_key": list(self.current_key),
            "now_files_read": round(self.now_files_read, 3),
            "observed_files_read": None if self.observed_files_read is None else round(self.observed_files_read, 3),
            "predicted_factor": round(self.predicted_factor, 3),
            "candidates": [
                {**asdict(s), "key": str(s.key), "columns": list(s.key.columns), "read_share": round(s.read_share, 4)}
                for s in self.candidates
            ],
            "sample_rows": self.sample_rows,
            "applied": None if self.applied is None else str(self.applied),
            "notes": list(self.notes),
        }


@dataclass(frozen=True, slots=True)
class Advice:
    """`recluster advise`'s answer."""

    tables: tuple[TableAdvice, ...]
    problems: tuple[str, ...]
    """One line per event log file that was malformed or cut short, or table that could not be advised on."""
    log_files: int
    scans: int
    seconds: float = field(default=0.0, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tables": [t.to_dict() for t in self.tables],
            "problems": list(self.problems),
            "log_files": self.log_files,
            "scans": self.scans,
            "seconds": round(self.seconds, 3),
        }


def table_uri(location: str) -> str:
    """The table a plan's location names, as recluster addresses it (`file:/x` is `/x`, `s3a://` is `s3://`)."""
    parsed = urlparse(location)
    if parsed.scheme == "file":
        return normalize_uri(unquote(parsed.path))
    if parsed.scheme in ("s3a", "s3n"):
        return "s3://" + location.split("://", 1)[1].rstrip("/")
    return normalize_uri(location)


def read_scans(locations: Sequence[str], options: Mapping[str, str]) -> tuple[list[Scan], list[str], int]:
    """Every Delta scan in the event logs at `locations`, the problem lines, and how many files were read."""
    scans: list[Scan] = []
    problems: list[str] = []
    files = 0
    for location in locations:
        filesystem, paths = event_log_files(location, options)
        for path, shown in paths:
            files += 1
            found, problem = file_scans(filesystem, path, shown)
            scans.extend(found)
            problems += [str(problem)] if problem else []
    return scans, problems, files


def file_scans(filesystem: pafs.FileSystem, path: str, shown: str) -> tuple[list[Scan], EventLogProblem | None]:
    """The Delta scans of one event log file, and its problem when it is malformed or cut short (the scans before
    the fault still count)."""
    scans: list[Scan] = []
    try:
        scans.extend(delta_scans(read_events(filesystem, path, SQL_EVENTS)))
    except EventLogError as error:
        return scans, EventLogProblem(shown, str(error))
    return scans, None


def _key_columns(table: DeltaTable, uri: str, names: Sequence[str]) -> dict[str, KeyColumn]:
    """The columns a key can be made of among `names` (partition columns and unsupported types left out)."""
    schema = arrow_schema(table)
    partitions = set(table.metadata().partition_columns)
    found = {}
    for name in names:
        if name in partitions or schema.get_field_index(name) < 0:
            continue
        try:
            found[name] = resolve_cluster_key(table, [name], uri, curve=Curve.LINEAR).columns[0]
        except TableError:
            continue
    return found


def _sample(
    uri: str, options: Mapping[str, str], blocks: Sequence[Any], columns: Sequence[KeyColumn], rows: int
) -> pa.Table:
    """About `rows` rows of the table: up to SAMPLE_FILES live files chosen at random (all of a smaller table), the
    same share of each one's rows."""
    generator = np.random.default_rng(len(blocks))
    chosen = [blocks[int(i)] for i in generator.permutation(len(blocks))[:SAMPLE_FILES]]
    share = min(1.0, rows / max(sum(b.rows for b in chosen), 1))
    filesystem = table_filesystem(uri, options)
    pieces = []
    for block in chosen:
        with filesystem.open_input_file(file_location(uri, block.path)) as handle:
            data = pq.ParquetFile(handle).read(columns=[c.stored_name for c in columns])
        data = data.rename_columns([c.name for c in columns])
        take = min(data.num_rows, math.ceil(data.num_rows * share))
        pieces.append(data.take(pa.array(np.sort(generator.choice(data.num_rows, size=take, replace=False)))))
    return pa.concat_tables(pieces, promote_options="permissive") if pieces else pa.table({})


def _ordered(sample: pa.Table, candidate: CandidateKey, columns: Mapping[str, KeyColumn]) -> pa.Table:
    """The sample in the order a FINAL on the candidate key writes it (linear: sorted; a curve: by curve value
    over range bounds sampled from the same rows)."""
    if not candidate.curve:
        order = pc.sort_indices(sample, [(c, "ascending") for c in candidate.columns])
        return sample.take(order)
    key_columns = tuple(columns[c] for c in candidate.columns)
    bounds = tuple(
        tuple(bound_to_json(v, column) for v in sample_quantile_bounds(pc.drop_null(sample.column(column.name))))
        for column in key_columns
    )
    key = ClusterKey(key_columns, Curve.HILBERT, RangeBounds(tuple(candidate.columns), bounds))
    spec = CurveSpec.of(key)
    assert spec is not None
    return sample.take(pc.sort_indices(curve_column(sample, spec)))


def _real_layout(table: DeltaTable, columns: Mapping[str, KeyColumn]) -> Layout:
    """Today's files: their min/max statistics from the log (a column without them: every file read)."""
    actions = pa.table(table.get_add_actions(flatten=True))
    lows: dict[str, pa.Array] = {}
    highs: dict[str, pa.Array] = {}
    for name, column in columns.items():
        for side, found in (("min", lows), ("max", highs)):
            stat = f"{side}.{column.stored_name}"
            if stat in actions.column_names:
                found[name] = actions.column(stat).combine_chunks()
    return Layout(actions.num_rows, lows, highs)


def advise_table(
    uri: str,
    workload: Workload,
    *,
    settings: Settings,
    target_rows: int,
    sample_rows: int = SAMPLE_ROWS,
    cost: bool = True,
) -> TableAdvice:
    table, current, options = open_checked_table(uri, settings=settings, keyless=True)
    snapshot = load_snapshot(table, current, uri=uri, storage_options=options)  # the table opened once
    used = workload.column_use()
    columns = _key_columns(table, uri, sorted({*used, *current.names}))
    blocks = list(snapshot.blocks)
    rows = sum(b.rows for b in blocks)
    files_after = files_for(rows, target_rows)
    sample = _sample(uri, options, blocks, list(columns.values()), sample_rows)
    candidates = candidate_keys(used, current.names, columns)
    if not candidates:
        raise TableError(f"{uri}: the logged queries filter on no column a key can be made of")
    patterns = workload.patterns
    scored = []
    for candidate in candidates:
        layout = simulated_layout(_ordered(sample, candidate, columns), files_after, list(columns))
        reads = [files_read(layout, p.predicates) for p in patterns]
        files = layout.files
        scored.append(
            Scored(
                candidate,
                files,
                mean_files_read(patterns, reads) * files_after / files,
                candidate.columns == current.names,
            )
        )
    best = ranked(scored)
    now = _real_layout(table, columns)
    notes = []
    if sample.num_rows < files_after:
        notes.append(f"the sample ({sample.num_rows} rows) is smaller than the {files_after} files simulated")
    if cost:
        best, priced = _priced(uri, best, settings)
        notes += priced
    observed = workload.files_read / workload.queries if workload.files_read is not None else None
    return TableAdvice(
        table=uri,
        version=snapshot.version,
        workload=workload,
        rows=rows,
        files=len(blocks),
        files_after=files_after,
        current_key=current.names,
        now_files_read=mean_files_read(patterns, [files_read(now, p.predicates) for p in patterns]),
        observed_files_read=observed,
        candidates=best,
        sample_rows=sample.num_rows,
        notes=tuple(notes),
    )


def _priced(uri: str, scored: tuple[Scored, ...], settings: Settings) -> tuple[tuple[Scored, ...], list[str]]:
    """The best candidates with what keeping them clustered costs a day (the estimate's model, at the merge speed
    measured once)."""
    speed: float | None = None
    priced = list(scored)
    for index, candidate in enumerate(scored[:COSTED_CANDIDATES]):
        try:
            estimate = estimate_table(
                uri, settings=settings, cluster_by=candidate.key.columns, merge_mb_per_second=speed
            )
        except TableError as error:
            return tuple(priced), [f"no cost estimate: {error}"]
        speed = estimate.merge_mb_per_second
        day = estimate.configured.per_day
        priced[index] = replace(
            candidate, cost_mb_per_day=day.bytes_rewritten / MB, cost_seconds_per_day=day.compute_seconds
        )
    return tuple(priced), []


def advise(
    locations: Sequence[str],
    *,
    settings: Settings,
    tables: Sequence[str] = (),
    target_rows: int | None = None,
    sample_rows: int = SAMPLE_ROWS,
    cost: bool = True,
    apply_factor: float | None = None,
    min_queries: int = 1,
) -> Advice:
    """Advice for every table the logs at `locations` scanned (or only `tables`); with `apply_factor`, the best key
    set as the table's cluster key where it beats today's by that factor."""
    started = time.perf_counter()
    options = storage_options_for(settings, locations[0]) if locations else {}
    scans, problems, files = read_scans(locations, options)
    wanted = {normalize_uri(t) for t in tables}
    found = workloads(scans, {s.location: table_uri(s.location) for s in scans})
    advice = []
    for uri, workload in sorted(found.items()):
        if (wanted and uri not in wanted) or workload.queries < min_queries:
            continue
        try:
            result = advise_table(
                uri,
                workload,
                settings=settings,
                target_rows=target_rows or settings.clustering.target_rows,
                sample_rows=sample_rows,
                cost=cost,
            )
        except TableError as error:
            problems.append(f"table {uri}: {error}")
            continue
        best = result.best
        if apply_factor is not None and not best.current and result.predicted_factor >= apply_factor:
            curve = Curve.HILBERT if best.key.curve else Curve.LINEAR
            set_cluster_key(uri, best.key.columns, curve, settings=settings, options=storage_options_for(settings, uri))
            result = replace(result, applied=best.key)
        advice.append(result)
    for missing in sorted(wanted - set(found)):
        problems.append(f"table {missing}: no scan of it in the event logs")
    return Advice(tuple(advice), tuple(problems), files, len(scans), time.perf_counter() - started)
