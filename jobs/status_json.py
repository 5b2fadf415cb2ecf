"""The `/status` body, serialized a table at a time (docs/streaming.md#health-metrics-and-status-endpoints).

A job with thousands of tables answers `/status` often (operators, dashboards, a fleet's pollers), and serializing
every table's status on each request holds the interpreter lock that the job's micro-batches need. Statuses are
immutable values, replaced whole when a table changes: a table's JSON is kept while its status is the same object,
so a request serializes only the tables that changed since the one before.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from recluster.engine.job_state import TableStatus


def compact_json(value: Any) -> str:
    """Compact JSON: Python's C encoder writes no indented JSON, and its own encoder is several times slower."""
    return json.dumps(value, default=str, separators=(",", ":"))


class StatusJson:
    """Each table's `/status` entry as JSON, kept per table while its status object stays the same."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[TableStatus, str]] = {}

    def body(self, envelope: Mapping[str, Any], statuses: Iterable[TableStatus]) -> str:
        """`envelope` as a JSON object with `tables`, the statuses sorted by table, after its keys (one line)."""
        entries: dict[str, tuple[TableStatus, str]] = {}
        kept = self._entries
        for status in sorted(statuses, key=lambda s: s.table):
            cached = kept.get(status.table)
            entries[status.table] = (
                cached if cached is not None and cached[0] is status else (status, compact_json(status.to_dict()))
            )
        self._entries = entries  # replaced whole: concurrent requests each read a complete map
        head = compact_json({**envelope, "tables": []})
        return head[: -len("[]}")] + "[" + ",".join(text for _, text in entries.values()) + "]}\n"
