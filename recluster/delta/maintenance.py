"""Maintenance (docs/operations.md#maintenance): vacuum, checkpoints, log cleanup, and orphan cleanup, which removes
the outputs of rewrites that never committed.

An orphan is deleted only when all three hold: its name is one recluster writes (`part-L..-k..-r..`), it is older
than a safety age (a rewrite still running has young outputs), and no version still in the log references it
(time travel to any retained version keeps working). Anything else is left alone, whatever it looks like.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from recluster.core.blocks import parse_data_file_name
from recluster.core.errors import TableError, first_line
from recluster.delta.log_listing import LogListing, list_log
from recluster.delta.maintenance_steps import MaintenanceStep, StepRefusal, step_refusals
from recluster.delta.snapshot import open_table
from recluster.delta.storage import (
    list_data_files,
    normalize_uri,
    read_log_actions,
    remove_stored_files,
)
from recluster.delta.storage_faults import describe_storage_error
from recluster.settings_optimizing import MaintenanceSettings

_INTERVAL_UNITS = {
    "nanosecond": 1e-9,
    "microsecond": 1e-6,
    "millisecond": 1e-3,
    "second": 1.0,
    "minute": 60.0,
    "hour": 3600.0,
    "day": 86400.0,
    "week": 7 * 86400.0,
}


DEFAULT_DELETED_FILE_RETENTION_HOURS = 168.0
"""Delta's default `delta.deletedFileRetentionDuration` (interval 1 week)."""


def parse_delta_interval(text: str) -> float:
    """Seconds of a Delta interval property such as `interval 7 days` (the `interval` word is optional)."""
    words = text.strip().lower().removeprefix("interval").split()
    if len(words) != 2 or words[1].rstrip("s") not in _INTERVAL_UNITS:
        raise TableError(f"malformed Delta interval {text!r} (expected e.g. 'interval 7 days')")
    try:
        return float(words[0]) * _INTERVAL_UNITS[words[1].rstrip("s")]
    except ValueError:
        raise TableError(f"malformed Delta interval {text!r} (expected e.g. 'interval 7 days')") from None


def deleted_file_retention_hours(table: DeltaTable) -> float:
    """The table's `delta.deletedFileRetentionDuration` in hours: time travel within it must keep working."""
    text = table.metadata().configuration.get("delta.deletedFileRetentionDuration")
    return parse_delta_interval(text) / 3600.0 if text else DEFAULT_DELETED_FILE_RETENTION_HOURS


_ABSOLUTE = re.compile(r"^(/|[A-Za-z][A-Za-z0-9+.-]*:)")
"""A path with a scheme (`file:/..`, `s3://..`) or a leading slash: outside the table root as far as vacuum goes."""


def vacuum_table(
    location: str,
    table: DeltaTable,
    retention_hours: float,
    storage_options: Mapping[str, str] | None,
    *,
    dry_run: bool,
) -> list[str]:
    """Delete the files removed longer than `retention_hours` ago that no live file is (delta-rs's plan, which
    also refuses a retention below the table's own). Returns the files (to be) deleted.

    delta-rs only plans here: its vacuum would commit VACUUM START/END, which it refuses on tables with writer
    features it does not write (identity columns, row tracking, liquid clustering, type widening, in-commit
    timestamps: docs/guarantees.md#maintenance); deleting the files needs no commit. Its lite plan is used, never
    the full one, which lists the deletion vector files of live files too. Only files under the table root: a
    shallow clone's removes name files of the table it was cloned from."""
    try:
        planned = table.vacuum(
            retention_hours=math.ceil(retention_hours), dry_run=True, enforce_retention_duration=True, full=False
        )
    except DeltaError as error:
        raise TableError(f"vacuum failed: {first_line(error)}") from None
    expired = sorted({path for path in planned if not _ABSOLUTE.match(path)})
    if not dry_run:
        remove_stored_files(location, expired, storage_options)
    return expired


def checkpoint_table(table: DeltaTable) -> None:
    """Write a checkpoint at the table's version (readers then skip the JSON commits before it)."""
    try:
        table.create_checkpoint()
    except DeltaError as error:
        raise TableError(f"checkpoint failed: {first_line(error)}") from None


