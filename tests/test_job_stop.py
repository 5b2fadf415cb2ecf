"""How the job stops (jobs/autorecluster.py): gracefully, between two triggers, so no batch Spark has started is
interrupted in the middle of a Spark call (which logged a traceback)."""

from __future__ import annotations

from typing import Any

from jobs.autorecluster import stop_gracefully
from recluster.engine.handler import ReclusterHandler
from recluster.settings import Settings


class TriggeredQuery:
    """A streaming query whose trigger is active for its first `active_reads` looks at its status."""

    def __init__(self, active_reads: int) -> None:
        self.active_reads = active_reads
        self.reads = 0
        self.stopped_after: int | None = None

    @property
    def status(self) -> dict[str, Any]:
        self.reads += 1
        return {"isTriggerActive": self.reads <= self.active_reads}

    def stop(self) -> None:
        self.stopped_after = self.reads


def test_a_graceful_stop_waits_for_the_trigger_to_end() -> None:
    settings = Settings()
    handler = ReclusterHandler(settings, settings.tables, spark=None)
    query = TriggeredQuery(active_reads=3)
    stop_gracefully(query, handler)
    assert handler.stopping.is_set()
    assert query.stopped_after == 4  # three looks with the trigger active, stopped at the first without


def test_a_trigger_that_never_ends_is_stopped_at_the_deadline() -> None:
    settings = Settings()
    handler = ReclusterHandler(settings, settings.tables, spark=None)
    query = TriggeredQuery(active_reads=10**9)
    stop_gracefully(query, handler, grace_seconds=0.5)
    assert query.stopped_after is not None and query.stopped_after >= 2
