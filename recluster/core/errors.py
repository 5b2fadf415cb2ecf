"""Errors a user must fix, reported as one line (no traceback). Pure."""

from __future__ import annotations

from enum import StrEnum


class ErrorKind(StrEnum):
    """What kind of failure stopped work on one table (docs/operations.md#when-a-table-fails)."""

    TABLE = "table"
    """The table itself: not a Delta table, a key column gone, an unsupported feature, a bad property."""
    DATA = "data"
    """Its files: a deletion vector or input that cannot be read as the log says, rows that do not add up."""
    STORAGE = "storage"
    """The store: timeouts, throttling, permissions, credentials."""
    UNKNOWN = "unknown"
    """Anything else (a defect of ours): logged with its traceback."""


class TableError(Exception):
    """A table problem the user must fix (not a Delta table, bad key, unsupported feature): one line."""


class StorageError(TableError):
    """A storage call failed and retries did not help (one line); `transient` when a later retry may."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


def first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
