"""Tables named as users name them in a catalog, `db.table` or `catalog.db.table`, told apart from paths by one rule
(docs/discovery.md#tables-by-name). Pure: whether a path exists on disk is the caller's question."""

from __future__ import annotations

import re
from dataclasses import dataclass

from recluster.core.errors import TableError

SESSION_CATALOG = "spark_catalog"
"""Spark's name for its session catalog (the Hive Metastore, Glue's client): the catalog of a `db.table` name."""

_PART = re.compile(r"`((?:[^`]|``)*)`|([^.`]*)")
_QUOTED = re.compile(r"`(?:[^`]|``)*`")
_PLAIN = re.compile(r"[A-Za-z0-9_]+")


class TableNameError(TableError):
    """A table name that cannot be resolved: malformed, unknown to its catalog, not Delta, or no catalog."""


@dataclass(frozen=True, slots=True)
class TableName:
    """A table as a catalog names it; `catalog` None is the session catalog."""

    database: str
    table: str
    catalog: str | None = None

    @property
    def catalog_name(self) -> str:
        return self.catalog or SESSION_CATALOG

    @property
    def parts(self) -> tuple[str, ...]:
        return (*((self.catalog,) if self.catalog else ()), self.database, self.table)

    def __str__(self) -> str:
        return ".".join(quoted(part) for part in self.parts)


def quoted(part: str) -> str:
    """One part as Spark SQL reads it: backquoted unless it is a plain identifier."""
    return part if _PLAIN.fullmatch(part) else "`" + part.replace("`", "``") + "`"


def looks_like_path(reference: str) -> bool:
    """The rule's pure half: a `/` (a URI scheme `s3://` has one) makes a reference a path, and so does the absence
    of a `.` (a relative folder, as before names were accepted), both outside backquoted parts. An existing local
    file or folder is a path too: that half is the caller's (recluster/engine/table_names.py)."""
    bare = _QUOTED.sub("", reference)
    return "/" in bare or "." not in bare


def parse_table_name(reference: str) -> TableName:
    """`db.table` or `catalog.db.table`, a part with dots or other characters backquoted (`` db.`my.table` ``).
    Anything else is one line naming the forms accepted."""
    parts: list[str] = []
    position = 0
    while True:
        match = _PART.match(reference, position)
        assert match is not None  # the second alternative matches the empty string
        part = match.group(1).replace("``", "`") if match.group(1) is not None else match.group(2)
        if not part.strip():
            unclosed = match.group(2) == "" and reference.startswith("`", position)
            raise _malformed(reference, "an unclosed backquote" if unclosed else "an empty part")
        parts.append(part)
        position = match.end()
        if position == len(reference):
            break
        if reference[position] != ".":
            raise _malformed(reference, f"unexpected {reference[position]!r} at column {position + 1}")
        position += 1
    if len(parts) not in (2, 3):
        raise _malformed(reference, f"{len(parts)} part{'s' if len(parts) != 1 else ''}")
    return TableName(parts[-2], parts[-1], catalog=parts[0] if len(parts) == 3 else None)


def _malformed(reference: str, problem: str) -> TableNameError:
    return TableNameError(
        f"malformed table name {reference!r} ({problem}): give db.table, catalog.db.table (a part with dots in "
        f"backquotes), or a path or URI"
    )
