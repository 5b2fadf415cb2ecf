"""The job's scheduled maintenance (docs/operations.md#maintenance): vacuum, checkpoints and log cleanup of the
tracked tables when their interval has passed, a bounded pass per tick, and the history table's own upkeep."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping

from recluster.core.errors import first_line
from recluster.core.optimizing import OptimizingConfig
from recluster.core.scheduling import ProcessRecord, ProcessStatus, ProcessType
from recluster.delta.history import HistoryStore, compact_small_files, new_process_id
from recluster.delta.maintenance import maintain_table
from recluster.engine.job_state import TrackedTable
from recluster.engine.optimizer import history_of
from recluster.settings import Settings

log = logging.getLogger("recluster.job")

MAINTENANCE_PASS_SECONDS = 5.0
"""Maintenance one tick may start (tables over it wait for the next tick): a thousand tables due at once are
spread over ticks instead of one long pass."""

MAINTENANCE_JITTER = 0.1
"""A table's maintenance interval is stretched by up to this share, fixed per table (from its URI)."""


def uri_share(uri: str) -> float:
    """A stable share in [0, 1) per table: the same after a restart."""
    digest = hashlib.sha1(uri.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") / 2**32


def maintenance_jitter(uri: str) -> float:
    """A stable share in [0, MAINTENANCE_JITTER) per table."""
    return MAINTENANCE_JITTER * uri_share(uri)


class JobMaintenance:
    """Runs the maintenance that is due, never inside a micro-batch; a table whose maintenance fails is logged
    and recorded as failed in the history, and the pass goes on with the next."""

    def __init__(
        self,
        settings: Settings,
        history: HistoryStore,
        options: Callable[[str], dict[str, str]],
        config: Callable[[TrackedTable], OptimizingConfig | None],
        stopping: threading.Event,
    ) -> None:
        self.settings = settings
        self.history = history
        self.options = options
        self.config = config
        self.stopping = stopping
        self.history_maintained = 0.0
        self.first_due: dict[str, float] = {}
        """Per table with no maintenance in the history: when its first one is due (`time.time()`)."""

    def run_due(self, tracked: Mapping[str, TrackedTable]) -> None:
        """Maintenance of the tracked tables whose last one is older than the maintenance interval (stretched by
        up to MAINTENANCE_JITTER per table, so tables tracked together fall due apart), for at most
        MAINTENANCE_PASS_SECONDS per pass: the rest waits for the next tick. Safe next to a rewrite of the same
        table (vacuum, checkpoints and log cleanup are, as `clean` is)."""
        maintenance = self.settings.self_optimizing.maintenance
        if maintenance.interval_seconds <= 0:
            return
        now = time.time()
        for uri in set(self.first_due) - set(tracked):  # let go meanwhile
            del self.first_due[uri]
        deadline = time.monotonic() + MAINTENANCE_PASS_SECONDS
        for uri, table in list(tracked.items()):
            config = self.config(table)
            if self.stopping.is_set() or time.monotonic() > deadline:
                break
            if config is None or not config.enabled:
                continue
            last = history_of(self.history, uri, self.settings, now).last.get(ProcessType.MAINTENANCE)
            if last is None:  # never maintained: at its own point within `first_within_seconds` of its take-up
                spread = min(maintenance.first_within_seconds, maintenance.interval_seconds)
                if now < self.first_due.setdefault(uri, now + spread * uri_share(uri)):
                    continue
            elif now - last < maintenance.interval_seconds * (1 + maintenance_jitter(uri)):
                continue
            self.first_due.pop(uri, None)
            record = ProcessRecord(new_process_id(), uri, ProcessType.MAINTENANCE, config.group, now)
            self.history.append(record)
            try:
                result = maintain_table(uri, maintenance, storage_options=self.options(uri))
                refused = "; ".join(map(str, result.refused)) or None  # steps the table's features ruled out
                log.info(
                    "recluster maintain table=%s vacuumed=%d orphans=%d checkpoint=%s refused=%s",
                    uri,
                    len(result.vacuumed),
                    len(result.orphans.orphans),
                    result.checkpoint_version,
                    refused,
                )
                finished = record.finished(
                    time.time(), ProcessStatus.SUCCESS, files_in=len(result.vacuumed), detail=refused
                )
                self.history.append(finished)
            except Exception as error:  # one table's failure stays with that table
                log.error("recluster maintain table=%s error=%s", uri, first_line(error))
                self.history.append(record.finished(time.time(), ProcessStatus.FAILED, error=first_line(error)))
        if now - self.history_maintained >= maintenance.interval_seconds:
            self.history_maintained = now
            self._maintain_history()

    def _maintain_history(self) -> None:
        """The history table gets one small file per process: compact it and expire old versions too."""
        location, options = self.history.location, self.history.storage_options
        try:
            removed = compact_small_files(location, options)
            if removed:
                maintain_table(location, self.settings.self_optimizing.maintenance, storage_options=options)
        except Exception as error:
            log.error("recluster maintain history=%s error=%s", location, first_line(error))
