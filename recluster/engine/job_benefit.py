"""The job's benefit accounting (docs/benefit.md): on its tick, at most every `benefit.read_interval_seconds`, the job
reads the event log files that are new or changed since its last read (the scans `recluster advise` extracts), and
per watched table counts the files and bytes those scans skipped against the bytes its history says it rewrote, per
day, and whether the table is paused because no query read it (core/benefit.py does the counting). A table no logged
scan read (or every table, without `benefit.event_logs`) gets the modelled figure of one query on its key instead,
labelled as such (docs/benefit.md#the-modelled-figure).

It runs outside the micro-batch lock: a batch only reads the `TableBenefit` last assigned to a table.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake.exceptions import DeltaError

from recluster.core.advice.scans import Scan
from recluster.core.benefit import (
    Benefit,
    BenefitSource,
    PauseReason,
    TableSize,
    daily_benefit,
    logged_benefit,
    modelled_query,
    modelled_read_share,
    pause_reason,
)
from recluster.core.errors import TableError, first_line
from recluster.core.pruning import column_scan_fractions
from recluster.core.scheduling import OPTIMIZING_TYPES, ProcessRecord, ProcessStatus, ProcessType
from recluster.delta.history import HistoryStore, read_rows, records_from_arrow
from recluster.delta.snapshot import TableSnapshot
from recluster.engine.advise import file_scans, table_uri
from recluster.engine.api import storage_options_for
from recluster.engine.event_logs import event_log_files
from recluster.settings import Settings
from recluster.settings_optimizing import BenefitSettings

log = logging.getLogger("recluster.job")

REWRITING_TYPES = frozenset({ProcessType.RECLUSTER, *OPTIMIZING_TYPES})
"""Processes whose written bytes count as rewritten to cluster the table (maintenance rewrites nothing)."""


@dataclass(frozen=True, slots=True)
class TableBenefit:
    """One table's benefit as the job last counted it: the whole, per UTC day, and its pause."""

    benefit: Benefit
    daily: tuple[tuple[int, Benefit], ...]
    """(days since the epoch, that day's benefit), oldest first; none for a modelled figure."""
    last_query_ms: int | None
    paused: PauseReason | None
    source: BenefitSource = BenefitSource.LOGGED

    def __str__(self) -> str:
        return f"{self.benefit} source={self.source} paused={self.paused or '-'}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            **self.benefit.to_dict(),
            "last_query_ms": self.last_query_ms,
            "paused": self.paused,
            "daily": [{"day": day, **benefit.to_dict()} for day, benefit in self.daily],
        }


def rewrites_of(records: Iterable[ProcessRecord]) -> dict[str, tuple[str, int, int]]:
    """The rewrites among history rows, by process id: (table, end time ms, bytes written) of each successful
    recluster and optimizing process."""
    return {
        r.process_id: (r.table, round(r.end * 1000), r.bytes_out)
        for r in records
        if r.end is not None and r.status is ProcessStatus.SUCCESS and r.type in REWRITING_TYPES
    }


def table_benefit(
    scans: Sequence[Scan],
    sizes: Sequence[TableSize],
    rewrites: Sequence[tuple[int, int]],
    *,
    now_ms: int,
    watched_since_ms: int,
    pause_after_days: float | None,
    read_share: float | None = None,
) -> TableBenefit:
    """The figures of one table from its logged scans, its sizes over time and its rewrites; without a logged scan
    and with the modelled `read_share` of its key, the modelled figure of one query at its latest size."""
    last_query = max((s.time_ms for s in scans), default=None)
    paused = pause_reason(last_query, watched_since_ms, now_ms, pause_after_days)
    rewritten = sum(size for _, size in rewrites)
    if not scans and read_share is not None and sizes:
        modelled = modelled_query(max(sizes), read_share, rewritten)
        return TableBenefit(modelled, (), None, paused, BenefitSource.MODELLED)
    return TableBenefit(
        logged_benefit(scans, sizes, rewritten),
        tuple(daily_benefit(scans, sizes, rewrites).items()),
        last_query,
        paused,
    )


