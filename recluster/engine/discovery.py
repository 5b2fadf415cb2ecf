"""Finding tables (docs/discovery.md): the Delta tables of a catalog through Spark's own catalog (`SHOW TABLE
EXTENDED`, so any catalog the job's Spark is configured with), and every `_delta_log/` below a storage root, listed
one folder level at a time within a budget of LIST requests per pass. The decisions (which tables, what they
inherit) are recluster/core/discovery.py's."""

from __future__ import annotations

import logging
import re
import zlib
from collections import deque
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from recluster.core.discovery import Level, PropertyLayer, effective_properties, matches, name_pattern
from recluster.core.errors import TableError, first_line
from recluster.core.table_names import quoted
from recluster.delta.storage import LOG_DIR, normalize_uri, read_log_actions, table_filesystem
from recluster.settings import CLUSTER_BY_PROPERTY, CURVE_PROPERTY, Settings, TableSettings
from recluster.settings_discovery import CatalogSource, StorageRoot

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from recluster.engine.claimed_order import ClaimedOrder

log = logging.getLogger("recluster.discovery")

DELTA_PROVIDER = "delta"
LISTING_ATTEMPTS = 3
"""A database's tables are listed again when one was dropped while Spark described them (seen in a test)."""
RECHECK_EVERY_SWEEPS = 10
"""A table the last sweep found has its folder listed to confirm its `_delta_log/` is still there at one sweep in this
many (its turn, spread over the tables by name); at the other sweeps it is taken as a table from its parent's
listing: a sweep of an unchanged root is a LIST per folder holding tables, not a LIST of every table."""


@dataclass(frozen=True, slots=True)
class FoundTable:
    """A Delta table a source found: where it is, the source, and what it inherits from the levels above it."""

    uri: str
    source: str
    layers: tuple[PropertyLayer, ...]
    settings: TableSettings = field(repr=False)
    """Its storage options, and the key and curve it inherits when it sets none itself."""
    opened: DeltaTable | None = field(default=None, repr=False, compare=False)
    """The `DeltaTable` its properties were just read from, handed to its take-up so that its log is not read twice
    (`JobDiscovery`); None: the take-up opens it."""


@dataclass(frozen=True, slots=True)
class SourceScan:
    """One pass over one source: the tables it found, and whether the pass saw all of them (an unfinished listing
    or a failed source drops nothing)."""

    source: str
    tables: tuple[FoundTable, ...]
    complete: bool
    error: str | None = None
    listed: tuple[str, ...] = ()
    """Every table the source lists, whatever its properties (with leases, the tables the jobs split: a job reads the
    properties of its own tables only)."""


def in_turn(uri: str, passes: int) -> bool:
    """Whether the pass after `passes` complete ones checks the table in full (RECHECK_EVERY_SWEEPS)."""
    return (zlib.crc32(uri.encode()) + passes) % RECHECK_EVERY_SWEEPS == 0


class OwnProperties:
    """Tables' own properties, each read from its log once and then kept current from the commits after it: a pass
    over a source it has seen before costs one request per table (for its next commit file, absent when unchanged)
    and one or two more per new commit, not a replay of every log. Thread-safe for distinct tables (discovery reads
    `discovery.threads` at once)."""

    def __init__(self, hand_over: bool = False) -> None:
        """`hand_over`: keep each table opened to read its properties until `take_opened` (a job takes it up next)."""
        self.known: dict[str, tuple[int, dict[str, str]]] = {}
        """Per table: the version its properties are current at, and the properties."""
        self.hand_over = hand_over
        self.opened: dict[str, DeltaTable] = {}
        self.passes = 0
        """Complete passes over the source (each ends with `keep_only`)."""

    def get(self, uri: str, options: Mapping[str, str]) -> dict[str, str]:
        known = self.known.get(uri)
        if known is None:  # opened at its latest version: no commit file after it to look for yet
            from deltalake import DeltaTable

            table = DeltaTable(uri, storage_options=dict(options))
            self.known[uri] = (table.version(), dict(table.metadata().configuration))
            if self.hand_over:
                self.opened[uri] = table
            return self.known[uri][1]
        version, properties = known
        while True:  # the commits since: a metaData action carries the table's whole configuration
            try:
                actions = read_log_actions(uri, version + 1, options)
            except FileNotFoundError:
                break
            version += 1
            for action in actions:
                if "metaData" in action:
                    properties = dict(action["metaData"].get("configuration") or {})
        self.known[uri] = (version, properties)
        return properties

    def take_opened(self) -> dict[str, DeltaTable]:
        """The tables opened since the last call, by URI (each handed over once)."""
        opened, self.opened = self.opened, {}
        return opened

    def take_one_opened(self, uri: str) -> DeltaTable | None:
        """The table opened for `uri` since the last `take_opened`, handed over once (None: not opened)."""
        return self.opened.pop(uri, None)

    def keep_only(self, uris: Collection[str]) -> None:
        """End a complete pass: forget the tables it no longer found."""
        for uri in set(self.known) - set(uris):
            del self.known[uri]
        self.passes += 1


