"""The job's discovery (docs/discovery.md): every `discovery.interval_seconds`, its catalogs and storage roots are
looked at again; tables found are taken up, tables gone let go, and the Delta-log source is told which tables to
poll through a small JSON file it re-reads before each trigger. Runs on its own thread, outside micro-batches."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from recluster.core.discovery import DiscoveryChanges, discovery_changes
from recluster.engine.claimed_order import ClaimedOrder
from recluster.engine.discovery import (
    FoundTable,
    OwnProperties,
    RootScanner,
    SourceScan,
    catalog_scan,
    failed_scan,
)
from recluster.engine.leases import JobLeases
from recluster.settings import Settings, table_storage_options

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger("recluster.discovery")

SWEEP_PAUSE_SECONDS = 1.0
"""The pause between the passes of an unfinished sweep of a root (docs/discovery.md)."""
EXPIRY_MARGIN_SECONDS = 0.5
"""How long after another job's heartbeat expires the next lease pass runs: late enough to find it expired."""


def write_tables_file(path: str, versions: Mapping[str, int], options: Mapping[str, Mapping[str, str]]) -> None:
    """The found tables the Delta-log source polls besides its listed ones, each with the version it starts after when
    it is new to the source, replaced atomically (the source may read it at any moment)."""
    handle, temporary = tempfile.mkstemp(prefix=".tables-", dir=os.path.dirname(path))
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        json.dump({"tables": dict(versions), "storageOptions": {k: dict(v) for k, v in options.items()}}, out)
    os.replace(temporary, path)