def cleanup_log(table: DeltaTable) -> None:
    """Delete log files older than `delta.logRetentionDuration` that a checkpoint makes unnecessary."""
    try:
        table.cleanup_metadata()
    except DeltaError as error:
        raise TableError(f"log cleanup failed: {first_line(error)}") from None


log = logging.getLogger(__name__)


DEFAULT_SAFETY_AGE_SECONDS = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class OrphanFile:
    path: str
    """Relative to the table root."""
    bytes: int
    age_seconds: float


@dataclass(frozen=True, slots=True)
class CleanResult:
    table: str
    oldest_version: int
    latest_version: int
    referenced: int
    orphans: tuple[OrphanFile, ...]
    deleted: bool

    def to_dict(self) -> dict[str, object]:
        return {
            "table": self.table,
            "oldest_version": self.oldest_version,
            "latest_version": self.latest_version,
            "referenced_files": self.referenced,
            "orphans": [{"path": o.path, "bytes": o.bytes, "age_seconds": o.age_seconds} for o in self.orphans],
            "orphan_bytes": sum(o.bytes for o in self.orphans),
            "deleted": self.deleted,
        }


def referenced_files(
    table_uri: str,
    storage_options: Mapping[str, str] | None = None,
    *,
    latest: DeltaTable | None = None,
    listing: LogListing | None = None,
) -> tuple[set[str], int, int]:
    """Every data file some version still in the log references: the files of the oldest version that
    can be loaded, plus every file any later commit added. Returns (paths, oldest, latest). `latest` and
    `listing`: the table opened and its log listed a moment ago (maintenance reads them once for all its steps);
    the oldest version is opened on its own only when it is not the version `latest` is at."""
    location = normalize_uri(table_uri)
    table = open_table(location, storage_options) if latest is None else latest  # not a table: one clear line
    versions = (listing or list_log(location, storage_options)).commits
    if not versions:
        raise TableError(f"{table_uri} has no commit files in _delta_log")
    oldest, newest = versions[0], versions[-1]
    try:
        if table.version() != oldest:
            table = open_table(location, storage_options) if table is latest else table  # the caller's stays latest
            table.load_as_version(oldest)
    except Exception as error:  # the oldest JSON may predate a checkpoint that is gone: refuse, never guess
        problem = describe_storage_error(error)  # one line: delta-rs's error is a chain of them
        raise TableError(f"cannot load the oldest retained version {oldest} of {table_uri}: {problem}") from None
    paths = {unquote(p) for p in pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()}
    for version in versions[1:]:
        actions = read_log_actions(location, version, storage_options)
        paths.update(unquote(a["add"]["path"]) for a in actions if "add" in a)
    return paths, oldest, newest


def find_orphans(
    table_uri: str,
    *,
    safety_age_seconds: float = DEFAULT_SAFETY_AGE_SECONDS,
    storage_options: Mapping[str, str] | None = None,
    latest: DeltaTable | None = None,
    listing: LogListing | None = None,
) -> CleanResult:
    """The files `clean_orphans` would delete (nothing is deleted here); `latest`, `listing`: as for
    `referenced_files`."""
    location = normalize_uri(table_uri)
    referenced, oldest, newest = referenced_files(location, storage_options, latest=latest, listing=listing)
    now = time.time()
    orphans = []
    for stored in list_data_files(location, storage_options):
        if parse_data_file_name(stored.path) is None or stored.path in referenced:
            continue
        age = now - (stored.modified if stored.modified is not None else now)
        if age >= safety_age_seconds:
            orphans.append(OrphanFile(stored.path, stored.bytes, age))
    return CleanResult(location, oldest, newest, len(referenced), tuple(sorted(orphans, key=lambda o: o.path)), False)


def clean_orphans(
    table_uri: str,
    *,
    safety_age_seconds: float = DEFAULT_SAFETY_AGE_SECONDS,
    storage_options: Mapping[str, str] | None = None,
    dry_run: bool = False,
    latest: DeltaTable | None = None,
    listing: LogListing | None = None,
) -> CleanResult:
    """Delete the orphans `find_orphans` reports (after checking each again just before deleting it)."""
    found = find_orphans(
        table_uri,
        safety_age_seconds=safety_age_seconds,
        storage_options=storage_options,
        latest=latest,
        listing=listing,
    )
    if dry_run or not found.orphans:
        return found
    # A rewrite may have committed one of them since the listing: re-read the references first (a new listing).
    referenced, _, _ = referenced_files(found.table, storage_options)
    deleted = []
    for orphan in found.orphans:
        if orphan.path in referenced:
            continue
        remove_stored_files(found.table, [orphan.path], storage_options)
        log.info("clean table=%s deleted=%s bytes=%d reason=orphan", found.table, orphan.path, orphan.bytes)
        deleted.append(orphan)
    return CleanResult(found.table, found.oldest_version, found.latest_version, found.referenced, tuple(deleted), True)


