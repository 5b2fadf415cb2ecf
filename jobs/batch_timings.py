"""Where a micro-batch's time went, from Spark's progress of the streaming query (its `durationMs`): logged once a
batch by the watch loop and shown on `/status`, so an operator sees whether the source's poll, the job's handler or
Spark's own bookkeeping holds decisions back (docs/streaming.md#batch-timings)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("recluster.batch")

PHASES = (
    ("latestOffset", "poll"),
    ("getBatch", "plan_source"),
    ("queryPlanning", "plan_query"),
    ("addBatch", "handler"),
    ("walCommit", "offsets_log"),
    ("commitOffsets", "commits_log"),
)
"""Spark's names of a batch's phases and ours: the source's poll for new commits (`latestOffset`), its read planned,
the batch's plan, the batch itself (reading the commit files and the job's foreachBatch handler), then the
checkpoint's offsets and commits logs written."""


@dataclass(frozen=True, slots=True)
class BatchTimings:
    """One finished micro-batch: its id, the commits (rows) it took in, its whole time and each phase's, in ms."""

    batch: int
    rows: int
    total_ms: int
    phases: tuple[tuple[str, int], ...]

    def __str__(self) -> str:
        parts = " ".join(f"{name}_ms={ms}" for name, ms in self.phases)
        return f"batch={self.batch} rows={self.rows} total_ms={self.total_ms} {parts}"

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "rows": self.rows, "total_ms": self.total_ms, "phases_ms": dict(self.phases)}


def batch_timings(progress: Mapping[str, Any] | None) -> BatchTimings | None:
    """The timings of a progress update that reports a batch that ran (an idle trigger's has no `addBatch`)."""
    if not progress:
        return None
    durations: Mapping[str, Any] = progress.get("durationMs") or {}
    if "addBatch" not in durations:
        return None
    phases = tuple((ours, int(durations[spark])) for spark, ours in PHASES if spark in durations)
    return BatchTimings(
        int(progress.get("batchId", -1)),
        int(progress.get("numInputRows", 0)),
        int(durations.get("triggerExecution", 0)),
        phases,
    )


class BatchLog:
    """Logs each batch's timings once, as the watch loop polls the query: `latest` answers `/status`. The query's
    progress is asked for only after the handler finished a batch it has not logged (the progress carries every
    table's offsets: thousands of entries with discovery, too many to fetch at every turn of the loop)."""

    def __init__(self) -> None:
        self.latest: BatchTimings | None = None
        self.logged_batch_time: float | None = None

    def poll(self, query: Any, batch_time: float | None) -> None:
        """`batch_time`: when the handler last finished a batch (its progress is posted just after)."""
        if batch_time is None or batch_time == self.logged_batch_time:
            return
        try:
            progress = query.lastProgress
        except Exception:  # the JVM side is gone or stopping: nothing new to log
            return
        timings = batch_timings(progress)
        if timings is None or (self.latest is not None and timings.batch <= self.latest.batch):
            return  # not posted yet: asked again at the next turn
        self.latest, self.logged_batch_time = timings, batch_time
        log.info("recluster %s", timings)
