"""Settings of discovery (docs/discovery.md): the catalogs and storage roots the job finds its tables in, how often it
looks again, and the settings each level hands down to its tables. A section of `settings.Settings`."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from recluster.core.discovery import INHERITED_PREFIX, name_pattern
from recluster.settings_input import Section


def _inherited(value: dict[str, str]) -> dict[str, str]:
    wrong = sorted(key for key in value if not key.startswith(INHERITED_PREFIX))
    if wrong:
        raise ValueError(f"only {INHERITED_PREFIX}* properties are inherited by tables (got {', '.join(wrong)})")
    return value


def _pattern(value: str) -> str:
    name_pattern(value)
    return value


class CatalogSource(Section):
    """Tables of a catalog, found through Spark's catalog (any catalog the job's Spark session is configured with)."""

    catalog: str | None = None
    """The Spark catalog to look in; None: the session's own (`spark_catalog`: Hive Metastore, Glue's client)."""
    databases: str = "default"
    """A regular expression matched whole against database (schema) names, case-insensitively."""
    tables: str = ".*"
    """A regular expression matched whole against table names in those databases, case-insensitively."""
    where: dict[str, str] = Field(default_factory=dict)
    """Table properties a table must have, after inheritance (`recluster.enabled: "true"`; `"*"`: set at all).
    Every Delta table of the selected databases when empty."""
    properties: dict[str, str] = Field(default_factory=dict)
    """`recluster.*` properties every table of this catalog inherits (its own override them)."""
    database_properties: dict[str, dict[str, str]] = Field(default_factory=dict)
    """Per database name: `recluster.*` properties its tables inherit, over the catalog's and over the database's
    own `recluster.*` DBPROPERTIES; a table's own properties override them."""
    storage_options: dict[str, str] = Field(default_factory=dict, repr=False)
    """delta-rs storage options of this catalog's tables, over the job's."""

    @field_validator("properties")
    @classmethod
    def _check_properties(cls, value: dict[str, str]) -> dict[str, str]:
        return _inherited(value)

    @field_validator("databases", "tables")
    @classmethod
    def _check_pattern(cls, value: str) -> str:
        return _pattern(value)

    @field_validator("database_properties")
    @classmethod
    def _check_database_properties(cls, value: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        for properties in value.values():
            _inherited(properties)
        return value

    @property
    def name(self) -> str:
        return self.catalog or "spark_catalog"


class StorageRoot(Section):
    """Every Delta table (a folder holding `_delta_log/`) below a prefix, found by listing with a bounded cost."""

    uri: str
    """The prefix: a path, `s3://bucket/warehouse/`, `gs://`, `abfss://` or `az://`."""
    max_depth: int = Field(3, ge=1)
    """Folders below the root a table may be at (1: the root's direct children)."""
    max_listings: int = Field(1000, ge=1)
    """LIST requests one pass makes at most; the next pass resumes where this one stopped."""
    where: dict[str, str] = Field(default_factory=dict)
    """Table properties a table must have, after inheritance (as for catalogs)."""
    properties: dict[str, str] = Field(default_factory=dict)
    """`recluster.*` properties every table below the root inherits (its own override them)."""
    storage_options: dict[str, str] = Field(default_factory=dict, repr=False)
    """delta-rs storage options of the tables below this root, over the job's."""

    @field_validator("properties")
    @classmethod
    def _check_properties(cls, value: dict[str, str]) -> dict[str, str]:
        return _inherited(value)


class LeaseSettings(Section):
    """Several jobs sharing the tables they find (docs/discovery.md#several-jobs): leases under one root."""

    root: str
    """Where the leases live: a path or an object-store prefix every job can write (create-if-absent, as commits)."""
    ttl_seconds: float = Field(30.0, gt=0)
    """A job whose heartbeat is older than this is dead: its tables are taken over by the others."""
    renew_seconds: float = Field(10.0, gt=0)
    """How often a job rewrites its heartbeat and balances the tables; a job that could not for ttl_seconds minus
    this starts no new work."""
    storage_options: dict[str, str] = Field(default_factory=dict, repr=False)
    """delta-rs storage options of the lease root, over the job's."""

    @model_validator(mode="after")
    def _renew_before_expiry(self) -> LeaseSettings:
        if not self.renew_seconds * 2 <= self.ttl_seconds:
            raise ValueError("renew_seconds must be at most half of ttl_seconds (a heartbeat renewed before expiry)")
        return self


class DiscoverySettings(Section):
    """Where the job finds tables besides `tables:` (docs/discovery.md)."""

    interval_seconds: float = Field(300.0, gt=0)
    """How often the catalogs and roots are looked at again: a new table is taken up, a dropped one let go, within
    about this long."""
    catalogs: list[CatalogSource] = Field(default_factory=list)
    """Catalog sources, each a catalog's databases and tables selected by patterns and properties."""
    roots: list[StorageRoot] = Field(default_factory=list)
    """Storage roots, each every Delta table below a prefix."""
    leases: LeaseSettings | None = None
    """Share the tables found with the other jobs using the same lease root; None: this job watches them all."""
    threads: int = Field(8, ge=1, le=64)
    """Tables discovery reads at once: the properties of the tables a root's sweep finds, and the tables a pass takes
    up (a first start on thousands of tables). Each is a read of the table's log, mostly waiting on storage."""

    @property
    def enabled(self) -> bool:
        return bool(self.catalogs or self.roots)
