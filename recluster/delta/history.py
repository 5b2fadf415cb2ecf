"""The optimizing history: a real Delta table, one row when a process starts and one when it ends.

Quota occupation and "since last minor/major/full" times are computed from it (recluster/core/scheduling.py),
so they survive restarts; anyone can query it with Spark or delta-rs.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import DeltaError, TableNotFoundError

from recluster.core.errors import TableError, first_line
from recluster.core.scheduling import ProcessRecord, ProcessStatus, ProcessType
from recluster.delta.storage import normalize_uri


def append_rows(location: str, rows: pa.Table, storage_options: Mapping[str, str] | None) -> None:
    """Append rows to a Delta table, creating it on first use (the optimizing history)."""
    from deltalake import write_deltalake

    try:
        write_deltalake(  # schema_mode merge: a history written by an older version gains the new columns
            normalize_uri(location),
            rows,
            mode="append",
            schema_mode="merge",
            storage_options=dict(storage_options or {}),
        )
    except (DeltaError, OSError) as error:
        raise TableError(f"cannot append to {location}: {first_line(error)}") from None


def read_rows(location: str, storage_options: Mapping[str, str] | None) -> pa.Table | None:
    """All rows of a Delta table; None when there is no table at `location` yet."""
    try:
        table = DeltaTable(normalize_uri(location), storage_options=dict(storage_options or {}))
    except TableNotFoundError:
        return None
    # Read by delta-rs itself (DataFusion), not by a pyarrow dataset over delta-rs's Python file system: that scan can
    # release Python-backed buffers on Arrow's threads after it returned, which aborted a command exiting right after
    # it (exit 134, docs/commands.md#exit-codes).
    reader = QueryBuilder().register("history", table).execute("SELECT * FROM history")
    return pa.table(reader.read_all()).cast(pa.schema(table.schema().to_arrow()))


def compact_small_files(location: str, storage_options: Mapping[str, str] | None) -> int:
    """Bin-pack a table's small files (delta-rs optimize; for our own history table, which has no key).
    Returns the number of files removed."""
    try:
        table = DeltaTable(normalize_uri(location), storage_options=dict(storage_options or {}))
        return int(table.optimize.compact().get("numFilesRemoved", 0))
    except TableNotFoundError:
        return 0
    except DeltaError as error:
        raise TableError(f"cannot compact {location}: {first_line(error)}") from None


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
        ("depth", pa.float64()),
        ("detail", pa.string()),
    ]
)


STALE_PROCESS_SECONDS = 6 * 3600.0
"""A start row without an end row older than this belongs to a process that crashed."""


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
            depth=row.get("depth"),
            detail=row.get("detail"),
        )
        for row in rows.select([n for n in HISTORY_SCHEMA.names if n in rows.column_names]).to_pylist()
    ]


def prune(records: Sequence[ProcessRecord], *, keep_after: float, stale_seconds: float) -> list[ProcessRecord]:
    """The rows summaries still need: the rows of processes that ended after `keep_after`, of processes
    still running (started less than `stale_seconds` before it), and the latest successful end row per
    (table, type) for the "last optimized" times."""
    ends = {r.process_id: r.end for r in records if r.end is not None}
    latest: dict[tuple[str, ProcessType], ProcessRecord] = {}
    for record in records:
        if record.status is ProcessStatus.SUCCESS and record.end is not None:
            seen = latest.get((record.table, record.type))
            if seen is None or (seen.end or 0.0) < record.end:
                latest[(record.table, record.type)] = record
    kept = {id(r) for r in latest.values()}

    def needed(record: ProcessRecord) -> bool:
        end = ends.get(record.process_id)
        return end >= keep_after if end is not None else record.start >= keep_after - stale_seconds

    return [r for r in records if id(r) in kept or needed(r)]


@dataclass
class HistoryStore:
    """Appends process rows to the history table and keeps, in memory, the rows summaries need (read once;
    a long-running job prunes what fell out of the window, so memory stays bounded).

    `deferred`: appended rows are kept in memory (summaries see them at once) and written by `flush`, in one
    commit: the streaming job flushes from its tick, so no micro-batch waits for a history write."""

    location: str
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False)
    window_seconds: float = 3600.0
    deferred: bool = False
    _records: list[ProcessRecord] | None = field(default=None, repr=False)
    _unwritten: list[ProcessRecord] = field(default_factory=list, repr=False)
    _by_table: dict[str, list[ProcessRecord]] = field(default_factory=dict, repr=False)
    """The kept rows by table: a job asks for one table's rows per table per pass, over thousands of tables."""
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)
    """Micro-batches and the maintenance pass append from different threads."""

    def records(self) -> list[ProcessRecord]:
        with self._lock:
            return list(self._loaded())

    def records_of(self, table: str) -> list[ProcessRecord]:
        """The kept rows of one table (what `records()` holds for it), without going through every table's."""
        with self._lock:
            self._loaded()
            return list(self._by_table.get(table, ()))

    def _loaded(self) -> list[ProcessRecord]:
        """The kept rows, read from the table the first time (under the lock)."""
        if self._records is None:
            rows = read_rows(self.location, self.storage_options)
            self._keep([] if rows is None else records_from_arrow(rows))
        assert self._records is not None
        return self._records

    def _keep(self, records: list[ProcessRecord]) -> None:
        self._records = records
        self._by_table = {}
        for record in records:
            self._by_table.setdefault(record.table, []).append(record)

    def append(self, *records: ProcessRecord) -> None:
        with self._lock:
            if self.deferred:
                self._unwritten.extend(records)
            else:
                append_rows(self.location, records_to_arrow(records), self.storage_options)
            kept = [*self._loaded(), *records]
            self._keep(prune(kept, keep_after=time.time() - self.window_seconds, stale_seconds=STALE_PROCESS_SECONDS))

    def flush(self) -> int:
        """Write the deferred rows in one commit (outside the lock: appends go on meanwhile); returns how many.
        A failed write keeps them for the next flush."""
        with self._lock:
            rows, self._unwritten = self._unwritten, []
        if not rows:
            return 0
        try:
            append_rows(self.location, records_to_arrow(rows), self.storage_options)
        except BaseException:
            with self._lock:
                self._unwritten[:0] = rows
            raise
        return len(rows)
