"""Streaming source of Delta commits: one row per commit of the watched tables (PySpark Data Source API).

Offsets are {"tables": {table_uri: last_version_read}} and live in the Spark checkpoint. New versions are
found by probing the next `_delta_log/<version>.json` names from the last seen version, never by listing,
so an object-store log is polled as cheaply as a local one: one HEAD per new commit, and an idle poll costs
one HEAD, plus one GET of `_last_checkpoint` at most every `GAP_PROBE_SECONDS` per table. The tables are probed
`PROBE_THREADS` at a time: a poll of thousands of tables waits on the store's latency, not on its CPU. A table
that does not exist yet is watched from version -1; a log cleaned up past the offset (only possible behind a
checkpoint newer than the offset) yields one LOG_GAP row so the job reloads that table's state from its latest
snapshot, with a warning. See docs/streaming.md#polling.

A transient storage error (a 5xx answer, a reset connection, a timeout: `storage_fault`) never stops the query,
the way the Kafka source waits out a broker outage: while probing for new versions, that table simply has no new
commits until its backoff (doubling from `RETRY_FIRST_SECONDS` to `RETRY_MAX_SECONDS`) has passed, the other tables
are probed as usual; reading a commit file (on an executor) or the table's version at the start is retried in place
with the same backoff for up to `RETRY_DEADLINE_SECONDS`. A permanent one (credentials, permissions) still fails the
query. See docs/streaming.md#storage-errors.

Register with `spark.dataSource.register(DeltaLogSource)`; read with
`spark.readStream.format("recluster-delta-log").option("tables", json.dumps([uri, ...])).load()`; storage
options with `.option("storageOptions", json.dumps({...}))` for every table and
`.option("tableStorageOptions", json.dumps({uri: {...}}))` merged over them per table. With discovery
(docs/discovery.md), `.option("tablesFile", path)` names a local JSON file the job rewrites as it finds and lets go
of tables, `{"tables": {uri: version_to_start_after}, "storageOptions": {uri: {...}}}`: it is read again before each
trigger, its tables polled besides the listed ones.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any, TypeVar

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from recluster.delta.log import SCHEMA, CommitEntry, read_commits
from recluster.delta.storage import commit_file_exists, last_checkpoint_version, normalize_uri
from recluster.delta.storage_faults import StorageFault, describe_storage_error, storage_fault
from recluster.engine.backoff import FailureBook

log = logging.getLogger(__name__)

SOURCE_NAME = "recluster-delta-log"
RETRY_FIRST_SECONDS = 1.0
RETRY_MAX_SECONDS = 30.0
RETRY_DEADLINE_SECONDS = 300.0
"""A read retried in place (a commit file on an executor, the version at the start) gives up after this long."""
GAP_PROBE_SECONDS = 60.0
"""How often an idle table's `_last_checkpoint` is read to find a log cleaned past the offset. A gap needs the next
commit deleted before it was read, so it is rare; reading that file at every poll doubled an idle table's requests."""
PROBE_THREADS = 16
PROBE_CHUNK = 4 * PROBE_THREADS
"""Tables probed before the budget is counted again: once a batch's commit budget is spent the rest wait for the
next batch unprobed, so catching up on many tables' backlogs does not walk every backlog at every poll."""
COMMITS_PER_PARTITION = 64
"""A batch's commits are read in tasks of about this many, several tables to a task: a batch touching hundreds of
tables with a commit each is a few Spark tasks, not hundreds (each task has a fixed cost far above one small GET)."""
READ_THREADS = 8
"""Commit files a task reads at once, of one table or several: a task's time is the store's latency, not its CPU."""
T = TypeVar("T")


@cache
def probe_pool() -> ThreadPoolExecutor:
    """The source's probing threads, started once a process: a poll that started its own (a few ms each when the
    process has a core) spent a third of its time starting them on a busy driver (a profile at 300 tables)."""
    return ThreadPoolExecutor(PROBE_THREADS, "recluster-delta-log-probe")


def transient(error: BaseException) -> bool:
    return storage_fault(error) is StorageFault.TRANSIENT


def with_storage_retries(table: str, what: str, call: Callable[[], T]) -> T:
    """`call()`, retried with jittered doubling backoff while it fails with a transient storage error, for up to
    `RETRY_DEADLINE_SECONDS`; any other error, or the deadline passed, is raised."""
    deadline = time.monotonic() + RETRY_DEADLINE_SECONDS
    delay = RETRY_FIRST_SECONDS
    while True:
        try:
            return call()
        except Exception as error:
            if not transient(error) or time.monotonic() > deadline:
                raise
            log.warning(
                "delta-log source: table=%s reason=storage_error retrying=%s in=%.1fs error=%s",
                table,
                what,
                delay,
                describe_storage_error(error),
            )
        time.sleep(delay * (0.5 + random.random()))
        delay = min(2 * delay, RETRY_MAX_SECONDS)


