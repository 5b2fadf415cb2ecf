"""The tables a running job tracks: loaded from their snapshots, kept current from the commits it reads, reloaded
when a commit changes what the state was built on (docs/streaming.md).

Each table's per-level state is initialised from the snapshot just before the first commit the job sees, so a restart
rebuilds it from the log; commits are then applied one version at a time. A gap, a metaData change or a merge on
another curve reloads the table (its totals since the job started are kept).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from typing import Any

from deltalake import DeltaTable

from recluster.core.discovery import EffectiveProperty, PropertyLayer, effective_properties
from recluster.core.errors import TableError
from recluster.core.metrics import ClusteringState
from recluster.delta.file_blocks import blocks_from_log_adds
from recluster.delta.log import PRODUCER, CommitEntry, read_commits
from recluster.delta.log_state import SnapshotLog
from recluster.delta.ranges import on_other_curve
from recluster.delta.snapshot import load_snapshot
from recluster.delta.storage import normalize_uri, require_safe_commits
from recluster.engine.api import open_checked_table
from recluster.engine.job_state import TrackedTable
from recluster.settings import Settings, TableSettings, table_storage_options

log = logging.getLogger("recluster.job")


@dataclass(frozen=True, slots=True)
class CommitsFromEvents:
    """The commits Kafka events announce, read from the Delta log, and how many events were malformed."""

    commits: tuple[CommitEntry, ...]
    malformed: int
    failed: Mapping[str, Exception]
    """Tables whose commits could not be read, and why."""
    unserved: frozenset[str] = frozenset()
    """Tables events named that the job does not serve (another job's, or one it claimed and has still to take up)."""


EVENT_READ_THREADS = 8
"""Tables whose new commits a batch of events reads at once: each read is a GET a commit, waiting on the store (read
one after the other, they were half of a batch at 300 tables and 20 appends a second)."""


@cache
def event_reads() -> ThreadPoolExecutor:
    """The threads reading the commits events announce, started once a process."""
    return ThreadPoolExecutor(EVENT_READ_THREADS, "recluster-event-reads")


class JobTables:
    """The configured tables and the state of each one the job tracks. Not thread-safe: the handler's lock
    serializes its writers (micro-batches, ticks, the background load)."""

    def __init__(self, settings: Settings, tables: Sequence[TableSettings]) -> None:
        self.settings = settings
        self.configured = {normalize_uri(t.uri): t for t in tables}
        self.listed = frozenset(self.configured)
        """The tables named in the settings; the others were found by discovery (docs/discovery.md)."""
        self.layers: dict[str, tuple[PropertyLayer, ...]] = {}
        """What each found table inherits from its root, catalog and database."""
        self.tracked: dict[str, TrackedTable] = {}

    def add_found(self, table: TableSettings, layers: tuple[PropertyLayer, ...]) -> None:
        uri = normalize_uri(table.uri)
        self.configured[uri] = table
        self.layers[uri] = layers

    def remove_found(self, uri: str) -> None:
        self.configured.pop(uri, None)
        self.layers.pop(uri, None)
        self.tracked.pop(uri, None)

    def serves(self, uri: str) -> bool:
        """Whether the job keeps `uri` clustered: a table named in the settings or found (and, with leases, owned)
        by discovery; with neither configured, every table commit events name (docs/kafka.md)."""
        return uri in self.configured or not (self.configured or self.settings.discovery.enabled)

    def options(self, uri: str) -> dict[str, str]:
        """Storage options of a table: the job's, overridden by the table's own."""
        return dict(table_storage_options(self.settings, self.configured.get(uri)))

    def track(self, uri: str, version: int | None, opened: DeltaTable | None = None) -> TrackedTable:
        """State at `version` (None: latest; -1: before the first commit) from the snapshot; the key comes from
        config or the table. `opened`: the table opened a moment ago (discovery), read from there on."""
        settings = self.settings
        if uri not in self.listed and uri in self.configured:  # found: its inherited key and storage options
            settings = settings.model_copy(update={"tables": [*settings.tables, self.configured[uri]]})
        table, key, options = open_checked_table(uri, settings=settings, opened=opened)
        require_safe_commits(uri, options, self.settings.commit.allow_unsafe_single_writer)
        if version is not None and version >= 0:
            table.load_as_version(version)
        snapshot = load_snapshot(table, key, uri=uri, storage_options=options)
        before_first = version is not None and version < 0
        effective = self.effective_properties(uri, snapshot.properties)
        return TrackedTable(
            uri,
            snapshot.key,  # with a curve key's range bounds as of the snapshot
            snapshot.partition_columns,
            {key: setting.value for key, setting in effective.items()},
            ClusteringState(() if before_first else snapshot.blocks),
            -1 if before_first else snapshot.version,
            snapshot.data_schema,
            dict(options),
            log=None if before_first else snapshot.log,
            settings=tuple(setting for key, setting in effective.items() if key.startswith("recluster.")),
        )

    def effective_properties(self, uri: str, own: Mapping[str, str]) -> dict[str, EffectiveProperty]:
        """A table's properties over what it inherits (docs/discovery.md#inherited-settings)."""
        return effective_properties(self.layers.get(uri, ()), own)

    def initial_state(self, uri: str, first_version: int) -> TrackedTable:
        """State just before the first commit this job sees; the latest if that version was cleaned up."""
        try:
            return self.track(uri, first_version - 1)
        except TableError:
            raise
        except Exception as error:  # delta-rs raises several kinds when an old version is gone
            log.warning(
                "recluster table=%s reason=version_gone version=%d error=%s: starting from the latest snapshot",
                uri,
                first_version - 1,
                error,
            )
            return self.track(uri, None)

    def apply(self, uri: str, commits: Sequence[CommitEntry]) -> tuple[TrackedTable, bool]:
        """Apply a table's new commits (in version order) to its state, taking the table up first when it is not
        tracked; returns its state and whether one of the commits was not ours. Raises what loading raises."""
        tracked = self.tracked.get(uri)
        if tracked is None:
            tracked = self.tracked[uri] = self.initial_state(uri, commits[0].version)
        fresh = [c for c in commits if c.version > tracked.version]  # older: replayed after a restart
        foreign = [c for c in fresh if c.producer != PRODUCER]
        tracked.bytes_appended += sum(c.bytes_added for c in foreign)
        for commit in foreign:
            if commit.adds:  # a data commit: its rows wait for the depth target (core/target_lag.py)
                tracked.lag.committed(commit.version, commit.timestamp / 1000 if commit.timestamp else time.time())
        applied = []
        for commit in fresh:
            changed = commit.metadata_changed or on_other_curve(commit, tracked.key)  # new bounds: no metaData
            if commit.is_gap or changed or commit.version != tracked.version + 1:
                if commit.is_gap:
                    log.warning("recluster table=%s reason=log_gap version=%s: reloading", uri, commit.version)
                kept = tracked.totals, tracked.bytes_appended, tracked.lag, tracked.benefit
                tracked = self.tracked[uri] = self.track(uri, None)
                tracked.totals, tracked.bytes_appended, tracked.lag, tracked.benefit = kept
                break
            added = blocks_from_log_adds(commit.adds, tracked.key, tracked.partition_columns, uri, self.options(uri))
            tracked.state.apply(added, commit.removes)
            tracked.version = commit.version
            applied.append(commit)
        else:  # not reloaded: the log moves on with the state
            if tracked.log is None:  # taken up before its first commit: nothing to advance
                tracked.log = SnapshotLog(uri, tracked.storage_options, tracked.version)
            else:
                tracked.log = tracked.log.advanced(applied)
        return tracked, bool(foreign)

    def commits_for_events(self, events: list[dict[str, Any]]) -> CommitsFromEvents:
        """Kafka events only name (table, version): read the real commits from the Delta log, from the
        state's version up to the newest version announced. Duplicate, late or out-of-order events are
        harmless; malformed ones are counted, logged and skipped."""
        malformed = [e for e in events if e["error"]]
        for event in malformed:
            log.warning(
                "recluster reason=malformed_event partition=%s offset=%s error=%s",
                event["kafka_partition"],
                event["kafka_offset"],
                event["error"],
            )
        newest: dict[str, tuple[int, int]] = {}
        unserved: set[str] = set()
        for event in events:
            if event["error"]:
                continue
            uri = normalize_uri(event["table"])
            if not self.serves(uri):
                unserved.add(uri)  # another job's table, or one no setting names: its commits are not read
                continue
            low, high = newest.get(uri, (event["version"], event["version"]))
            newest[uri] = (min(low, event["version"]), max(high, event["version"]))
        ranges: list[tuple[str, int, int]] = []
        for uri, (low, high) in newest.items():
            tracked = self.tracked.get(uri)
            first = tracked.version + 1 if tracked else low
            if high >= first:
                ranges.append((uri, first, high))

        def read(uri: str, first: int, last: int) -> tuple[CommitEntry, ...] | Exception:
            try:
                return tuple(read_commits(uri, first, last, self.options(uri)))
            except Exception as error:  # this table fails (and is reloaded later); the others go on
                return error

        commits: list[CommitEntry] = []
        failed: dict[str, Exception] = {}
        for (uri, _, _), outcome in zip(ranges, event_reads().map(read, *zip(*ranges, strict=True)), strict=True):
            if isinstance(outcome, Exception):
                failed[uri] = outcome
            else:
                commits.extend(outcome)
        return CommitsFromEvents(tuple(commits), len(malformed), failed, frozenset(unserved))