def found_table(
    uri: str,
    source: str,
    layers: tuple[PropertyLayer, ...],
    where: Mapping[str, str],
    options: Mapping[str, str],
    own: Mapping[str, str],
) -> FoundTable | None:
    """The table as the job takes it up, or None when its effective properties (over its `own`) fail the source's
    filter. A key or curve it inherits is handed on as its settings, which its own property would override anyway."""
    effective = effective_properties(layers, own)
    if not matches({key: p.value for key, p in effective.items()}, where):
        return None
    inherited = {key: p.value for key, p in effective.items() if key not in own}
    cluster_by = inherited.get(CLUSTER_BY_PROPERTY)
    curve = inherited.get(CURVE_PROPERTY)
    settings = TableSettings.model_validate(
        {"uri": uri, "cluster_by": cluster_by, "curve": curve, "storage_options": dict(options)}
    )
    return FoundTable(uri, source, layers, settings)


class RootScanner:
    """Every Delta table below one storage root. A pass makes at most `max_listings` LIST requests; the folders it
    did not reach wait for the next pass, so a full sweep of a big root spans several passes."""

    def __init__(
        self,
        root: StorageRoot,
        settings: Settings,
        owns: Callable[[str], bool] | None = None,
        hand_over: bool = False,
    ) -> None:
        """`owns`: whether this job holds a table's lease (jobs sharing tables): the properties of a table another job
        owns are never read (`open_claimed` reads a table's as this job claims it); None: every table's at every
        sweep. `hand_over`: keep the tables opened for their properties (OwnProperties.take_opened)."""
        self.owns = owns
        self.root = root
        self.uri = normalize_uri(root.uri)
        self.options = {**settings.storage_options, **root.storage_options}
        self.layers = (PropertyLayer.of(Level.ROOT, self.uri, root.properties),)
        self.threads = settings.discovery.threads
        self.pending: deque[tuple[str, int]] = deque()
        self.sweep: dict[str, FoundTable] = {}
        self.last_sweep: tuple[FoundTable, ...] = ()
        self.properties = OwnProperties(hand_over)
        self.read: set[str] = set()
        """The tables whose properties this sweep read (taken or filtered out): `open_claimed` skips them."""
        self.swept: set[str] = set()
        """The tables the current sweep found so far, filtered out or not."""
        self.known: frozenset[str] = frozenset()
        """The tables the last complete sweep found, filtered out or not (RECHECK_EVERY_SWEEPS)."""

    def scan(self) -> SourceScan:
        """One pass: continue the current sweep within the listing budget (tables found are taken up at once); the
        scan is complete when a sweep ended in this pass."""
        filesystem = table_filesystem(self.uri, self.options)
        if not self.pending:
            self.pending.append(("", 0))
            self.sweep, self.swept, self.read = {}, set(), set()
        listings, tables = 0, []
        while self.pending and listings < self.root.max_listings:
            folder, depth = self.pending.popleft()
            listings += 1
            try:
                children = filesystem.get_file_info(pafs.FileSelector(self._location(folder)))
            except FileNotFoundError:
                self.pending.clear()
                raise TableError(f"storage root {self.uri}{'/' + folder if folder else ''} does not exist") from None
            folders = [c for c in children if c.type == pafs.FileType.Directory]
            if any(c.base_name == LOG_DIR for c in folders) and folder:
                tables.append(f"{self.uri}/{folder}")
                self.swept.add(tables[-1])
                continue
            if depth < self.root.max_depth:
                for child in folders:
                    if not child.base_name.startswith(("_", ".")):
                        path = f"{folder}/{child.base_name}".lstrip("/")
                        if self._still_a_table(uri := f"{self.uri}/{path}"):
                            tables.append(uri)
                            self.swept.add(uri)
                        else:
                            self.pending.append((path, depth + 1))
        self._open([uri for uri in tables if self.owns is None or self.owns(uri)])
        if not self.pending:
            self.last_sweep = tuple(self.sweep.values())
            self.properties.keep_only(self.swept)
            self.known = frozenset(self.swept)
            return SourceScan(self.uri, self.last_sweep, complete=True, listed=tuple(sorted(self.swept)))
        found = {table.uri: table for table in (*self.last_sweep, *self.sweep.values())}  # this sweep's, newer
        listed = tuple(sorted(self.known | self.swept))
        return SourceScan(self.uri, tuple(found.values()), complete=False, listed=listed)

    def unread_claims(self, uris: Collection[str]) -> list[str]:
        """Of the tables this job just claimed, those of this root whose properties this sweep has not read (it
        claimed them since the sweep listed them)."""
        return [uri for uri in uris if (uri in self.known or uri in self.swept) and uri not in self.read]

    def open_claimed(self, order: ClaimedOrder, then: Callable[[FoundTable], None] | None = None) -> list[FoundTable]:
        """Read the claimed tables `order` hands out (`unread_claims`, those a commit event named first),
        `discovery.threads` at a time: those that pass the root's filter. `then`: called with each of those as soon as
        it is read, with the table as opened (a job takes it up there and then: a takeover's reads are the store's
        work, its take-ups the job's, and they overlap)."""
        previous = {table.uri: table for table in self.last_sweep}
        taken: list[str] = []

        def reader() -> None:
            while (uri := order.take()) is not None:
                taken.append(uri)
                self.read.add(uri)
                table = self._read(uri, previous, then)
                if table is not None:
                    self.sweep[uri] = table

        with ThreadPoolExecutor(self.threads, "recluster-discovery") as pool:
            for future in [pool.submit(reader) for _ in range(self.threads)]:
                future.result()
        return [self.sweep[uri] for uri in taken if uri in self.sweep]

    def _still_a_table(self, uri: str) -> bool:
        """Whether a folder the last sweep found to be a table is taken as one without listing it (a table whose
        folder is gone is missing from its parent's listing)."""
        return uri in self.known and not in_turn(uri, self.properties.passes)

    def _open(self, uris: list[str]) -> None:
        """Read the tables' properties, `discovery.threads` at a time (each is a read of its log)."""
        previous = {table.uri: table for table in self.last_sweep}
        self.read.update(uris)
        with ThreadPoolExecutor(self.threads, "recluster-discovery") as pool:
            for uri, table in zip(uris, pool.map(lambda uri: self._read(uri, previous), uris), strict=True):
                if table is not None:
                    self.sweep[uri] = table

    def _read(
        self, uri: str, previous: Mapping[str, FoundTable], then: Callable[[FoundTable], None] | None = None
    ) -> FoundTable | None:
        """One table's properties: the table as found, or None when it fails the root's filter. A table that cannot
        be read is one line: it stays found if the last sweep found it (`previous`: nothing is let go on a read
        error), else it waits for the next sweep; the root's other tables go on."""
        try:
            own = self.properties.get(uri, self.options)
            table = found_table(uri, self.uri, self.layers, self.root.where, self.options, own)
        except Exception as error:
            log.error("recluster table=%s reason=unreadable_table error=%s", uri, first_line(error))
            table = previous.get(uri)
        if table is not None and then is not None:
            then(replace(table, opened=self.properties.take_one_opened(uri)))
        return table

    def _location(self, folder: str) -> str:
        base = self.uri if "://" not in self.uri else ""
        return "/".join(part for part in (base, folder) if part) or "/"