def newest_version(
    table_uri: str, after: int, limit: int, options: Mapping[str, str], *, look_for_gap: bool = True
) -> int:
    """The newest version in (after, after+limit] whose predecessors are all there, by probing names.

    When the next commit file is missing but the log has moved on (cleaned up behind a checkpoint newer than
    `after`), returns the table's current version so the reader emits a LOG_GAP row for the lost range; with
    `look_for_gap` false that check (a GET of `_last_checkpoint`) is skipped and `after` returned.
    """
    version = after
    while version - after < limit and commit_file_exists(table_uri, version + 1, options):
        version += 1
    if version == after and look_for_gap:
        checkpoint = last_checkpoint_version(table_uri, options)
        current = table_version(table_uri, options) if checkpoint is not None and checkpoint > after else None
        if current is not None and current > after + 1:
            return min(current, after + limit)
    return version


def table_version(table_uri: str, options: Mapping[str, str]) -> int | None:
    """The table's current version (via delta-rs: copes with checkpoints), or None if it does not exist. A storage
    error is raised: a table the store failed to answer for is not a missing table."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return int(DeltaTable(table_uri, storage_options=dict(options)).version())
    except (TableNotFoundError, FileNotFoundError):
        return None


@dataclass(frozen=True, slots=True)
class CommitRange(InputPartition):
    """Versions (first..last) of one table to read: plain values, picklable."""

    table: str
    first: int
    last: int
    options: tuple[tuple[str, str], ...] = field(repr=False)


@dataclass(frozen=True, slots=True)
class CommitRanges(InputPartition):
    """The ranges one task reads, in order (tables apart from each other: the batch sorts its commits)."""

    ranges: tuple[CommitRange, ...]


def commit_partitions(ranges: Sequence[CommitRange], commits_per_partition: int) -> list[CommitRanges]:
    """`ranges` packed in order into partitions of about `commits_per_partition` commits each: a range is never
    split, so a table with a long backlog is a partition of its own."""
    partitions: list[CommitRanges] = []
    current: list[CommitRange] = []
    commits = 0
    for part in ranges:
        current.append(part)
        commits += part.last - part.first + 1
        if commits >= commits_per_partition:
            partitions.append(CommitRanges(tuple(current)))
            current, commits = [], 0
    if current:
        partitions.append(CommitRanges(tuple(current)))
    return partitions


def commit_row(part: CommitRange, version: int) -> tuple[Any, ...]:
    """The row (`recluster.delta.log.SCHEMA`) of one commit of a range, read with storage retries: a transient error
    is never taken for a commit cleaned from the log. Stateless, runs on executors."""
    options = dict(part.options)

    def read() -> CommitEntry:
        return next(read_commits(part.table, version, version, options))

    return with_storage_retries(part.table, f"commit {version}", read).row()


def commit_rows(ranges: Sequence[CommitRange]) -> Iterator[tuple[Any, ...]]:
    """The rows of the ranges' commits in order, `READ_THREADS` commit files read at once."""
    commits = [(part, version) for part in ranges for version in range(part.first, part.last + 1)]
    with ThreadPoolExecutor(max(1, min(READ_THREADS, len(commits)))) as pool:
        yield from pool.map(commit_row, *zip(*commits, strict=True))


