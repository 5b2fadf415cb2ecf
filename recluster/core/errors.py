"""Errors a user must fix, reported as one line (no traceback). Pure."""

from __future__ import annotations


class TableError(Exception):
    """A table problem the user must fix (not a Delta table, bad key, unsupported feature): one line."""


class StorageError(TableError):
    """A storage call failed and retries did not help (one line); `transient` when a later retry may."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


def first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
