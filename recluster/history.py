"""The optimizing history: a real Delta table, one row when a process starts and one when it ends.

Quota occupation and "since last minor/major/full" times are computed from it (recluster/optimizing.py),
so they survive restarts; anyone can query it with Spark or delta-rs.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from recluster.optimizing import ProcessRecord, ProcessStatus, ProcessType
from recluster.table import append_rows, read_rows

HISTORY_SCHEMA = pa.schema(
    [
        ("process_id", pa.string()),
        ("table", pa.string()),
        ("type", pa.string()),
        ("group", pa.string()),
        ("start", pa.timestamp("us", tz="UTC")),
        ("end", pa.timestamp("us", tz="UTC")),
        ("status", pa.string()),
        ("files_in", pa.int64()),
        ("bytes_in", pa.int64()),
        ("files_out", pa.int64()),
        ("bytes_out", pa.int64()),
        ("rows", pa.int64()),
        ("error", pa.string()),
    ]
)


def new_process_id() -> str:
    return uuid.uuid4().hex[:16]


def _timestamp(seconds: float | None) -> dt.datetime | None:
    return None if seconds is None else dt.datetime.fromtimestamp(seconds, dt.UTC)


def _seconds(value: dt.datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def records_to_arrow(records: Sequence[ProcessRecord]) -> pa.Table:
    columns = {name: [getattr(r, name) for r in records] for name in HISTORY_SCHEMA.names}
    columns["type"] = [str(r.type) for r in records]
    columns["status"] = [str(r.status) for r in records]
    columns["start"] = [_timestamp(r.start) for r in records]
    columns["end"] = [_timestamp(r.end) for r in records]
    return pa.table(columns, schema=HISTORY_SCHEMA)


def records_from_arrow(rows: pa.Table) -> list[ProcessRecord]:
    return [
        ProcessRecord(
            process_id=row["process_id"],
            table=row["table"],
            type=ProcessType(row["type"]),
            group=row["group"],
            start=_seconds(row["start"]) or 0.0,
            end=_seconds(row["end"]),
            status=ProcessStatus(row["status"]),
            files_in=row["files_in"],
            bytes_in=row["bytes_in"],
            files_out=row["files_out"],
            bytes_out=row["bytes_out"],
            rows=row["rows"],
            error=row["error"],
        )
        for row in rows.select(HISTORY_SCHEMA.names).to_pylist()
    ]


@dataclass
class HistoryStore:
    """Appends process rows to the history table and keeps the rows read so far (one reader per process)."""

    location: str
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False)
    _records: list[ProcessRecord] | None = field(default=None, repr=False)

    def records(self) -> list[ProcessRecord]:
        if self._records is None:
            rows = read_rows(self.location, self.storage_options)
            self._records = [] if rows is None else records_from_arrow(rows)
        return self._records

    def append(self, *records: ProcessRecord) -> None:
        append_rows(self.location, records_to_arrow(records), self.storage_options)
        self.records().extend(records)