class EventLogReader:
    """The scans of the configured event logs, kept per file: a file is read again only when its size or
    modification time changed (a running application's log grows); a file gone is forgotten."""

    def __init__(self, locations: Sequence[str], options: Mapping[str, str]) -> None:
        self.locations = tuple(locations)
        self.options = dict(options)
        self._seen: dict[str, tuple[int | None, int | None]] = {}
        self._scans: dict[str, list[Scan]] = {}
        self.files_read = 0
        """Files read so far (re-reads of changed files included): what tests check incrementality on."""
        self.listed_all = False
        """Whether the last read listed every location: a pause counts only then (an unreadable location hides
        queries: its tables are not paused for it)."""

    def oldest_ms(self) -> int | None:
        """The oldest time the files read so far vouch for: the earliest of their modification times and scans."""
        times = [mtime // 1_000_000 for _, mtime in self._seen.values() if mtime is not None]
        times += [scan.time_ms for scans in self._scans.values() for scan in scans]
        return min(times, default=None)

    def read(self) -> list[str]:
        """Read what is new; returns the problem lines (a malformed or cut-short file, an unreadable location)."""
        problems: list[str] = []
        present: set[str] = set()
        self.listed_all = True
        for location in self.locations:
            try:
                filesystem, paths = event_log_files(location, self.options)
                infos = filesystem.get_file_info([path for path, _ in paths])
            except (TableError, OSError, pa.ArrowException) as error:
                problems.append(str(error))
                self.listed_all = False
                present.update(self._seen)  # a location not listed now forgets nothing: its files may be back
                continue
            for (path, shown), info in zip(paths, infos, strict=True):
                present.add(shown)
                stamp = (info.size, info.mtime_ns)
                if self._seen.get(shown) == stamp:
                    continue
                problems += self._read_file(filesystem, path, shown)
                self._seen[shown] = stamp
        for gone in set(self._seen) - present:
            del self._seen[gone], self._scans[gone]
        return problems

    def _read_file(self, filesystem: pafs.FileSystem, path: str, shown: str) -> list[str]:
        self.files_read += 1
        self._scans[shown], problem = file_scans(filesystem, path, shown)
        return [str(problem)] if problem else []

    def scans_by_table(self) -> dict[str, list[Scan]]:
        """Every scan read so far, by the table it read (as recluster addresses it)."""
        found: dict[str, list[Scan]] = {}
        for scans in self._scans.values():
            for scan in scans:
                found.setdefault(table_uri(scan.location), []).append(scan)
        return found


class JobBenefit:
    """The job's side: when the read interval has passed, read the logs and count every watched table's figures."""

    @classmethod
    def of(cls, settings: Settings, *, pause_from_logs: bool = False) -> JobBenefit:
        """With the storage options of the first log location (as `recluster advise` reads them)."""
        logs = settings.benefit.event_logs
        return cls(settings.benefit, storage_options_for(settings, logs[0]) if logs else {}, pause_from_logs)

    def __init__(self, settings: BenefitSettings, options: Mapping[str, str], pause_from_logs: bool = False) -> None:
        self.settings = settings
        self.pause_from_logs = pause_from_logs
        """Count a never-queried table's pause from the oldest log file read, not from the first read (`recluster
        status`, which has no memory of earlier reads)."""
        self.reader = EventLogReader(settings.event_logs, options)
        self.sizes: dict[str, list[TableSize]] = {}
        """Each watched table's live files and bytes, a new entry when they changed since the last read."""
        self.watched_since_ms: int | None = None
        self.last_read_ms: int | None = None
        self.rewrites: dict[str, tuple[str, int, int]] | None = None
        """Every rewrite in the history by process id: the whole history table at the first count, then the rows
        the store keeps in memory (it prunes them after `quota_window_seconds`, longer than a read interval)."""
        self.lock = threading.Lock()

    def due(self, now_ms: int) -> bool:
        """Whether the read interval has passed (without logs the modelled figures are counted at the same pace)."""
        interval_ms = self.settings.read_interval_seconds * 1000
        return self.last_read_ms is None or now_ms - self.last_read_ms >= interval_ms

    def _read_rewrites(self, history: HistoryStore) -> dict[str, list[tuple[int, int]]]:
        """Each table's rewrites (end time ms, bytes written) in the history so far."""
        if self.rewrites is None:
            try:
                rows = read_rows(history.location, history.storage_options)
                self.rewrites = rewrites_of(records_from_arrow(rows) if rows is not None else [])
            except (TableError, OSError, DeltaError) as error:  # counted from memory, the table read next time
                log.warning("recluster benefit history=%s error=%s", history.location, first_line(error))
        known = {**(self.rewrites or {}), **rewrites_of(history.records())}
        self.rewrites = None if self.rewrites is None else known
        by_table: dict[str, list[tuple[int, int]]] = {}
        for table, end_ms, written in known.values():
            by_table.setdefault(table, []).append((end_ms, written))
        return by_table

    def count(
        self,
        tables: Mapping[str, TableSize],
        history: HistoryStore,
        now_ms: int,
        read_shares: Mapping[str, float | None] | None = None,
    ) -> dict[str, TableBenefit]:
        """Read the new event log files and count each of `tables` (by URI, at its current size): its figures,
        with the scans of every file read so far, or the modelled figure from its key's read share (`read_shares`,
        `modelled_read_share`) when no scan of it was read. A problem file is one log line; the others count."""
        shares = read_shares or {}
        with self.lock:
            self.last_read_ms = now_ms
            for problem in self.reader.read():
                log.warning("recluster benefit reason=event_log_problem %s", problem)
            if self.watched_since_ms is None:
                oldest = self.reader.oldest_ms() if self.pause_from_logs else None
                self.watched_since_ms = now_ms if oldest is None else min(oldest, now_ms)
            scans = self.reader.scans_by_table()
            rewrites = self._read_rewrites(history)
            found = {}
            for uri, size in tables.items():
                if not self.settings.event_logs and shares.get(uri) is None:
                    continue  # nothing logged and nothing to model (a table without a key)
                sizes = self.sizes.setdefault(uri, [])
                if not sizes or (sizes[-1].files, sizes[-1].bytes) != (size.files, size.bytes):
                    sizes.append(size)
                found[uri] = table_benefit(
                    scans.get(uri, []),
                    sizes,
                    rewrites.get(uri, []),
                    now_ms=now_ms,
                    watched_since_ms=self.watched_since_ms,
                    pause_after_days=self.settings.pause_after_days if self.reader.listed_all else None,
                    read_share=shares.get(uri),
                )
            for uri in set(self.sizes) - set(tables):
                del self.sizes[uri]  # let go
            return found


def tables_benefit(
    settings: Settings, snapshots: Sequence[TableSnapshot], history: HistoryStore
) -> dict[str, TableBenefit]:
    """`recluster status`: the figures the job shows, from one read of every log and the whole history (modelled for
    a table no logged scan read). Without the job's memory, a never-queried table's pause counts from the oldest log
    file read."""
    now_ms = round(time.time() * 1000)
    sizes = {s.uri: TableSize(now_ms, len(s.blocks), sum(b.bytes for b in s.blocks)) for s in snapshots}
    shares = {s.uri: modelled_read_share(column_scan_fractions(s.blocks, s.key)) for s in snapshots}
    return JobBenefit.of(settings, pause_from_logs=True).count(sizes, history, now_ms, shares)
