"""The job's discovery (docs/discovery.md): every `discovery.interval_seconds`, its catalogs and storage roots are
looked at again; tables found are taken up, tables gone let go, and the Delta-log source is told which tables to
poll through a small JSON file it re-reads before each trigger. Runs on its own thread, outside micro-batches."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

from recluster.core.discovery import DiscoveryChanges, discovery_changes
from recluster.engine.discovery import FoundTable, RootScanner, SourceScan, catalog_scan, failed_scan
from recluster.settings import Settings, table_storage_options

log = logging.getLogger("recluster.discovery")


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
        self.scanners = [RootScanner(root, settings) for root in settings.discovery.roots]
        self.take_up, self.let_go = take_up, let_go
        self.tables_file = tables_file
        self.listed = listed
        self.versions: dict[str, int] = {}
        self.options: dict[str, Mapping[str, str]] = {}
        self.found_by: dict[str, str] = {}
        """Found tables the job watches, each with the source that found it."""
        self.errors: dict[str, str] = {}
        """Sources whose last pass failed, with their one-line error."""

    def scans(self) -> list[SourceScan]:
        scans = []
        for scanner in self.scanners:
            try:
                scans.append(scanner.scan())
            except Exception as error:  # an unreadable root never stops the other sources
                scans.append(failed_scan(scanner.uri, error))
        for source in self.settings.discovery.catalogs:
            try:
                scans.append(catalog_scan(self.spark, source, self.settings))
            except Exception as error:
                scans.append(failed_scan(source.name, error))
        return scans

    def run_pass(self) -> DiscoveryChanges:
        scans = self.scans()
        self.errors = {scan.source: scan.error for scan in scans if scan.error is not None}
        found: dict[str, FoundTable] = {}
        for scan in scans:
            for table in scan.tables:
                found.setdefault(table.uri, table)
        failed = {scan.source for scan in scans if not scan.complete}
        changes = discovery_changes(self.found_by, {u: t.source for u, t in found.items()}, failed, self.listed)
        for uri in changes.dropped:
            self.let_go(uri)
            del self.found_by[uri]
            self.versions.pop(uri, None)
            self.options.pop(uri, None)
        for uri in changes.added:
            table = found[uri]
            self.found_by[uri] = table.source
            self.versions[uri] = self.take_up(table)
            self.options[uri] = table_storage_options(self.settings, table.settings)
        if self.tables_file is not None:
            write_tables_file(self.tables_file, self.versions, self.options)
        if changes.added or changes.dropped:
            log.info("recluster %s found=%d", changes, len(self.found_by))
        return changes
