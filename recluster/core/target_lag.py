"""Time-to-clustered per table (docs/operations.md#time-to-clustered-target): how long a data commit waits until
its rows sit in files that meet the table's depth target. Pure: commit times and "clustered up to version v" events
in, the lag percentiles and the scheduling deadline out. No I/O.

A foreign data commit is pending from its commit time; when the job finds the table within its depth target at a
version (the planner has nothing to do there, or a recluster ran every task it planned), every pending commit up to
that version is clustered and its lag is `now - commit time`. The last `LAG_WINDOW` lags are kept; the percentiles
count each still-pending commit with its age so far, so a table the scheduler starves shows its lag before it is served.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

LAG_WINDOW = 1000
"""Lags kept per table for the percentiles."""


def nearest_rank(values: Iterable[float], quantile: float) -> float | None:
    """The nearest-rank percentile (the smallest value with at least `quantile` of the values at or below it)."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[max(0, math.ceil(quantile * len(ordered)) - 1)]


@dataclass(frozen=True, slots=True)
class LagSummary:
    """A table's lag against its target: p50 and p95 over the kept lags and the pending commits' ages (seconds)."""

    target_seconds: float | None
    p50_seconds: float | None
    p95_seconds: float | None
    oldest_pending_seconds: float | None
    clustered: int
    """Lags in the window."""
    pending: int
    """Data commits not clustered yet."""

    @property
    def met(self) -> bool | None:
        """p95 within the target; None without a target or before any commit was seen."""
        if self.target_seconds is None or self.p95_seconds is None:
            return None
        return self.p95_seconds <= self.target_seconds

    def __str__(self) -> str:
        def seconds(value: float | None) -> str:
            return "-" if value is None else f"{value:.1f}s"

        target = "none" if self.target_seconds is None else seconds(self.target_seconds)
        verdict = {True: "met", False: "missed", None: "-"}[self.met]
        return f"p50={seconds(self.p50_seconds)} p95={seconds(self.p95_seconds)} target={target} {verdict}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "target_seconds": self.target_seconds,
            "p50_seconds": self.p50_seconds,
            "p95_seconds": self.p95_seconds,
            "met": self.met,
            "oldest_pending_seconds": self.oldest_pending_seconds,
            "clustered": self.clustered,
            "pending": self.pending,
        }


@dataclass(slots=True)
class LagTracker:
    """One table's pending data commits (version, commit time) in version order and its last lags."""

    window: int = LAG_WINDOW
    pending: deque[tuple[int, float]] = field(default_factory=deque)
    lags: deque[float] = field(init=False)
    newest: int = -1
    """The newest version seen: a commit read again (a replay after a restart, a reload) is not counted twice."""

    def __post_init__(self) -> None:
        self.lags = deque(maxlen=self.window)

    def committed(self, version: int, at: float) -> None:
        """A foreign data commit seen by the job (versions arrive in increasing order)."""
        if version > self.newest:
            self.pending.append((version, at))
            self.newest = version

    def clustered(self, version: int, now: float) -> None:
        """The table meets its depth target at `version`: every pending commit up to it is clustered now."""
        while self.pending and self.pending[0][0] <= version:
            _, at = self.pending.popleft()
            self.lags.append(max(0.0, now - at))

    def oldest_pending(self) -> float | None:
        """Commit time of the oldest data commit not clustered yet."""
        return self.pending[0][1] if self.pending else None

    def summary(self, now: float, target_seconds: float | None) -> LagSummary:
        ages = [max(0.0, now - at) for _, at in self.pending]
        values = [*self.lags, *ages]
        return LagSummary(
            target_seconds,
            nearest_rank(values, 0.5),
            nearest_rank(values, 0.95),
            max(ages) if ages else None,
            len(self.lags),
            len(ages),
        )


def lag_deadline(tracker: LagTracker, target_seconds: float | None) -> float | None:
    """When the oldest pending commit misses the target (epoch seconds); None without a target or pending commit.
    The scheduler runs tables with a deadline first, earliest first (core/scheduling.py)."""
    oldest = tracker.oldest_pending()
    if target_seconds is None or oldest is None:
        return None
    return oldest + target_seconds


def replayed_lag(
    commits: Iterable[tuple[int, float, bool]], within_target: bool, now: float, target_seconds: float | None
) -> LagSummary:
    """The lag read back from a table's log, without the job's memory (`recluster status`). `commits`: its data
    commits as (version, commit time in epoch seconds, whether recluster wrote it) in version order. A foreign one
    is pending from its time; a rewrite of recluster's clusters every one before it at the rewrite's time; when the
    table is within its depth target now (nothing to plan), the ones still pending needed no rewrite: clustered when
    committed (lag 0). It can differ from the job's figure, which knows when each batch found the target met."""
    tracker = LagTracker()
    for version, at, rewrite in commits:
        if rewrite:
            tracker.clustered(version - 1, at)
        else:
            tracker.committed(version, at)
    while within_target and tracker.pending:
        version, at = tracker.pending[0]
        tracker.clustered(version, at)
    return tracker.summary(now, target_seconds)
