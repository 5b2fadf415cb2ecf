"""Cluster keys: the key columns and their types, the curve they are ordered on, the fingerprint written into file
names, and the column lists `CLUSTER BY` reads and writes. Pure: no Spark, no Delta, no I/O.

How a key's values are encoded to comparable bytes: `key_encoding`; the form curve range bounds compare: `key_bounds`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import pyarrow as pa

from recluster.core.curves import RANK_LAYOUT, Curve, RangeBounds
from recluster.core.errors import TableError

DELTA_STRING_STATS_PREFIX = 32
"""Delta truncates string min/max stats to this many characters (a max is then below the real max)."""


class KeyType(StrEnum):
    """Delta primitive types a cluster key column may have, grouped by how they encode."""

    INTEGER = "integer"  # byte, short, integer, long
    FLOAT = "float"  # float, double
    DECIMAL = "decimal"
    STRING = "string"
    BINARY = "binary"
    BOOLEAN = "boolean"
    DATE = "date"
    TIMESTAMP = "timestamp"  # timestamp (UTC) and timestamp_ntz, both microseconds


@dataclass(frozen=True, slots=True)
class KeyColumn:
    """One column of a cluster key: its name, how its values encode and, for decimals, the scale."""

    name: str
    type: KeyType
    scale: int = 0
    stored: str | None = None
    """Its name in data files and the log's stats when that differs (Delta column mapping); None: `name`."""

    @property
    def stored_name(self) -> str:
        return self.stored or self.name


def key_fingerprint(columns: Sequence[str], mode: str = "lexicographic") -> str:
    """Short, stable hash of the cluster key (column list and ordering mode), written into file names."""
    text = f"{mode}:" + ",".join(c.lower() for c in columns)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]


_KEY_TYPES: tuple[tuple[Any, KeyType], ...] = (
    (pa.types.is_integer, KeyType.INTEGER),
    (pa.types.is_floating, KeyType.FLOAT),
    (pa.types.is_decimal, KeyType.DECIMAL),
    (
        lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t),
        KeyType.STRING,
    ),
    (
        lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t),
        KeyType.BINARY,
    ),
    (pa.types.is_boolean, KeyType.BOOLEAN),
    (pa.types.is_date, KeyType.DATE),
    (pa.types.is_timestamp, KeyType.TIMESTAMP),
)


def key_column(name: str, arrow_type: pa.DataType, stored: str | None = None) -> KeyColumn:
    if pa.types.is_nested(arrow_type):
        raise TableError(f"key column {name!r} has nested type {arrow_type}; cluster keys must be primitive")
    for matches, key_type in _KEY_TYPES:
        if matches(arrow_type):
            scale = arrow_type.scale if key_type is KeyType.DECIMAL else 0
            return KeyColumn(name, key_type, scale, None if stored == name else stored)
    raise TableError(f"key column {name!r} has unsupported type {arrow_type}")


CURVE_COLUMN = KeyColumn("__curve", KeyType.INTEGER)
"""What a curve key's blocks are ranged and cut on: the curve value (a file's range is in its name)."""


@dataclass(frozen=True, slots=True)
class ClusterKey:
    columns: tuple[KeyColumn, ...]
    curve: Curve = Curve.LINEAR
    bounds: RangeBounds | None = None
    """A curve key's range bounds, None until the first merge samples them (every file is then unclustered)."""
    liquid: bool = False
    """The key is the table's own Delta liquid clustering columns: outputs are marked as clustered files."""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def keyless(self) -> bool:
        """No cluster key: the table can be compacted, not clustered."""
        return not self.columns

    @property
    def on_curve(self) -> bool:
        return self.curve is not Curve.LINEAR

    @property
    def fingerprint(self) -> str:
        if not self.on_curve:
            return key_fingerprint(self.names)
        return key_fingerprint(
            self.names, f"{self.curve}/{RANK_LAYOUT}:{self.bounds.id if self.bounds else 'unbounded'}"
        )

    def __str__(self) -> str:
        text = ", ".join(self.names)
        return text if not self.on_curve else f"{text} using {self.curve}"


def parse_columns(text: str) -> list[str]:
    """Column names from `a, b` or with backquotes (`` `x,y` ``, a doubled `` ` `` inside stands for one)."""
    names: list[str] = []
    current, quoted, index = "", False, 0
    while index < len(text):
        char = text[index]
        if char == "`" and quoted and text[index + 1 : index + 2] == "`":
            current, index = current + "`", index + 2
            continue
        if char == "`":
            quoted = not quoted
        elif char == "," and not quoted:
            names.append(current.strip())
            current = ""
        else:
            current += char
        index += 1
    if quoted:
        raise TableError(f"unclosed backquote in column list {text!r}")
    names.append(current.strip())
    return [n for n in names if n]


def format_columns(names: Sequence[str]) -> str:
    """The column list `parse_columns` reads back: names with a comma, backquote or outer space backquoted."""
    return ",".join(f"`{n.replace('`', '``')}`" if ("," in n or "`" in n or n != n.strip()) else n for n in names)
