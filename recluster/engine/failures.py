"""One table's failure kept to that table (docs/operations.md#when-a-table-fails): the error is classified, shown
with the table (status page, API, metrics record) and the table is tried again after a backoff that doubles with
each failure in a row (engine/backoff.py), while the job goes on with the other tables. A success clears it."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from recluster.core.metrics import ClusteringInfo
from recluster.engine.backoff import TableFailure
from recluster.engine.job_state import TableStatus
from recluster.engine.publish import BatchActions, FailureRecord, MetricsRecord, metrics_record


def failed_status(failure: TableFailure, earlier: TableStatus | None) -> TableStatus:
    """The table's status with its failure: the figures it had (if any) and the error."""
    status = earlier or TableStatus(failure.table, -1, (), 1.0)
    return replace(status, error=failure.message, error_kind=str(failure.kind))


def failed_record(failure: TableFailure, version: int, info: ClusteringInfo) -> MetricsRecord:
    """The metrics record of a table whose work failed: its figures at `version` (empty when it could not be
    loaded) and the failure."""
    record = metrics_record(
        failure.table, version, info, {}, BatchActions(), pending=True, errors=[f"{failure.kind}: {failure.message}"]
    )
    retry_at = dt.datetime.fromtimestamp(failure.retry_at, dt.UTC)
    found = FailureRecord(kind=str(failure.kind), error=failure.message, attempts=failure.attempts, retry_at=retry_at)
    return record.model_copy(update={"failure": found})
