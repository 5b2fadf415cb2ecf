"""Errors a user must fix, reported as one line (no traceback). Pure."""

from __future__ import annotations


class TableError(Exception):
    """A table problem the user must fix (not a Delta table, bad key, unsupported feature): one line."""


def first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
