"""Estimate against actual (issue 35): the projection the job stored when it took a table up (an `estimate` row of
the history table), next to what the log shows since."""

from __future__ import annotations

import time
from collections.abc import Iterable

from recluster.core.estimate.projection import EstimateVsActual, ProjectedCost
from recluster.core.optimizing import ProcessRecord, ProcessType
from recluster.delta.append_history import changes_since
from recluster.delta.snapshot import TableSnapshot
from recluster.delta.storage import normalize_uri


def latest_projection(records: Iterable[ProcessRecord], table: str) -> ProjectedCost | None:
    """The newest projection stored for the table (None: none yet)."""
    uri = normalize_uri(table)
    rows = [r for r in records if r.type is ProcessType.ESTIMATE and r.detail and normalize_uri(r.table) == uri]
    newest = max(rows, key=lambda r: r.start, default=None)
    return None if newest is None or newest.detail is None else ProjectedCost.from_json(newest.detail)


def estimate_vs_actual(
    snapshot: TableSnapshot, records: Iterable[ProcessRecord], average_depth: float, now: float | None = None
) -> EstimateVsActual | None:
    """The table's stored projection and what happened after the version it was made at."""
    projected = latest_projection(records, snapshot.uri)
    if projected is None:
        return None
    appended, rewritten, merges = changes_since(snapshot.uri, projected.version, snapshot.storage_options)
    return EstimateVsActual(
        projected=projected,
        days=max(0.0, ((time.time() if now is None else now) - projected.at) / 86_400),
        bytes_appended=appended,
        bytes_rewritten=rewritten,
        merges=merges,
        average_depth=average_depth,
    )
