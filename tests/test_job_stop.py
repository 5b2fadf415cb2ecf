"""How the job stops (jobs/autorecluster.py): gracefully, between two triggers, so no batch Spark has started is
interrupted in the middle of a Spark call (which logged a traceback); a job sharing tables hands them back last."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from jobs.autorecluster import stop_gracefully
from recluster.core.leases import Heartbeat
from recluster.engine.handler import ReclusterHandler
from recluster.engine.job_discovery import JobDiscovery
from recluster.settings import Settings
from recluster.settings_discovery import DiscoverySettings, LeaseSettings, StorageRoot


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


def test_a_graceful_stop_of_a_job_sharing_tables_hands_them_back_after_the_query_stopped(tmp_path: Path) -> None:
    """The last step of a graceful stop: the job's heartbeat written already expired, with its holdings, so the other
    jobs claim its tables at their next lease pass (docs/discovery.md#several-jobs)."""
    leases = LeaseSettings(root=str(tmp_path / "leases"), ttl_seconds=30, renew_seconds=10)
    settings = Settings(discovery=DiscoverySettings(roots=[StorageRoot(uri=str(tmp_path / "lake"))], leases=leases))
    handler = ReclusterHandler(settings, settings.tables, spark=None)
    discovery = JobDiscovery(settings, None, frozenset(), handler.take_up_found, handler.let_go, None)
    assert discovery.leases is not None
    handler.discovery, job = discovery, discovery.leases
    job.beat()
    job.run_pass(["s3://bucket/t0", "s3://bucket/t1"], lambda uri: None)
    beats_at_stop: list[dict[str, Heartbeat]] = []

    class QueryNoticingTheLeases(TriggeredQuery):
        def stop(self) -> None:
            super().stop()
            beats_at_stop.append(job.store.heartbeats()[0])

    stop_gracefully(QueryNoticingTheLeases(active_reads=0), handler)
    assert beats_at_stop[0][job.job].alive(time.time(), 30)  # alive until the query stopped
    after = job.store.heartbeats()[0][job.job]
    assert not after.alive(time.time(), 30) and after.owned == 2
    holdings = job.store.holdings(job.job)
    assert holdings is not None and set(holdings.sequences) == {"s3://bucket/t0", "s3://bucket/t1"}
    assert job.held == {} and not job.may_work()
