"""Tables the job finds itself (docs/discovery.md): which found tables it takes up or lets go, which match a source's
filter, and the settings a table inherits from its storage root, catalog and database under its own properties.
Pure: the catalogs and stores are read in engine/discovery.py."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

INHERITED_PREFIX = "recluster."
"""Only recluster's own properties are inherited: a Delta property (`delta.*`) is the table's alone."""
ANY_VALUE = "*"
"""A filter value that only asks for the property to be set."""


class Level(StrEnum):
    """Where an effective setting came from, lowest precedence first (docs/discovery.md#inherited-settings)."""

    ROOT = "root"
    CATALOG = "catalog"
    DATABASE = "database"
    TABLE = "table"


@dataclass(frozen=True, slots=True)
class PropertyLayer:
    """Properties set at one level, for the tables below it; `name` says which root, catalog or database."""

    level: Level
    name: str
    properties: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, level: Level, name: str, properties: Mapping[str, str]) -> PropertyLayer:
        return cls(level, name, tuple(sorted(properties.items())))

    @property
    def origin(self) -> str:
        return f"{self.level} {self.name}"


@dataclass(frozen=True, slots=True)
class EffectiveProperty:
    key: str
    value: str
    origin: str
    """`table`, or the level and name it was inherited from (`database db`, `root s3://bucket/warehouse`)."""

    def __str__(self) -> str:
        return f"{self.key}={self.value} ({self.origin})"


def effective_properties(layers: Iterable[PropertyLayer], own: Mapping[str, str]) -> dict[str, EffectiveProperty]:
    """A table's properties: its own over its database's over its catalog's or root's (`layers` in that order,
    lowest first). Only `recluster.*` properties are inherited; the table's own are all kept."""
    merged: dict[str, EffectiveProperty] = {}
    for layer in sorted(layers, key=lambda layer: list(Level).index(layer.level)):
        for key, value in layer.properties:
            if key.startswith(INHERITED_PREFIX):
                merged[key] = EffectiveProperty(key, value, layer.origin)
    merged.update((key, EffectiveProperty(key, value, Level.TABLE)) for key, value in own.items())
    return dict(sorted(merged.items()))


def matches(properties: Mapping[str, str], where: Mapping[str, str]) -> bool:
    """Whether a table's effective properties pass a source's filter: each key set to its value (`*`: set at all);
    a value compares case-insensitively, as Delta's boolean properties are written either way."""
    for key, wanted in where.items():
        value = properties.get(key)
        if value is None or (wanted != ANY_VALUE and value.strip().lower() != wanted.strip().lower()):
            return False
    return True


def name_pattern(pattern: str) -> re.Pattern[str]:
    """A table or database name pattern (a regular expression matched whole, case-insensitively, as catalogs fold
    names); a bad one is one line naming it."""
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as error:
        raise ValueError(f"{pattern!r} is not a valid regular expression: {error}") from None


@dataclass(frozen=True, slots=True)
class DiscoveryChanges:
    """What one discovery pass changes in the job's tables."""

    added: tuple[str, ...]
    dropped: tuple[str, ...]

    def __str__(self) -> str:
        return f"discovery added={len(self.added)} dropped={len(self.dropped)}"


def discovery_changes(
    watched: Mapping[str, str],
    found: Mapping[str, str],
    failed_sources: Collection[str],
    listed: Collection[str] = (),
) -> DiscoveryChanges:
    """Tables to take up and to let go. `watched` and `found` map a table to the source that found it; a table
    whose source failed this pass is kept (an unreachable catalog drops nothing), a table listed in the settings
    is never dropped, and a table found again keeps being watched."""
    added = tuple(sorted(uri for uri in found if uri not in watched and uri not in listed))
    dropped = tuple(
        sorted(
            uri
            for uri, source in watched.items()
            if uri not in found and source not in failed_sources and uri not in listed
        )
    )
    return DiscoveryChanges(added, dropped)
