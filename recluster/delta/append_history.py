"""A table's data commits as `estimate` learns from them (docs/commands.md#recluster-estimate): per commit its time,
rows, bytes and the range of the first key column over the files it added (from the add actions' stats), and the late
rows of a few sampled appended files (their key column read from Parquet).

Commits recluster wrote, and any commit adding no data (`dataChange=false`: OPTIMIZE, compaction), are not appends.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from recluster.core.estimate.shape import AppendStats, LateSample
from recluster.delta.log import PRODUCER, CommitEntry, read_commits
from recluster.delta.log_listing import log_versions
from recluster.delta.storage import file_location, table_filesystem

READ_THREADS = 8
LATE_SAMPLES = 12
"""Appended commits whose key column is read to measure the late share."""


def _number(value: Any) -> float | None:
    """A stats value as a number: numbers as they are, timestamps and dates as epoch milliseconds."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.UTC)
        return parsed.timestamp() * 1000.0
    return None


def _is_append(entry: CommitEntry) -> bool:
    return (
        not entry.is_gap
        and entry.producer is None
        and bool(entry.adds)
        and any(add.get("dataChange", True) for add in entry.adds)
    )


def _append_stats(entry: CommitEntry, column: str) -> AppendStats:
    rows, lows, highs = 0, [], []
    for add in entry.adds:
        stats = json.loads(add.get("stats") or "{}")
        rows += int(stats.get("numRecords", 0))
        lows.append(_number(stats.get("minValues", {}).get(column)))
        highs.append(_number(stats.get("maxValues", {}).get(column)))
    known = None not in lows and None not in highs
    return AppendStats(
        version=entry.version,
        timestamp_ms=entry.timestamp,
        rows=rows,
        bytes=entry.bytes_added,
        files=len(entry.adds),
        low=min(v for v in lows if v is not None) if known else None,
        high=max(v for v in highs if v is not None) if known else None,
    )


def _read_entries(uri: str, versions: Sequence[int], storage_options: Mapping[str, str] | None) -> list[CommitEntry]:
    def read(version: int) -> CommitEntry:
        return next(read_commits(uri, version, version, storage_options))

    with ThreadPoolExecutor(READ_THREADS) as pool:
        return list(pool.map(read, versions))


def changes_between(uri: str, after: int, upto: int, storage_options: Mapping[str, str] | None) -> tuple[int, int, int]:
    """Commits after..upto: (bytes the data commits appended, bytes recluster's rewrites wrote, its rewrites);
    commits no longer in the log count nothing."""
    entries = _read_entries(uri, range(after + 1, upto + 1), storage_options)
    ours = [e for e in entries if e.producer == PRODUCER and e.adds]
    return sum(e.bytes_added for e in entries if _is_append(e)), sum(e.bytes_added for e in ours), len(ours)


def read_appends(
    uri: str, column: str, storage_options: Mapping[str, str] | None, since_ms: int | None = None
) -> tuple[list[AppendStats], list[CommitEntry]]:
    """The data commits of the table (oldest first), as stats and as the log entries, at or after `since_ms`."""
    entries = [e for e in _read_entries(uri, log_versions(uri, storage_options), storage_options) if _is_append(e)]
    if since_ms is not None:
        entries = [e for e in entries if (e.timestamp or 0) >= since_ms]
    return [_append_stats(e, column) for e in entries], entries


def _key_numbers(column: pa.ChunkedArray) -> np.ndarray:
    if pa.types.is_timestamp(column.type):
        column = pc.cast(pc.cast(column, pa.timestamp("us", tz=column.type.tz)), pa.int64())
        return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64) / 1000.0
    if pa.types.is_date(column.type):
        days = pc.cast(pc.cast(column, pa.date32()), pa.int32())
        return np.asarray(days.to_numpy(zero_copy_only=False), dtype=np.float64) * 86_400_000.0
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)


def late_samples(
    uri: str,
    column: str,
    storage_options: Mapping[str, str] | None,
    stats: Sequence[AppendStats],
    entries: Sequence[CommitEntry],
) -> list[LateSample]:
    """Rows below the table's largest key before their commit, in up to `LATE_SAMPLES` appends spread over the
    newer half of the history (files no longer there, or without the column, are skipped)."""
    highs = [s.high for s in stats]
    if len(stats) < 2 or None in highs:
        return []
    before = np.maximum.accumulate(np.array(highs, dtype=np.float64))
    picks = sorted({int(i) for i in np.linspace(max(1, len(stats) // 2), len(stats) - 1, LATE_SAMPLES)})
    filesystem = table_filesystem(uri, storage_options)
    samples = []
    for index in picks:
        for add in entries[index].adds:
            try:
                with filesystem.open_input_file(file_location(uri, add["path"])) as handle:
                    values = _key_numbers(pq.read_table(handle, columns=[column]).column(0))
            except (OSError, KeyError, pa.ArrowInvalid):
                continue
            samples.append(LateSample(len(values), int(np.count_nonzero(values < before[index - 1]))))
    return samples
