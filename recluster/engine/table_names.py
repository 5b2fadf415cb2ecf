"""Tables given by name (`db.table`, `catalog.db.table`) found at their location through the Spark session's catalog,
as discovery reads it (`SHOW TABLE EXTENDED`: no Delta jars needed); a path or URI is used as it is, with no Spark
(docs/discovery.md#tables-by-name)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from recluster.core.table_names import (
    SESSION_CATALOG,
    TableName,
    TableNameError,
    looks_like_path,
    parse_table_name,
)
from recluster.engine.discovery import DELTA_PROVIDER, catalog_uri, described_tables
from recluster.settings import Settings

DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
"""Delta's session catalog: it wraps the session's own catalog, so it alone is not a catalog tables are named in."""


class UnknownTableError(TableNameError):
    """The catalog has no such table (or no such database)."""


@dataclass(frozen=True, slots=True)
class LocatedTable:
    """Where a command's table is, and the settings with its `tables:` entry pointing there."""

    location: str
    settings: Settings = field(repr=False)
    name: TableName | None = None
    """The catalog's name of the table; None for a path or URI."""


def table_name(reference: str) -> TableName | None:
    """The rule (docs/discovery.md#tables-by-name): a URI scheme, a `/`, no `.` at all, or an existing local file or
    folder make a path (None); anything else is a catalog name, parsed (a malformed one is one line)."""
    if looks_like_path(reference) or os.path.exists(reference):
        return None
    return parse_table_name(reference)


def locate_table(reference: str, settings: Settings) -> LocatedTable:
    """A command's table: a path as it is; a name at its catalog's location, through a Spark session started only
    then. A `tables:` entry naming the same table then applies to its location."""
    name = table_name(reference)
    if name is None:
        return LocatedTable(reference, settings)
    from recluster.spark.session import spark_session

    location = catalog_location(spark_session(settings.spark), name)
    return LocatedTable(location, located_settings(settings, {name: location}), name)


def located_settings(settings: Settings, locations: dict[TableName, str]) -> Settings:
    """`settings` whose `tables:` entries naming one of `locations`' tables (case-insensitively, `db.t` the same
    as `spark_catalog.db.t`) point at its location."""
    by_key = {name_key(name): location for name, location in locations.items()}
    tables = []
    for entry in settings.tables:
        name = table_name(entry.uri)
        location = by_key.get(name_key(name)) if name is not None else None
        tables.append(entry if location is None else entry.model_copy(update={"uri": location}))
    return settings.model_copy(update={"tables": tables})


def resolve_configured_tables(spark: Any, settings: Settings) -> Settings:
    """The job's settings with every `tables:` entry given by name pointing at its location (`recluster watch`)."""
    names = [name for entry in settings.tables if (name := table_name(entry.uri)) is not None]
    return located_settings(settings, {name: catalog_location(spark, name) for name in names})


def name_key(name: TableName) -> tuple[str, str, str]:
    return (name.catalog_name.lower(), name.database.lower(), name.table.lower())


def catalog_configured(spark: Any, catalog: str) -> bool:
    """Whether the session has a catalog of that name beyond Spark's in-memory one (empty in a new process)."""
    plugin = spark.conf.get(f"spark.sql.catalog.{catalog}", None)
    if catalog != SESSION_CATALOG:
        return plugin is not None
    hive = spark.conf.get("spark.sql.catalogImplementation", "in-memory") == "hive"
    return hive or (plugin is not None and plugin != DELTA_CATALOG)


def catalog_location(spark: Any, name: TableName) -> str:
    """The location of a Delta table the session's catalog names; one line when it has no such table, the table is
    not Delta, or no catalog is configured."""
    catalog = name.catalog_name
    if not catalog_configured(spark, catalog):
        raise TableNameError(
            f"no catalog {catalog} configured to find {name} in: set spark.conf spark.sql.catalogImplementation=hive "
            f"and spark.hadoop.hive.metastore.uris (or spark.sql.catalog.{catalog}) in the settings "
            f"(docs/discovery.md#tables-by-name), or give the table's path"
        )
    pattern = name.table.replace("\\", "\\\\").replace("'", "\\'")
    try:
        described = described_tables(spark, catalog, name.database, pattern)
    except Exception as error:
        if "SCHEMA_NOT_FOUND" in str(error) or "NoSuchNamespace" in str(error):
            missing = f"table {name} not found: catalog {catalog} has no database {name.database}"
            raise UnknownTableError(missing) from None
        raise
    found = [(provider, location) for table, provider, location in described if table.lower() == name.table.lower()]
    if not found:
        raise UnknownTableError(f"table {name} not found in catalog {catalog}")
    provider, location = found[0]
    if provider != DELTA_PROVIDER:
        raise TableNameError(f"{name} in catalog {catalog} is not a Delta table (provider {provider or 'unknown'})")
    if location is None:
        raise TableNameError(f"{name} in catalog {catalog} has no location")
    return catalog_uri(location)