class JobDiscovery:
    """One discovery pass at a time; `take_up` and `let_go` are the handler's (they take its lock)."""

    def __init__(
        self,
        settings: Settings,
        spark: Any,
        listed: frozenset[str],
        take_up: Callable[[FoundTable], int],
        let_go: Callable[[str], None],
        tables_file: str | None,
    ) -> None:
        """`listed`: the tables named in the settings (never let go); `take_up` returns the version a found table was
        loaded at (-1: not loaded), which the source starts after."""
        self.settings = settings
        self.spark = spark
        leases = settings.discovery.leases
        self.leases = (
            JobLeases(leases, dict(settings.storage_options), threads=settings.discovery.threads)
            if leases is not None
            else None
        )
        owns = self.holds if self.leases is not None else None  # jobs sharing the tables
        self.scanners = [RootScanner(root, settings, owns, hand_over=True) for root in settings.discovery.roots]
        self.catalog_properties = [OwnProperties(hand_over=True) for _ in settings.discovery.catalogs]
        self.take_up, self.let_go = take_up, let_go
        self.tables_file = tables_file
        self.listed = listed
        self.versions: dict[str, int] = {}
        self.options: dict[str, Mapping[str, str]] = {}
        self.unwritten = True
        """The tables file is behind `versions` (written again only then: at thousands of tables, each write is a
        JSON of them all)."""
        self.found_by: dict[str, str] = {}
        """Found tables the job watches, each with the source that found it."""
        self.errors: dict[str, str] = {}
        """Sources whose last pass failed, with their one-line error."""
        self.found: dict[str, FoundTable] = {}
        self.discovered: frozenset[str] = frozenset()
        """Every table the sources list, whatever its properties: with leases, the tables the jobs split."""
        self.failed: set[str] = set()
        # A dead job's tables are claimed up to a lease's expiry and a renewal after its death, then the claims take
        # a while: an event is remembered for twice that.
        memory = 2 * (leases.ttl_seconds + leases.renew_seconds) if leases is not None else 0.0
        self.claimed = ClaimedOrder(memory_seconds=memory)
        """The tables the lease pass claimed and has still to read, and the tables events named lately (`ask`)."""
        self.scanned_at = -float("inf")
        self.deferred = False
        """The last pass left tables of this job's to take up (its time was up): the next one follows at once."""
        self.sweeping = False
        """A root's sweep stopped at its listing budget: the next pass goes on with it, without waiting for the
        interval (a big root is swept in consecutive passes, one `period` apart)."""

    def ask(self, uris: Collection[str]) -> None:
        """Tables commit events named that this job does not serve: those it claimed and has still to read are read
        and taken up before the others (a takeover's), now or once claimed. Any thread."""
        if self.leases is not None and uris:
            self.claimed.ask(uris)

    def holds(self, uri: str) -> bool:
        """Whether this job holds the table's lease (its properties are this job's to read)."""
        return self.leases is not None and uri in self.leases.held

    def may_work(self) -> bool:
        """False while this job's leases may have lapsed (docs/discovery.md#several-jobs)."""
        return self.leases is None or self.leases.may_work()

    def fleet(self) -> dict[str, Any]:
        """This job and the live jobs sharing its tables, with the tables each owns (for /status)."""
        if self.leases is None:
            return {}
        jobs = [{"job": beat.job, "tables": beat.owned, "heartbeat": beat.written_at} for beat in self.leases.fleet]
        return {
            "job": self.leases.job,
            "jobs": jobs,
            "tables": sum(beat.owned for beat in self.leases.fleet),
            "found": len(self.discovered),
            "lease_errors": dict(self.leases.errors),
        }

    def scans(self) -> list[SourceScan]:
        scans = []
        for scanner in self.scanners:
            try:
                scans.append(scanner.scan())
            except Exception as error:  # an unreadable root never stops the other sources
                scans.append(failed_scan(scanner.uri, error))
        for source, properties in zip(self.settings.discovery.catalogs, self.catalog_properties, strict=True):
            try:
                scans.append(catalog_scan(self.spark, source, self.settings, properties))
            except Exception as error:
                scans.append(failed_scan(source.name, error))
        return scans

    def period(self) -> float:
        """How long until the next `run_pass`: the discovery interval, or the lease renewal when shorter; while a
        root's sweep is unfinished (each pass still lists at most `max_listings` folders) or tables wait to be taken
        up (a pass takes up for half a renewal at most), SWEEP_PAUSE_SECONDS; and with leases, no later than just
        after another job owning tables would be taken for dead (its tables are claimed then, not up to a renewal
        later: a takeover's time)."""
        interval = self.settings.discovery.interval_seconds
        if self.leases is None:
            period = interval
        else:
            period = min(interval, self.leases.settings.renew_seconds)
            if self.leases.next_expiry is not None:
                period = min(period, max(self.leases.next_expiry - time.time(), 0.0) + EXPIRY_MARGIN_SECONDS)
        return min(period, SWEEP_PAUSE_SECONDS) if self.sweeping or self.deferred else period

    def run_pass(self) -> DiscoveryChanges:
        """Scan the sources when the interval has passed, renew the leases, take up and let go accordingly. A new
        sweep waits while tables wait to be taken up (a takeover's, typically): a sweep reads every owned table's
        next commit file, which on a big root is minutes of requests between the claims and their take-ups."""
        due = time.monotonic() - self.scanned_at >= self.settings.discovery.interval_seconds
        if self.sweeping or (due and not self.deferred):
            self.scanned_at = time.monotonic()
            scans = self.scans()
            self.errors = {scan.source: scan.error for scan in scans if scan.error is not None}
            self.found = {}
            for scan in scans:
                for table in scan.tables:
                    self.found.setdefault(table.uri, table)
            self.failed = {scan.source for scan in scans if not scan.complete}
            self.discovered = frozenset(uri for scan in scans for uri in scan.listed)
            self.sweeping = any(not scan.complete and scan.error is None for scan in scans)
        found = self.found
        if self.leases is not None:  # this job's share only: a table released is let go first
            kept = {uri for uri, source in self.found_by.items() if source in self.failed}  # its source failed
            lease_pass = self.leases.run_pass(sorted(self.discovered | kept), self._forget)
            taken_up: list[tuple[FoundTable, int]] = []
            for scanner in self.scanners:  # claimed since the sweep listed them: their properties now, each taken up
                self.claimed.claim(scanner.unread_claims(lease_pass.taken))
                claimed = scanner.open_claimed(self.claimed, lambda t: taken_up.append((t, self.take_up(t))))
                self.found.update((table.uri, table) for table in claimed)
            for table, version in taken_up:
                self._watch(table, version)
            if taken_up:
                log.info("recluster discovery claimed_and_taken_up=%d", len(taken_up))
            found = {uri: table for uri, table in self.found.items() if uri in lease_pass.owned}
        started = time.monotonic()
        changes = discovery_changes(self.found_by, {u: t.source for u, t in found.items()}, self.failed, self.listed)
        for uri in changes.dropped:
            self._forget(uri)
        opened: dict[str, DeltaTable] = {}  # the tables opened for their properties: take-ups start there
        for properties in (*(scanner.properties for scanner in self.scanners), *self.catalog_properties):
            opened.update(properties.take_opened())
        added = [replace(found[uri], opened=opened.get(uri)) for uri in changes.added]
        self._take_up_all(added, started)
        if self.tables_file is not None and self.unwritten:
            write_tables_file(self.tables_file, self.versions, self.options)
            self.unwritten = False
        if changes.added or changes.dropped:
            log.info("recluster %s found=%d", changes, len(self.found_by))
        return changes

    def _take_up_all(self, tables: Sequence[FoundTable], started: float) -> None:
        """Take up the tables a sweep found, `discovery.threads` at a time. With leases, a pass stops starting
        take-ups after half the lease renewal (the lease passes must go on): the next passes take up the rest, each
        opened again. The tables a lease pass claims are not among them: each is taken up as soon as its properties
        are read (`run_pass`)."""

        def over_budget() -> bool:
            return self.leases is not None and time.monotonic() - started > self.leases.settings.renew_seconds / 2

        deferred = False
        with ThreadPoolExecutor(self.settings.discovery.threads, "recluster-take-up") as pool:
            futures = {pool.submit(lambda t: None if over_budget() else self.take_up(t), t): t for t in tables}
            for future in as_completed(futures):
                version, table = future.result(), futures[future]
                deferred = deferred or version is None
                if version is not None:
                    self._watch(table, version)
        self.deferred = deferred

    def _watch(self, table: FoundTable, version: int) -> None:
        """A table taken up at `version` (-1: it failed to load, and is retried like any table)."""
        self.found_by[table.uri] = table.source
        self.versions[table.uri] = version
        self.options[table.uri] = table_storage_options(self.settings, table.settings)
        self.unwritten = True

    def _forget(self, uri: str) -> None:
        if self.found_by.pop(uri, None) is not None:
            self.let_go(uri)
        self.versions.pop(uri, None)
        self.options.pop(uri, None)
        self.unwritten = True
