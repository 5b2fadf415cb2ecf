"""What the running job shows the outside (status pages, /status, /metrics, `demo`, tests and benchmarks): one
immutable view, replaced whole when a micro-batch, a tick or a table load has published, never changed in place.

Readers take `StatusBoard.view` (one reference read) and never lock the job's own state, so a page never waits for a
merge and never sees a table half updated (docs/architecture.md, "The flow of a batch").
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from recluster.core.blocks import LEVEL_CONSTANT
from recluster.core.metrics import ClusteringInfo
from recluster.core.selection.plan import SelectionBounds, level_threshold
from recluster.delta.snapshot import TableSnapshot
from recluster.engine.backoff import TableFailure
from recluster.engine.job_state import LevelStatus, TableStatus, TrackedTable


@dataclass(frozen=True, slots=True)
class JobView:
    """The job as readers see it at one moment: every table's last status and the snapshot it was decided on."""

    sequence: int = 0
    """Counts publications: a reader waiting for news waits for a higher one (`StatusBoard.wait_newer`)."""
    statuses: Mapping[str, TableStatus] = field(default_factory=lambda: MappingProxyType({}))
    snapshots: Mapping[str, TableSnapshot] = field(default_factory=lambda: MappingProxyType({}))
    """Tables the job tracks, at the version of their last status (a table that failed to load has none)."""
    published_at: float = 0.0

    def __str__(self) -> str:
        return f"job view {self.sequence}: {len(self.statuses)} statuses, {len(self.snapshots)} tables"


class StatusBoard:
    """Holds the current `JobView`; writers publish under a lock, readers take the view without one."""

    def __init__(self) -> None:
        self._view = JobView()
        self._changed = threading.Condition()

    @property
    def view(self) -> JobView:
        return self._view

    def publish(
        self,
        statuses: Iterable[TableStatus] = (),
        snapshots: Iterable[TableSnapshot] = (),
        dropped: Iterable[str] = (),
        removed: Iterable[str] = (),
    ) -> JobView:
        """A new view: these statuses and snapshots replace the tables' previous ones, `dropped` tables lose their
        snapshot (they failed and are no longer tracked), `removed` ones both (the job let them go); every other
        table is carried over as it was."""
        with self._changed:
            current = self._view
            new_statuses = dict(current.statuses)
            new_statuses.update((s.table, s) for s in statuses)
            new_snapshots = dict(current.snapshots)
            for uri in dropped:
                new_snapshots.pop(uri, None)
            for uri in removed:
                new_snapshots.pop(uri, None)
                new_statuses.pop(uri, None)
            new_snapshots.update((s.uri, s) for s in snapshots)
            self._view = JobView(
                current.sequence + 1, MappingProxyType(new_statuses), MappingProxyType(new_snapshots), time.time()
            )
            self._changed.notify_all()
            return self._view

    def wait_newer(self, sequence: int, timeout: float) -> JobView:
        """The first view newer than `sequence`, or the current one after `timeout` seconds."""
        with self._changed:
            self._changed.wait_for(lambda: self._view.sequence > sequence, timeout)
            return self._view


def follow_statuses(board: StatusBoard, on_status: Callable[[TableStatus], None]) -> threading.Event:
    """Call `on_status` with every status published from now on, as it is published, from a daemon thread (for
    embedders timing the job's decisions); set the returned event to stop."""
    stop = threading.Event()

    def follow() -> None:
        seen = board.view
        while not stop.is_set():
            view = board.wait_newer(seen.sequence, 0.5)
            for uri, status in view.statuses.items():
                if status is not seen.statuses.get(uri):
                    on_status(status)
            seen = view

    threading.Thread(target=follow, name="recluster-status-follower", daemon=True).start()
    return stop


class WorkInProgress:
    """Counts work running on the job's threads (micro-batches, ticks, maintenance): `idle` is set while none runs,
    and a graceful stop waits for it."""

    def __init__(self) -> None:
        self.idle = threading.Event()
        self.idle.set()
        self._running = 0
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        with self._lock:
            self._running += 1
            self.idle.clear()
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                if not self._running:
                    self.idle.set()


def table_status(
    tracked: TrackedTable,
    info: ClusteringInfo,
    bounds: SelectionBounds,
    *,
    pending: bool,
    failure: TableFailure | None,
    target_lag_seconds: float | None = None,
) -> TableStatus:
    """A tracked table's status: its levels against their thresholds, the totals since the job started, its error."""
    levels = tuple(
        LevelStatus(level, m.total_block_count, m.average_depth, level_threshold(m.total_block_count, bounds))
        for level, m in info.levels.items()
        if level != LEVEL_CONSTANT
    )
    return TableStatus(
        tracked.uri,
        tracked.version,
        levels,
        info.table.average_depth,
        tasks=tracked.totals.tasks,
        conflicts=tracked.totals.conflicts,
        failures=tracked.totals.failures,
        bytes_written=tracked.totals.bytes_written,
        bytes_appended=tracked.bytes_appended,
        pending=pending,
        error=failure.message if failure else None,
        error_kind=str(failure.kind) if failure else None,
        policy=bounds.policy,
        settings=tracked.settings,
        lag=tracked.lag.summary(time.time(), target_lag_seconds),
        benefit=tracked.benefit,
    )
