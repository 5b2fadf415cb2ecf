"""Processes and when tables get their turn (docs/operations.md): the kinds of process, the history table's records,
one table's history summarized (last successful runs, busy time in the quota window, the process running now), and the
order tables with due work run in. Pure: records in, summaries and the order out. No I/O.

Tables are scheduled per optimizer group: `quota` (lowest quota occupation first, occupation = busy time in the
window / (window x quota)) or `balanced` (longest since last optimized first); a table at or over its quota waits.
Ahead of either policy, tables with a `target_lag` and unclustered commits run earliest deadline first (the deadline:
their oldest unclustered commit's time + target_lag, `core/target_lag.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from recluster.settings_optimizing import OptimizerGroup


class ProcessType(StrEnum):
    """Kinds of process the scheduler runs and the history table records."""

    MINOR = "minor"
    MAJOR = "major"
    FULL = "full"
    RECLUSTER = "recluster"
    MAINTENANCE = "maintenance"
    ESTIMATE = "estimate"
    """Not a process: what `estimate` projected when the job took the table up (`ProcessRecord.detail`)."""


OPTIMIZING_TYPES = (ProcessType.MINOR, ProcessType.MAJOR, ProcessType.FULL)


class TableState(StrEnum):
    """What `recluster status` shows for a table: idle, pending work, the running process, or disabled."""

    IDLE = "idle"
    PENDING = "pending"
    MINOR = "minor"
    MAJOR = "major"
    FULL = "full"
    RECLUSTER = "recluster"
    MAINTENANCE = "maintenance"
    DISABLED = "disabled"


class ProcessStatus(StrEnum):
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """One row of the history table: a process's start row (status running), then its end row."""

    process_id: str
    table: str
    type: ProcessType
    group: str
    start: float
    """Seconds since the epoch."""
    end: float | None = None
    status: ProcessStatus = ProcessStatus.RUNNING
    files_in: int = 0
    bytes_in: int = 0
    files_out: int = 0
    bytes_out: int = 0
    rows: int = 0
    error: str | None = None
    depth: float | None = None
    """The table's average depth when the process was planned (the status page plots it over time)."""
    detail: str | None = None
    """JSON of what an `estimate` row projected (`recluster.core.estimate.projection.ProjectedCost`); on a
    maintenance row, the steps the table's features ruled out (each `recluster.delta.maintenance_steps.StepRefusal`
    as a line, joined by "; "), None when every step could run."""

    def finished(self, end: float, status: ProcessStatus, **amounts: Any) -> ProcessRecord:
        return replace(self, end=end, status=status, **amounts)


@dataclass(frozen=True, slots=True)
class TableHistory:
    """What the history says about one table: last successful time per type, busy seconds in the window,
    and the process running now (a start row without an end row)."""

    last: Mapping[ProcessType, float] = field(default_factory=dict)
    busy_seconds: float = 0.0
    running: ProcessType | None = None

    @property
    def last_optimized(self) -> float | None:
        """Latest end of any optimizing or recluster process (balanced scheduling orders by it)."""
        times = [t for kind, t in self.last.items() if kind is not ProcessType.MAINTENANCE]
        return max(times) if times else None


def table_history(
    records: Iterable[ProcessRecord], table: str, *, now: float, window_seconds: float, stale_seconds: float
) -> TableHistory:
    """Summarize the history rows of one table (the latest row of each process wins).

    A start row without an end row counts as running until `stale_seconds` old (then its process crashed);
    busy time is each process's overlap with [now - window, now], a running one counting up to now.
    """
    latest: dict[str, ProcessRecord] = {}
    for record in records:
        if record.table != table:
            continue
        seen = latest.get(record.process_id)
        if seen is None or (record.end is not None and seen.end is None):
            latest[record.process_id] = record
    last: dict[ProcessType, float] = {}
    busy = 0.0
    running: tuple[float, ProcessType] | None = None
    for record in latest.values():
        if record.end is None:
            if now - record.start > stale_seconds:
                continue
            if running is None or record.start > running[0]:
                running = (record.start, record.type)
        elif record.status is ProcessStatus.SUCCESS:
            last[record.type] = max(last.get(record.type, 0.0), record.end)
        end = now if record.end is None else record.end
        if record.type is not ProcessType.MAINTENANCE:
            busy += max(0.0, min(end, now) - max(record.start, now - window_seconds))
    return TableHistory(last, busy, running[1] if running else None)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A table with due work, as the scheduler sees it."""

    table: str
    group: str
    quota: float
    work: ProcessType
    busy_seconds: float
    last_optimized: float | None
    lag_deadline: float | None = None
    """When its oldest unclustered commit misses the table's target_lag (epoch seconds); None: no target or nothing
    pending."""

    def occupation(self, window_seconds: float) -> float:
        """Busy time in the window / (window x quota): 1.0 means the table used its whole quota."""
        return self.busy_seconds / (window_seconds * self.quota)


def schedule(
    candidates: Iterable[Candidate], groups: Mapping[str, OptimizerGroup], *, window_seconds: float
) -> tuple[list[Candidate], list[Candidate]]:
    """(to run, in order; waiting because over quota). Per group, tables with a lag deadline come first (earliest
    first), then its policy orders the others; at most `max_concurrent_tasks` of them run now; groups are interleaved
    so none starves another."""
    by_group: dict[str, list[Candidate]] = {}
    waiting: list[Candidate] = []
    for candidate in candidates:
        if candidate.occupation(window_seconds) >= 1.0:
            waiting.append(candidate)
        else:
            by_group.setdefault(candidate.group, []).append(candidate)
    queues: list[list[Candidate]] = []
    for name, members in sorted(by_group.items()):
        group = groups[name]
        if group.policy == "quota":
            members.sort(key=lambda c: (c.occupation(window_seconds), c.table))
        else:
            members.sort(key=lambda c: (c.last_optimized is not None, c.last_optimized or 0.0, c.table))
        members.sort(key=lambda c: (c.lag_deadline is None, c.lag_deadline or 0.0))  # stable: the policy breaks ties
        queues.append(members[: group.max_concurrent_tasks])
    ordered = [queue[i] for i in range(max((len(q) for q in queues), default=0)) for queue in queues if i < len(queue)]
    return ordered, waiting