def sweep_roots(settings: Settings) -> list[FoundTable]:
    """Every table under the configured storage roots, each root swept to its end (`recluster status`: no job, no
    Spark, so catalog sources are left to the job)."""
    found: dict[str, FoundTable] = {}
    for root in settings.discovery.roots:
        scanner = RootScanner(root, settings)
        while not (scan := scanner.scan()).complete:
            pass
        found.update((table.uri, table) for table in scan.tables if table.uri not in found)
    return sorted(found.values(), key=lambda table: table.uri)


def catalog_scan(spark: Any, source: CatalogSource, settings: Settings, properties: OwnProperties) -> SourceScan:
    """The Delta tables of the source's databases whose names match, as the job's Spark catalog lists them; their own
    properties through `properties` (the source's own: it keeps them between passes)."""
    options = {**settings.storage_options, **source.storage_options}
    catalog_layer = PropertyLayer.of(Level.CATALOG, source.name, source.properties)
    databases, tables = name_pattern(source.databases), name_pattern(source.tables)
    found, seen = [], set()
    for database in _namespaces(spark, source.name):
        if not databases.fullmatch(database):
            continue
        own = _database_properties(spark, source.name, database)
        configured = source.database_properties.get(database, {})
        database_layer = PropertyLayer.of(Level.DATABASE, f"{source.name}.{database}", {**own, **configured})
        for name, provider, location in described_tables(spark, source.name, database):
            if provider != DELTA_PROVIDER or not tables.fullmatch(name) or location is None:
                continue
            uri = catalog_uri(location)
            seen.add(uri)
            layers = (catalog_layer, database_layer)
            table = found_table(uri, source.name, layers, source.where, options, properties.get(uri, options))
            if table is not None:
                found.append(table)
    properties.keep_only(seen)
    return SourceScan(source.name, tuple(found), complete=True, listed=tuple(sorted(seen)))


