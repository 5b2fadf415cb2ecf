"""The library surface: what the CLI, the SQL front end and the streaming job call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deltalake import DeltaTable

from recluster.core.blocks import Partition
from recluster.core.curves import Curve, default_curve
from recluster.core.keys import ClusterKey, format_columns
from recluster.core.metrics import ClusteringInfo, clustering_info
from recluster.core.selection import time_like_decisions
from recluster.core.selection.plan import Policy, SelectionBounds, WatermarkDecision
from recluster.delta.log_writer import set_table_properties
from recluster.delta.snapshot import (
    TableSnapshot,
    check_supported,
    liquid_clustering,
    liquid_clustering_columns,
    liquid_domain,
    load_snapshot,
    open_table,
    resolve_cluster_key,
)
from recluster.delta.storage import normalize_uri, require_safe_commits
from recluster.engine.publish import time_like_records
from recluster.settings import (
    CLUSTER_BY_PROPERTY,
    CURVE_PROPERTY,
    Settings,
    TableSettings,
    resolve_selection,
    table_storage_options,
)


@dataclass(frozen=True, slots=True)
class TableInfo:
    """`recluster info` for one table: the snapshot it measured and its clustering information."""

    snapshot: TableSnapshot
    info: ClusteringInfo
    time_like: tuple[tuple[Partition, WatermarkDecision], ...] = ()
    """absorb: the watermark decision of each time-like partition, as the next round would take it."""

    def to_dict(self) -> dict[str, Any]:
        data = self.info.to_dict()
        if self.time_like:
            data["time_like"] = [record.model_dump() for record in time_like_records(self.time_like)]
        return data


def table_settings(settings: Settings, uri: str) -> TableSettings | None:
    location = normalize_uri(uri)
    return next((t for t in settings.tables if normalize_uri(t.uri) == location), None)


def storage_options_for(settings: Settings, uri: str) -> Mapping[str, str]:
    """The delta-rs storage options of one table: the global ones with the table's own merged on top."""
    return table_storage_options(settings, table_settings(settings, uri))


def open_checked_table(
    uri: str,
    *,
    settings: Settings,
    cluster_by: Sequence[str] | None = None,
    keyless: bool = False,
    opened: DeltaTable | None = None,
) -> tuple[DeltaTable, ClusterKey, Mapping[str, str]]:
    """Open a table (or bring `opened` up to date), refuse features we cannot rewrite, and resolve its key:
    `cluster_by`, else the job's table config, else the table property. Returns the table, the key and the storage
    options used."""
    configured = table_settings(settings, uri)
    options = table_storage_options(settings, configured)
    table = open_table(uri, options, opened)
    check_supported(table)
    key = resolve_cluster_key(
        table,
        cluster_by or (configured.cluster_by if configured else None),
        uri,
        keyless=keyless,
        curve=(configured.curve if configured else None) or settings.clustering.curve,
        liquid=liquid_clustering_columns(table, uri, options),
    )
    return table, key, options


def read_snapshot(
    uri: str,
    *,
    settings: Settings,
    cluster_by: Sequence[str] | None = None,
    partition: Mapping[str, str] | None = None,
    keyless: bool = False,
) -> TableSnapshot:
    table, key, options = open_checked_table(uri, settings=settings, cluster_by=cluster_by, keyless=keyless)
    return load_snapshot(table, key, uri=uri, storage_options=options, partition=partition)


def selection_bounds(
    settings: Settings,
    snapshot: TableSnapshot,
    files_left: int | None,
    *,
    policy: str | None = None,
    beta: float | None = None,
) -> SelectionBounds:
    """Selection inputs for one table: settings, the table's `recluster.policy`, then `policy`/`beta`."""
    clustering = settings.clustering
    selection = resolve_selection(settings.selection, snapshot.properties, policy=policy, beta=beta)
    max_files = clustering.max_merge_files if files_left is None else min(clustering.max_merge_files, files_left)
    return SelectionBounds(
        depth_ratio=clustering.depth_ratio,
        max_depth_threshold=clustering.max_depth_threshold,
        max_task_bytes=clustering.max_merge_bytes,
        max_task_files=max(max_files, 1),
        max_tasks=clustering.max_tasks_per_round,
        key_fingerprint=snapshot.key.fingerprint,
        policy=Policy(selection.policy),
        beta=selection.resolved_beta,
        target_depth=selection.target_depth,
        target_rows=clustering.target_rows,
        target_bytes=clustering.target_file_bytes,
        small_table_files=settings.small_tables.compact_files,
    )


def table_info(
    uri: str,
    *,
    settings: Settings,
    cluster_by: Sequence[str] | None = None,
    partition: Mapping[str, str] | None = None,
) -> TableInfo:
    snapshot = read_snapshot(uri, settings=settings, cluster_by=cluster_by, partition=partition)
    bounds = selection_bounds(settings, snapshot, None)
    time_like = time_like_decisions(snapshot.blocks, bounds)
    return TableInfo(snapshot, clustering_info(snapshot.blocks, snapshot.key), time_like)


def set_cluster_key(
    uri: str, columns: Sequence[str], curve: Curve | None, *, settings: Settings, options: Mapping[str, str]
) -> ClusterKey:
    """`ALTER TABLE ... CLUSTER BY`: on a liquid table Delta's clustering domain names the columns (and a property
    the curve); on any other the table properties `recluster.clusterBy` and `recluster.curve`
    (docs/commands.md)."""
    table = open_table(uri, options)
    key = resolve_cluster_key(table, columns, uri, curve=curve or default_curve(len(columns)))
    require_safe_commits(uri, options, settings.commit.allow_unsafe_single_writer)
    if liquid_clustering(table):
        set_table_properties(uri, {CURVE_PROPERTY: str(key.curve)}, options, domains=[liquid_domain(key)])
    else:
        properties = {CLUSTER_BY_PROPERTY: format_columns(key.names), CURVE_PROPERTY: str(key.curve)}
        set_table_properties(uri, properties, options)
    return key
