"""A failing table's backoff (docs/operations.md#when-a-table-fails): the error classified, the attempts in a row,
and when the table is tried again. Light on imports: the Delta-log source, unpickled in each of Spark's Python
workers, keeps one for the logs it fails to read."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from pyarrow import ArrowInvalid

from recluster.core.deletion_vectors import DeletionVectorError
from recluster.core.errors import ErrorKind, StorageError, TableError, first_line
from recluster.delta.storage_faults import storage_fault

log = logging.getLogger("recluster.job")


def error_kind(error: BaseException) -> ErrorKind:
    """The kind of an error raised by work on one table."""
    if isinstance(error, StorageError):
        return ErrorKind.STORAGE
    if isinstance(error, TableError):
        return ErrorKind.TABLE
    if isinstance(error, DeletionVectorError | ArrowInvalid):
        return ErrorKind.DATA
    if isinstance(error, FileNotFoundError):
        return ErrorKind.DATA  # a file the log references is gone (vacuumed under us, or lost)
    if storage_fault(error) is not None:
        return ErrorKind.STORAGE
    return ErrorKind.UNKNOWN


@dataclass(frozen=True, slots=True)
class TableFailure:
    """The last failure of a table's work, how many in a row, and when it is tried again."""

    table: str
    kind: ErrorKind
    message: str
    attempts: int
    retry_at: float
    """Epoch seconds."""

    def __str__(self) -> str:
        return (
            f"recluster table={self.table} reason=table_failed kind={self.kind} attempts={self.attempts} "
            f"retry_at={self.retry_at:.0f} error={self.message!r}"
        )


class FailureBook:
    """Failing tables, each with its backoff: `base_seconds` after the first failure, doubled for each further
    one up to `max_seconds`. Thread-safe: micro-batches, ticks and the status pages use it."""

    def __init__(self, base_seconds: float, max_seconds: float) -> None:
        self.base_seconds = base_seconds
        self.max_seconds = max_seconds
        self._failures: dict[str, TableFailure] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, object]:
        """Picklable (a streaming source holding one is shipped to Spark's Python workers): the lock stays."""
        with self._lock:
            return {"base_seconds": self.base_seconds, "max_seconds": self.max_seconds, "failures": self._failures}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.base_seconds, self.max_seconds = state["base_seconds"], state["max_seconds"]
        self._failures = dict(state["failures"])
        self._lock = threading.Lock()

    def failed(self, table: str, error: BaseException, now: float) -> TableFailure:
        with self._lock:
            earlier = self._failures.get(table)
            attempts = 1 if earlier is None else earlier.attempts + 1
            wait = min(self.max_seconds, self.base_seconds * 2 ** (attempts - 1))
            failure = TableFailure(table, error_kind(error), first_line(error), attempts, now + wait)
            self._failures[table] = failure
            return failure

    def recovered(self, table: str) -> TableFailure | None:
        """Forget the table's failure; the failure it had, if any."""
        with self._lock:
            return self._failures.pop(table, None)

    def clear(self, table: str) -> None:
        """The table's work ran through: forget its failure, logging that it recovered."""
        failure = self.recovered(table)
        if failure is not None:
            log.info("recluster table=%s reason=table_recovered after=%d failures", table, failure.attempts)

    def get(self, table: str) -> TableFailure | None:
        with self._lock:
            return self._failures.get(table)

    def waiting(self, table: str, now: float) -> bool:
        """Whether the table failed and its backoff has not passed yet."""
        failure = self.get(table)
        return failure is not None and now < failure.retry_at

    def due(self, now: float) -> list[str]:
        """Failed tables whose backoff has passed."""
        with self._lock:
            return [table for table, failure in self._failures.items() if now >= failure.retry_at]


__all__ = ["FailureBook", "TableFailure", "error_kind"]
