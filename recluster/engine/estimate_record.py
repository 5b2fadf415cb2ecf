"""Estimate against actual (docs/commands.md#recluster-estimate): the projection the job stored when it took a table up
(an `estimate` row of the history table), next to what the log shows since."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from recluster.core.estimate.projection import EstimateVsActual, ProjectedCost
from recluster.core.scheduling import ProcessRecord, ProcessType
from recluster.delta.append_history import changes_between
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
    appended, rewritten, merges = _changes_since(snapshot, projected.version)
    return EstimateVsActual(
        projected=projected,
        days=max(0.0, ((time.time() if now is None else now) - projected.at) / 86_400),
        bytes_appended=appended,
        bytes_rewritten=rewritten,
        merges=merges,
        average_depth=average_depth,
    )


@dataclass(frozen=True, slots=True)
class _Since:
    """What the log showed after a projection's version, up to `version` (status pages ask again and again: only
    commits not counted yet are read)."""

    projected: int
    version: int
    changes: tuple[int, int, int]


_counted: dict[str, _Since] = {}
_counted_lock = threading.Lock()


def _changes_since(snapshot: TableSnapshot, projected: int) -> tuple[int, int, int]:
    with _counted_lock:
        seen = _counted.get(snapshot.uri)
    if seen is None or seen.projected != projected or seen.version > snapshot.version:
        seen = _Since(projected, projected, (0, 0, 0))
    new = changes_between(snapshot.uri, seen.version, snapshot.version, snapshot.storage_options)
    appended, rewritten, merges = (old + more for old, more in zip(seen.changes, new, strict=True))
    counted = _Since(projected, snapshot.version, (appended, rewritten, merges))
    with _counted_lock:
        _counted[snapshot.uri] = counted
    return counted.changes
