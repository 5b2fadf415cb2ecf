"""The library surface: what the CLI, the SQL front end and the streaming job call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deltalake import DeltaTable

from recluster.core.keys import ClusterKey
from recluster.core.metrics import ClusteringInfo, clustering_info
from recluster.delta.snapshot import TableSnapshot, check_supported, load_snapshot, open_table, resolve_cluster_key
from recluster.delta.storage import normalize_uri
from recluster.settings import Settings, TableSettings, table_storage_options


@dataclass(frozen=True, slots=True)
class TableInfo:
    """`recluster info` for one table: the snapshot it measured and its clustering information."""

    snapshot: TableSnapshot
    info: ClusteringInfo

    def to_dict(self) -> dict[str, Any]:
        return self.info.to_dict()


def table_settings(settings: Settings, uri: str) -> TableSettings | None:
    location = normalize_uri(uri)
    return next((t for t in settings.tables if normalize_uri(t.uri) == location), None)


def storage_options_for(settings: Settings, uri: str) -> Mapping[str, str]:
    """The delta-rs storage options of one table: the global ones with the table's own merged on top."""
    return table_storage_options(settings, table_settings(settings, uri))


def open_checked_table(
    uri: str, *, settings: Settings, cluster_by: Sequence[str] | None = None, keyless: bool = False
) -> tuple[DeltaTable, ClusterKey, Mapping[str, str]]:
    """Open a table, refuse features we cannot rewrite, and resolve its key: `cluster_by`, else the job's
    table config, else the table property. Returns the table, the key and the storage options used."""
    configured = table_settings(settings, uri)
    options = table_storage_options(settings, configured)
    table = open_table(uri, options)
    check_supported(table)
    key = resolve_cluster_key(
        table,
        cluster_by or (configured.cluster_by if configured else None),
        uri,
        keyless=keyless,
        curve=(configured.curve if configured else None) or settings.clustering.curve,
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


def table_info(
    uri: str,
    *,
    settings: Settings,
    cluster_by: Sequence[str] | None = None,
    partition: Mapping[str, str] | None = None,
) -> TableInfo:
    snapshot = read_snapshot(uri, settings=settings, cluster_by=cluster_by, partition=partition)
    return TableInfo(snapshot, clustering_info(snapshot.blocks, snapshot.key))