@dataclass(frozen=True, slots=True)
class MaintenanceResult:
    """What one maintenance pass did (or would do, with dry_run)."""

    table: str
    version: int
    retention_hours: float
    vacuumed: tuple[str, ...]
    checkpoint_version: int | None
    """The checkpoint written by this pass; None when the newest one was recent enough, refused (or dry run)."""
    log_cleaned: bool
    orphans: CleanResult
    dry_run: bool
    refused: tuple[StepRefusal, ...] = ()
    """Steps not run because of the table's features (recluster/delta/maintenance_steps.py)."""

    def to_dict(self) -> dict[str, object]:
        return {
            "table": self.table,
            "version": self.version,
            "retention_hours": self.retention_hours,
            "vacuumed_files": list(self.vacuumed),
            "checkpoint_version": self.checkpoint_version,
            "log_cleaned": self.log_cleaned,
            "orphans": self.orphans.to_dict(),
            "dry_run": self.dry_run,
            "refused": [refusal.to_dict() for refusal in self.refused],
        }


def effective_retention_hours(table: DeltaTable, configured_hours: float) -> float:
    """Vacuum retention: the configured one, never below the table's `delta.deletedFileRetentionDuration`."""
    return max(configured_hours, deleted_file_retention_hours(table))


def table_features(table: DeltaTable) -> set[str]:
    protocol = table.protocol()
    return set(protocol.reader_features or []) | set(protocol.writer_features or [])


def maintain_table(
    table_uri: str,
    settings: MaintenanceSettings,
    *,
    storage_options: Mapping[str, str] | None = None,
    dry_run: bool = False,
) -> MaintenanceResult:
    """Orphan cleanup, then vacuum (expired files of old versions), a checkpoint when the newest is
    `checkpoint_every_versions` behind, and log cleanup (delta.logRetentionDuration) after it; a step the
    table's features rule out is refused (logged, in the result) and the others still run.

    Orphans go first: they are found against every version still in the log, before log cleanup shortens it.
    Vacuum goes before the checkpoint: delta-rs plans it from the removes the log still holds, and a checkpoint
    drops the expired ones (their files would then stay for good).
    """
    location = normalize_uri(table_uri)
    table = open_table(location, storage_options)
    listing = list_log(location, storage_options)
    orphans = clean_orphans(
        location,
        safety_age_seconds=settings.orphan_safety_age_seconds,
        storage_options=storage_options,
        dry_run=dry_run,
        latest=table,
        listing=listing,
    )
    refused = step_refusals(table_features(table))
    for refusal in refused:
        log.info("recluster maintain table=%s %s", location, refusal)
    skipped = {refusal.step for refusal in refused}
    retention = effective_retention_hours(table, settings.retention_hours)
    vacuumed = []
    if MaintenanceStep.VACUUM not in skipped:
        vacuumed = vacuum_table(location, table, retention, storage_options, dry_run=dry_run)
    checkpoint = None
    if not dry_run:
        newest = listing.newest_checkpoint(table.version())
        behind = table.version() - (newest if newest is not None else -1)
        if MaintenanceStep.CHECKPOINT not in skipped and behind >= settings.checkpoint_every_versions:
            checkpoint_table(table)
            checkpoint = newest = table.version()
        if MaintenanceStep.LOG_CLEANUP not in skipped and newest is not None and listing.any_before(newest):
            cleanup_log(table)  # a cleanup deletes only log files a checkpoint covers: none, nothing to run
    for path in vacuumed:
        log.info("maintain table=%s vacuumed=%s dry_run=%s", location, path, dry_run)
    cleaned = not dry_run and MaintenanceStep.LOG_CLEANUP not in skipped
    return MaintenanceResult(
        location, table.version(), retention, tuple(vacuumed), checkpoint, cleaned, orphans, dry_run, refused
    )
