"""A Delta table as the engine sees it, through delta-rs (`deltalake`): open, refuse what cannot be
rewritten, resolve the key, snapshot -> blocks.

Stats come from the Delta log; for a key column the log has no usable stats for, the Parquet footer is read once
and cached (data files are immutable, so the cache never goes stale). Deletion vectors come from the log itself.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from recluster.core.block_table import release_arrow_memory
from recluster.core.blocks import Block
from recluster.core.curves import MAX_CURVE_COLUMNS, Curve, default_curve, parse_curve
from recluster.core.deletion_vectors import DeletionVector, match_deletion_vectors
from recluster.core.errors import StorageError, TableError
from recluster.core.keys import (
    ClusterKey,
    key_column,
    parse_columns,
)
from recluster.delta.column_mapping import stored_name
from recluster.delta.file_blocks import blocks_from_actions, file_partitions
from recluster.delta.log_state import SnapshotLog, table_log
from recluster.delta.ranges import current_range_bounds
from recluster.delta.replay import LogState
from recluster.delta.storage import commit_file_exists, normalize_uri
from recluster.delta.storage_faults import StorageFault, describe_storage_error, storage_fault
from recluster.settings import CLUSTER_BY_PROPERTY, CURVE_PROPERTY, RANGES_PROPERTY

log = logging.getLogger(__name__)


SUPPORTED_READER_FEATURES = frozenset(
    {"timestampNtz", "deletionVectors", "v2Checkpoint", "vacuumProtocolCheck", "columnMapping", "typeWidening"}
)


SUPPORTED_WRITER_FEATURES = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "columnMapping",  # data files and stats by physical names (delta/column_mapping.py)
        "typeWidening",  # files of a narrower type are read and rewritten with the table's type
        "identityColumns",
        "timestampNtz",
        "deletionVectors",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "domainMetadata",
        "inCommitTimestamp",
        "allowColumnDefaults",
        "clustering",  # liquid: its clustering columns are the default key; outputs are marked clustered
        "rowTracking",  # row ids and commit versions kept in the materialized columns (delta/row_tracking.py)
    }
)
"""Writer features a rewrite with dataChange=false keeps valid. Not among them, each refused with its name:
icebergCompat* (Iceberg metadata on every add) and any newer one."""


def open_table(
    uri: str, storage_options: Mapping[str, str] | None = None, opened: DeltaTable | None = None
) -> DeltaTable:
    """The table at its latest version; `opened`: the same table opened a moment ago, brought up to date from its
    version: one request for its next commit file, and only if there is one a listing after it, where an open reads
    the whole log (docs/discovery.md#several-jobs)."""
    location = normalize_uri(uri)
    try:
        if opened is not None:
            if commit_file_exists(location, opened.version() + 1, storage_options):
                opened.update_incremental()
            return opened
        return DeltaTable(location, storage_options=dict(storage_options or {}))
    except TableNotFoundError:
        raise TableError(f"{uri} is not a Delta table (no _delta_log found)") from None
    except (DeltaError, OSError) as error:
        message = f"cannot open Delta table {uri}: {describe_storage_error(error)}"
        raise StorageError(message, transient=storage_fault(error) is StorageFault.TRANSIENT) from None


def arrow_schema(table: DeltaTable) -> pa.Schema:
    return pa.schema(table.schema().to_arrow())


LIQUID_DOMAIN = "delta.clustering"
"""The domain metadata in which Delta liquid clustering keeps a table's clustering columns (physical names)."""


def liquid_clustering(table: DeltaTable) -> bool:
    """Whether the table is Delta liquid clustered (writer feature `clustering`)."""
    return "clustering" in (table.protocol().writer_features or [])


def liquid_domain(key: ClusterKey) -> dict[str, Any]:
    """The domainMetadata action that makes `key`'s columns a liquid table's clustering columns."""
    columns = [[column.stored_name] for column in key.columns]
    configuration = {"clusteringColumns": columns, "domainName": LIQUID_DOMAIN}
    return {"domain": LIQUID_DOMAIN, "configuration": json.dumps(configuration), "removed": False}


def liquid_clustering_columns(
    table: DeltaTable, uri: str, storage_options: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """The logical names of a Delta liquid-clustered table's clustering columns (none: not clustered)."""
    if not liquid_clustering(table):
        return ()
    state = table_log(table, normalize_uri(uri or table.table_uri), storage_options).state()
    domain = state.domains.get(LIQUID_DOMAIN)
    paths = json.loads(domain["configuration"]).get("clusteringColumns", []) if domain else []
    logical = {stored_name(field): field.name for field in arrow_schema(table)}
    names = []
    for path in paths:
        if len(path) != 1 or path[0] not in logical:
            raise TableError(
                f"liquid clustering column {'.'.join(path)!r} is nested or unknown; cluster by top-level columns"
            )
        names.append(logical[path[0]])
    return tuple(names)


def resolve_cluster_key(
    table: DeltaTable,
    cluster_by: Sequence[str] | None,
    uri: str = "",
    *,
    keyless: bool = False,
    curve: str | None = None,
    liquid: Sequence[str] = (),
) -> ClusterKey:
    """The key from `cluster_by`, else the table's liquid clustering columns (`liquid`), else the table property
    `recluster.clusterBy`, else a clear error (or, with `keyless`, the empty key: compaction needs none). Its
    curve: `curve`, else the table property `recluster.curve`, else hilbert for two or more columns. Range bounds
    are the snapshot's (`with_bounds`)."""
    names = list(cluster_by or liquid)
    if not names:
        names = parse_columns(table.metadata().configuration.get(CLUSTER_BY_PROPERTY, ""))
    if not names and keyless:
        return ClusterKey(())
    if not names:
        raise TableError(
            f"table {uri or table.table_uri} has no cluster key: pass --cluster-by col1,col2 "
            f"or run ALTER TABLE ... CLUSTER BY (col1, col2)"
        )
    schema = arrow_schema(table)
    partition_columns = set(table.metadata().partition_columns)
    columns = []
    for name in names:
        index = schema.get_field_index(name)
        if index < 0:
            known = ", ".join(schema.names)
            raise TableError(f"unknown key column {name!r} (table columns: {known})")
        if name in partition_columns:
            raise TableError(f"key column {name!r} is a partition column; cluster by data columns only")
        columns.append(key_column(name, schema.field(index).type, stored_name(schema.field(index))))
    if len(set(names)) != len(names):
        raise TableError(f"key column listed twice in {', '.join(names)}")
    chosen = curve or table.metadata().configuration.get(CURVE_PROPERTY)
    resolved = parse_curve(chosen) if chosen else default_curve(len(columns))
    if resolved is not Curve.LINEAR and len(columns) > MAX_CURVE_COLUMNS:
        raise TableError(
            f"a {resolved} curve takes at most {MAX_CURVE_COLUMNS} key columns, not {len(columns)}; "
            "use fewer columns or USING LINEAR"
        )
    return ClusterKey(tuple(columns), resolved, liquid=bool(liquid) and tuple(names) == tuple(liquid))


def with_bounds(
    key: ClusterKey, properties: Mapping[str, str], uri: str, storage_options: Mapping[str, str] | None
) -> ClusterKey:
    """A curve key with its columns' current range bounds (`ranges.current_range_bounds`: the newest pointer under
    `_recluster/`, else those the legacy table property `recluster.curveRanges` names); None when there are none
    yet: the first merge samples them."""
    if not key.on_curve:
        return key
    current = current_range_bounds(uri, storage_options or {}, key.names, properties.get(RANGES_PROPERTY))
    return dataclasses.replace(key, bounds=current.bounds)


def _has_variant(schema_node: Any) -> bool:
    """Whether a Delta schema (JSON) has a column of variant type anywhere (names and metadata aside)."""
    if isinstance(schema_node, dict):
        return any(_has_variant(v) for k, v in schema_node.items() if k not in ("name", "metadata"))
    if isinstance(schema_node, list):
        return any(_has_variant(v) for v in schema_node)
    return bool(schema_node == "variant")


def check_supported(table: DeltaTable) -> None:
    """Refuse tables whose layout this engine cannot rewrite correctly: one line naming the feature."""
    mode = table.metadata().configuration.get("delta.columnMapping.mode", "none")
    if mode != "none" and table.metadata().partition_columns:
        raise TableError(
            f"column mapping mode {mode!r} on a partitioned table is not supported (partition values are logged "
            "under physical names)"
        )
    protocol = table.protocol()
    features = set(protocol.reader_features or []) - SUPPORTED_READER_FEATURES
    if "variantType" in features and not _has_variant(json.loads(table.schema().to_json())):
        features.discard("variantType")  # older delta-rs added it on any property change of a table with features
    if features:
        raise TableError(f"unsupported Delta reader features: {', '.join(sorted(features))}")
    writer = set(protocol.writer_features or []) - SUPPORTED_WRITER_FEATURES
    if "variantType" in writer and not _has_variant(json.loads(table.schema().to_json())):
        writer.discard("variantType")
    if writer:
        raise TableError(
            f"unsupported Delta writer features: {', '.join(sorted(writer))} (recluster cannot "
            f"rewrite files of such a table correctly)"
        )


@dataclass(frozen=True, slots=True)
class TableSnapshot:
    """One version of a table as the engine sees it: blocks with key ranges, plus what a commit needs."""

    uri: str
    version: int
    key: ClusterKey
    partition_columns: tuple[str, ...]
    blocks: Sequence[Block] = field(compare=False)
    """A `BlockTable` when read from the log (a `Block` is made only for a file something looks at)."""
    properties: Mapping[str, str]
    data_schema: pa.Schema = field(compare=False)
    """The table schema without partition columns: what data files hold."""
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    log: SnapshotLog | None = field(default=None, repr=False, compare=False)
    """The log at `version`, replayed once on first use and shared (docs/architecture.md#the-log-state); a
    snapshot made without one gets its own."""

    def __post_init__(self) -> None:
        if self.log is None:
            object.__setattr__(self, "log", SnapshotLog(self.uri, self.storage_options, self.version))

    def log_state(self) -> LogState:
        """Protocol, metadata, domains, deletion vectors and row ids at `version` (one replay, shared)."""
        return cast(SnapshotLog, self.log).state()


def live_deletion_vectors(table: DeltaTable, log: SnapshotLog) -> Mapping[str, DeletionVector]:
    """The deletion vector of every live file that has one, read from the log itself (delta-rs's file list does
    not carry them). Only a table whose protocol has the deletionVectors feature can have any."""
    if "deletionVectors" not in (table.protocol().reader_features or []):
        return {}
    return log.state().deletion_vectors


def load_snapshot(
    table: DeltaTable,
    key: ClusterKey,
    *,
    uri: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    partition: Mapping[str, str] | None = None,
    log: SnapshotLog | None = None,
) -> TableSnapshot:
    """The table's current blocks (optionally of one partition), keyed and leveled. `log`: one already made for
    this version (a reload of an unchanged table), else the opened table's own."""
    metadata = table.metadata()
    partition_columns = tuple(metadata.partition_columns)
    if partition:
        unknown = set(partition) - set(partition_columns)
        if unknown:
            raise TableError(
                f"unknown partition column {sorted(unknown)[0]!r} "
                f"(partition columns: {', '.join(partition_columns) or 'none'})"
            )
    actions = pa.table(table.get_add_actions(flatten=True))
    location = normalize_uri(uri or table.table_uri)
    key = with_bounds(key, metadata.configuration, location, storage_options)
    if log is None or (log.uri, log.version) != (location, table.version()):
        log = table_log(table, location, storage_options)
    vectors = live_deletion_vectors(table, log)
    if partition:
        wanted = {k: str(v) for k, v in partition.items()}
        codes, partitions = file_partitions(actions, partition_columns)
        chosen = [i for i, p in enumerate(partitions) if all(dict(p).get(k) == v for k, v in wanted.items())]
        kept = np.isin(codes, chosen)
        if vectors:  # matched against every live file (an unmatched one is an error), then kept with their files
            paths = actions.column("path").to_pylist()
            matched = match_deletion_vectors(paths, vectors)
            vectors = {paths[at]: vector for at, vector in matched.items() if kept[at]}
        actions = actions.filter(pa.array(kept))
    blocks = blocks_from_actions(actions, key, partition_columns, location, storage_options, vectors)
    del actions
    release_arrow_memory()  # (the listing's and the blocks' Arrow temporaries are gone by now)
    schema = arrow_schema(table)
    return TableSnapshot(
        uri=location,
        version=table.version(),
        key=key,
        partition_columns=partition_columns,
        blocks=blocks,
        properties=dict(metadata.configuration),
        data_schema=pa.schema([f for f in schema if f.name not in partition_columns]),
        storage_options=dict(storage_options or {}),
        log=log,
    )