class DeltaLogStreamReader(DataSourceStreamReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.listed = [normalize_uri(t) for t in json.loads(options.get("tables", "[]"))]
        self.tables = list(self.listed)
        self.tables_file = options.get("tablesFile")
        if not self.tables and self.tables_file is None:
            raise ValueError(f"{SOURCE_NAME}: option 'tables' must be a JSON list of table URIs")
        starting = json.loads(options.get("startingVersion", '"latest"'))
        self.starting: dict[str, str | int] = (
            dict.fromkeys(self.tables, starting) if not isinstance(starting, dict) else starting
        )
        """Per table: "latest", "earliest", a version to start at, or (pinned by the job) the version to start
        after."""
        self.max_commits = int(options.get("maxCommitsPerBatch", "1000"))
        common: dict[str, str] = json.loads(options.get("storageOptions", "{}"))
        per_table: dict[str, dict[str, str]] = json.loads(options.get("tableStorageOptions", "{}"))
        self.storage_options = {table: {**common, **per_table.get(table, {})} for table in self.tables}
        self.common_options = common
        self.found_starts: dict[str, int] = {}
        self.backoff = FailureBook(RETRY_FIRST_SECONDS, RETRY_MAX_SECONDS)
        """Tables whose log the store failed to answer for, each probed again once its backoff has passed."""
        self.gap_probed: dict[str, float] = {}
        """Per table, when its probe last looked for a gap (`time.monotonic()`): none yet means at the next poll."""

    def initialOffset(self) -> dict[str, Any]:
        versions = {}
        for table in self.tables:
            starting = self.starting.get(table, "latest")
            if isinstance(starting, int):  # pinned when the job started
                versions[table] = starting
                continue
            options = self.storage_options[table]
            current = with_storage_retries(table, "version", partial(table_version, table, options))
            if current is None:
                log.warning("delta-log source: table %s does not exist yet; watching for it", table)
                versions[table] = -1
            elif starting == "latest":
                versions[table] = current
            elif starting == "earliest":
                versions[table] = -1
            else:
                versions[table] = min(int(starting) - 1, current)
        return {"tables": versions}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_commits)

    def _read_tables_file(self) -> None:
        """The listed tables and the ones the job's discovery found now (a missing file: none found yet)."""
        if self.tables_file is None:
            return
        try:
            with open(self.tables_file, encoding="utf-8") as handle:
                found = json.load(handle)
        except FileNotFoundError:
            return
        for table, version in found["tables"].items():
            self.found_starts.setdefault(table, int(version))
            self.storage_options[table] = {**self.common_options, **found["storageOptions"].get(table, {})}
        self.tables = [*self.listed, *(t for t in found["tables"] if t not in self.listed)]

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else 1 << 62  # maxCommitsPerBatch by default
        self._read_tables_file()
        versions = {table: version for table, version in start["tables"].items() if table in self.tables}
        for table in self.tables:  # tables added after the checkpoint start from their start, found ones after
            versions.setdefault(table, self.found_starts.get(table, -1))  # the version the job loaded them at
        now = time.monotonic()
        probed = [table for table in self.tables if not self.backoff.waiting(table, time.time())]
        for first in range(0, len(probed), PROBE_CHUNK):  # a chunk at a time: none past the spent budget
            if budget <= 0:
                break
            chunk = probed[first : first + PROBE_CHUNK]
            probe = partial(self._probe, limit=budget, now=now)
            outcomes = list(probe_pool().map(probe, chunk, [versions[table] for table in chunk]))
            for table, newest in zip(chunk, outcomes, strict=True):  # the budget goes to tables in their order
                if newest is None:
                    continue
                newest = min(newest, versions[table] + max(0, budget))
                budget -= newest - versions[table]
                versions[table] = newest
        return {"tables": versions}

    def _probe(self, table: str, after: int, *, limit: int, now: float) -> int | None:
        """The table's newest version after `after` (looking for a gap when `GAP_PROBE_SECONDS` have passed since
        it last did), or None while the store fails to answer for it: backed off, the query goes on."""
        last_looked = self.gap_probed.get(table)
        look_for_gap = last_looked is None or now - last_looked >= GAP_PROBE_SECONDS
        try:
            newest = newest_version(table, after, limit, self.storage_options[table], look_for_gap=look_for_gap)
        except Exception as error:
            if not transient(error):
                raise
            failure = self.backoff.failed(table, error, time.time())
            log.warning(
                "delta-log source: table=%s reason=storage_error attempts=%d retry_in=%.1fs error=%s",
                table,
                failure.attempts,
                failure.retry_at - time.time(),
                describe_storage_error(error),
            )
            return None
        if look_for_gap:
            self.gap_probed[table] = now
        if self.backoff.recovered(table) is not None:
            log.info("delta-log source: table=%s reason=storage_recovered", table)
        return newest

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        ranges = [
            CommitRange(
                table,
                start["tables"].get(table, -1) + 1,
                last,
                tuple(sorted(self.storage_options.get(table, {}).items())),
            )
            for table, last in sorted(end["tables"].items())
            if last > start["tables"].get(table, -1)
        ]
        return commit_partitions(ranges, COMMITS_PER_PARTITION)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, CommitRanges)
        yield from commit_rows(partition.ranges)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to acknowledge: the log is the source of truth and offsets live in the checkpoint."""


class DeltaLogSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return DeltaLogStreamReader(self.options)
