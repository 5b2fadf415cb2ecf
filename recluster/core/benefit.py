"""Benefit accounting per table (docs/benefit.md): the files and bytes queries skipped thanks to data skipping,
counted against the bytes the job rewrote to cluster the table, and the pause of tables no query reads. Pure: the
scans `recluster advise` extracts from event logs (core/advice/scans.py) and the table's size over time in, figures
out. No I/O.

A logged scan read `files_read` of the files the table had when it ran; the rest were skipped. Without event logs,
the modelled share is the read share `recluster advise` predicts for the table's key (`Scored.read_share`), or inside
the job, where no workload is known, the share a point predicate on one of the key's columns reads
(`modelled_read_share`). A figure says which it is (`BenefitSource`): the two are never summed.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from recluster.core.advice.ranking import DAY_MS
from recluster.core.advice.scans import Scan

GB = 1_000_000_000


class BenefitSource(StrEnum):
    """Where a table's benefit figures come from."""

    LOGGED = "logged"
    """The scans of the event logs, with their files and bytes read."""
    MODELLED = "modelled"
    """No logged scan of the table: one point query on its key, at the share the layout's min/max statistics prune."""


@dataclass(frozen=True, slots=True, order=True)
class TableSize:
    """The table's live files and bytes from `time_ms` (a commit's time, ms since the epoch) on."""

    time_ms: int
    files: int
    bytes: int


@dataclass(frozen=True, slots=True)
class Benefit:
    """What queries skipped on a table, against the bytes rewritten to cluster it."""

    queries: int
    """Scans seen, measured or not."""
    measured: int
    """Scans whose log gave files and bytes read (the figures below count only these)."""
    files_total: int
    files_read: int
    bytes_total: int
    bytes_read: int
    bytes_rewritten: int

    @property
    def files_skipped(self) -> int:
        return self.files_total - self.files_read

    @property
    def bytes_skipped(self) -> int:
        return self.bytes_total - self.bytes_read

    @property
    def skipped_per_gb_rewritten(self) -> float | None:
        """Bytes skipped per byte rewritten (GB per GB); None before anything was rewritten."""
        return self.bytes_skipped / self.bytes_rewritten if self.bytes_rewritten else None

    def __str__(self) -> str:
        ratio = self.skipped_per_gb_rewritten
        per_gb = "-" if ratio is None else f"{ratio:.2f}"
        return (
            f"queries={self.queries} files skipped={self.files_skipped}/{self.files_total} "
            f"GB skipped={self.bytes_skipped / GB:.3f} rewritten={self.bytes_rewritten / GB:.3f} per GB={per_gb}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "queries": self.queries,
            "measured": self.measured,
            "files_total": self.files_total,
            "files_skipped": self.files_skipped,
            "bytes_total": self.bytes_total,
            "bytes_skipped": self.bytes_skipped,
            "bytes_rewritten": self.bytes_rewritten,
            "skipped_per_gb_rewritten": self.skipped_per_gb_rewritten,
        }


def size_at(sizes: Sequence[TableSize], time_ms: int) -> TableSize | None:
    """The table's size when a scan ran: the last one from at or before it (sizes sorted by time); a scan before the
    first known size counts the first."""
    if not sizes:
        return None
    index = bisect.bisect_right(sizes, time_ms, key=lambda s: s.time_ms) - 1
    return sizes[max(index, 0)]


def logged_benefit(scans: Iterable[Scan], sizes: Sequence[TableSize], bytes_rewritten: int) -> Benefit:
    """The benefit of one table's logged scans (all of the same table), sizes sorted by time. A scan's read counts
    are capped at the table's size: a scan may read files a later commit removed."""
    ordered = sorted(sizes)
    queries = measured = files_total = files_read = bytes_total = bytes_read = 0
    for scan in scans:
        queries += 1
        size = size_at(ordered, scan.time_ms)
        if size is None or scan.files_read is None or scan.bytes_read is None:
            continue
        measured += 1
        files_total += size.files
        files_read += min(scan.files_read, size.files)
        bytes_total += size.bytes
        bytes_read += min(scan.bytes_read, size.bytes)
    return Benefit(queries, measured, files_total, files_read, bytes_total, bytes_read, bytes_rewritten)


def modelled_benefit(queries: int, size: TableSize, read_share: float, bytes_rewritten: int) -> Benefit:
    """The benefit `queries` scans would have on `size` reading `read_share` of it (advise's prediction for the
    table's key, `Scored.read_share`), when no event log measured them."""
    share = min(max(read_share, 0.0), 1.0)
    return Benefit(
        queries,
        0,
        queries * size.files,
        round(queries * size.files * share),
        queries * size.bytes,
        round(queries * size.bytes * share),
        bytes_rewritten,
    )


def modelled_read_share(column_scan: Mapping[str, float]) -> float | None:
    """The share of the files a point predicate on one of the key's columns reads, each column alike (the average of
    the per-column shares core/pruning.py computes from the files' min/max); None for a table without a key."""
    return sum(column_scan.values()) / len(column_scan) if column_scan else None


def modelled_query(size: TableSize, read_share: float, bytes_rewritten: int) -> Benefit:
    """What one query on the key would skip on `size` (`modelled_benefit` of one query), with no query seen:
    `queries` and `measured` are 0, the files and bytes are that one query's."""
    return replace(modelled_benefit(1, size, read_share, bytes_rewritten), queries=0)


def daily_benefit(
    scans: Iterable[Scan], sizes: Sequence[TableSize], rewrites: Iterable[tuple[int, int]]
) -> dict[int, Benefit]:
    """The benefit per UTC day (days since the epoch): that day's scans against that day's rewritten bytes
    (`rewrites` as (time ms, bytes)). The page draws it over time."""
    by_day: dict[int, list[Scan]] = {}
    for scan in scans:
        by_day.setdefault(scan.time_ms // DAY_MS, []).append(scan)
    rewritten: dict[int, int] = {}
    for time_ms, size in rewrites:
        rewritten[time_ms // DAY_MS] = rewritten.get(time_ms // DAY_MS, 0) + size
    return {
        day: logged_benefit(by_day.get(day, ()), sizes, rewritten.get(day, 0))
        for day in sorted(by_day.keys() | rewritten.keys())
    }


class PauseReason(StrEnum):
    """Why the job does not recluster a table it would otherwise."""

    NO_QUERIES = "no_queries"
    """No logged query read the table in `benefit.pause_after_days` days."""


def pause_reason(
    last_query_ms: int | None, watched_since_ms: int, now_ms: int, pause_after_days: float | None
) -> PauseReason | None:
    """NO_QUERIES when no query was seen in the last `pause_after_days` days (counted from when the logs were first
    read if no query was ever seen); None, so clustering resumes, as soon as a query shows up again."""
    if pause_after_days is None:
        return None
    since = watched_since_ms if last_query_ms is None else max(last_query_ms, watched_since_ms)
    return PauseReason.NO_QUERIES if now_ms - since > pause_after_days * DAY_MS else None