def _namespaces(spark: Any, catalog: str) -> list[str]:
    return [row[0] for row in spark.sql(f"SHOW NAMESPACES IN {quoted(catalog)}").collect()]


def _database_properties(spark: Any, catalog: str, database: str) -> dict[str, str]:
    """The database's own `recluster.*` properties (DBPROPERTIES), printed by Spark as `((key,value), ...)`."""
    rows = spark.sql(f"DESCRIBE NAMESPACE EXTENDED {quoted(catalog)}.{quoted(database)}").collect()
    text = next((str(row[1]) for row in rows if row[0] == "Properties"), "")
    pairs = re.findall(r"\(([^(),]+),([^()]*)\)", text)
    return {key.strip(): value.strip() for key, value in pairs if key.strip().startswith("recluster.")}


def catalog_uri(location: str) -> str:
    """A location as a catalog gives it, as delta-rs opens it (Hadoop's `s3a://` is `s3://`)."""
    return normalize_uri(location.replace("s3a://", "s3://", 1))


def described_tables(
    spark: Any, catalog: str, database: str, pattern: str = "*"
) -> list[tuple[str, str | None, str | None]]:
    """(name, provider, location) of the tables of a database whose names match Spark's LIKE `pattern`, from one
    `SHOW TABLE EXTENDED`: it reads the catalog's entry only, so it needs no Delta jars in the job's Spark."""
    statement = f"SHOW TABLE EXTENDED IN {quoted(catalog)}.{quoted(database)} LIKE '{pattern}'"
    for attempt in range(LISTING_ATTEMPTS):
        try:
            rows = spark.sql(statement).collect()
            break
        except Exception as error:  # a table dropped between Spark's listing and its description of the tables
            if "TABLE_OR_VIEW_NOT_FOUND" not in str(error) or attempt + 1 == LISTING_ATTEMPTS:
                raise
    listed = []
    for row in rows:
        entry = row.asDict()
        if entry.get("isTemporary"):
            continue
        info = dict(line.split(": ", 1) for line in str(entry.get("information", "")).splitlines() if ": " in line)
        provider = info.get("Provider")
        listed.append((str(entry["tableName"]), provider.lower() if provider else None, info.get("Location")))
    return listed


def failed_scan(source: str, error: BaseException) -> SourceScan:
    """A source that could not be read: one line in the log, its tables kept as they were."""
    message = first_line(error)
    log.error("recluster discovery source=%s reason=source_failed error=%s", source, message)
    return SourceScan(source, (), complete=False, error=message)
