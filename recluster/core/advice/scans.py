"""The scans of Delta tables in a Spark application's event log: which table, which predicates, how many files and
bytes it read. Pure: it takes the log's events as parsed JSON.

A SQL execution's plan (`SparkListenerSQLExecutionStart.sparkPlanInfo`, and the final plan of an adaptive query in
`SparkListenerSQLAdaptiveExecutionUpdate`) has one node per file scan: `Scan parquet [catalog.db.table]` whose
metadata names the location (`PreparedDeltaFileIndex(1 paths)[file:/...]` for a Delta table) and the filters. The
scan's "number of files read" and "size of files read" metrics are driver metrics, posted by
`SparkListenerDriverAccumUpdates` under the accumulator ids the plan gives. Delta's own executions (reading its log,
`Delta: Filtering files for query`) scan `_delta_log` or an RDD and are not queries (docs/advise.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from recluster.core.advice.filters import Predicate, scan_predicates

SQL_START = "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart"
SQL_END = "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd"
ADAPTIVE_UPDATE = "org.apache.spark.sql.execution.ui.SparkListenerSQLAdaptiveExecutionUpdate"
DRIVER_METRICS = "org.apache.spark.sql.execution.ui.SparkListenerDriverAccumUpdates"
SQL_EVENTS = frozenset({SQL_START, SQL_END, ADAPTIVE_UPDATE, DRIVER_METRICS})
"""The events `delta_scans` reads: a reader may skip parsing the others (tasks, stages, jobs: most of a log)."""
FILES_READ = "number of files read"
BYTES_READ = "size of files read"

_DELTA_INDEX = re.compile(
    r"^(?:PreparedDeltaFileIndex|TahoeLogFileIndex|TahoeBatchFileIndex|CdcAddFileIndex|"
    r"TahoeRemoveFileIndex|TahoeChangeFileIndex)\b.*?\[(.+)\]$"
)


@dataclass(frozen=True, slots=True)
class Scan:
    """One scan of a Delta table by one SQL execution."""

    location: str
    """The table's root as the plan names it (`file:/path`, `s3a://bucket/path`)."""
    name: str | None
    """`catalog.database.table` when the query named the table, else None (a path query)."""
    predicates: tuple[Predicate, ...]
    time_ms: int
    """When the execution started (the log's clock, milliseconds since the epoch)."""
    files_read: int | None = None
    bytes_read: int | None = None
    """The scan's metrics when the log has them (after data skipping)."""

    @property
    def columns(self) -> frozenset[str]:
        return frozenset(p.column for p in self.predicates)


@dataclass
class _Open:
    """An execution's scans whose metrics may still arrive."""

    time_ms: int
    scans: list[tuple[str, str | None, tuple[Predicate, ...], int | None, int | None]]
    metrics: dict[int, int] = field(default_factory=dict)


def _delta_location(metadata: Mapping[str, str]) -> str | None:
    found = _DELTA_INDEX.match(metadata.get("Location", ""))
    if not found:
        return None
    location = found.group(1).split(", ")[0]
    return None if "/_delta_log" in location else location


def _scan_nodes(node: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    if str(node.get("nodeName", "")).startswith("Scan "):
        yield node
    for child in node.get("children", ()):
        yield from _scan_nodes(child)


def _plan_scans(plan: Mapping[str, Any]) -> list[tuple[str, str | None, tuple[Predicate, ...], int | None, int | None]]:
    found = []
    for node in _scan_nodes(plan):
        metadata = node.get("metadata") or {}
        location = _delta_location(metadata)
        if location is None:
            continue
        words = str(node["nodeName"]).split()
        name = words[2] if len(words) > 2 else None
        metrics = {m.get("name"): m.get("accumulatorId") for m in node.get("metrics", ())}
        predicates = scan_predicates(metadata.get("PushedFilters", ""), metadata.get("PartitionFilters", ""))
        found.append((location, name, predicates, metrics.get(FILES_READ), metrics.get(BYTES_READ)))
    return found


def _closed(execution: _Open) -> Iterator[Scan]:
    for location, name, predicates, files_id, bytes_id in execution.scans:
        files = execution.metrics.get(files_id) if files_id is not None else None
        size = execution.metrics.get(bytes_id) if bytes_id is not None else None
        yield Scan(location, name, predicates, execution.time_ms, files, size)


def delta_scans(events: Iterable[Mapping[str, Any]]) -> Iterator[Scan]:
    """The Delta table scans of one application's events, in order; an execution whose end the log lacks (a
    truncated or running application's) still yields its scans, without the metrics that did not arrive."""
    executions: dict[int, _Open] = {}
    for event in events:
        kind = event.get("Event")
        if kind == SQL_START:
            scans = _plan_scans(event.get("sparkPlanInfo") or {})
            if scans:
                executions[int(event["executionId"])] = _Open(int(event.get("time", 0)), scans)
        elif kind == ADAPTIVE_UPDATE and int(event.get("executionId", -1)) in executions:
            execution = executions[int(event["executionId"])]
            scans = _plan_scans(event.get("sparkPlanInfo") or {})
            if scans:
                execution.scans = scans
        elif kind == DRIVER_METRICS and int(event.get("executionId", -1)) in executions:
            metrics = executions[int(event["executionId"])].metrics
            for accumulator, value in event.get("accumUpdates", ()):
                metrics[int(accumulator)] = metrics.get(int(accumulator), 0) + int(value)
        elif kind == SQL_END and int(event.get("executionId", -1)) in executions:
            yield from _closed(executions.pop(int(event["executionId"])))
    for execution in executions.values():
        yield from _closed(execution)
