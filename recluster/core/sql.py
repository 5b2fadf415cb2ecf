"""The SQL statements: `ALTER TABLE t RECLUSTER [FINAL] [WHERE cond] [LIMIT n]`, `OPTIMIZE TABLE t RECLUSTER` and
`ALTER TABLE t CLUSTER BY (a, b) [USING HILBERT | ZORDER | LINEAR]`. Pure: no I/O.

A statement keeps its WHERE clause as text; `sql_predicates.parse_predicate` compiles it against the table's key.
"""

from __future__ import annotations

from dataclasses import dataclass

from recluster.core.curves import Curve
from recluster.core.sql_parser import Parser


@dataclass(frozen=True, slots=True)
class ReclusterStatement:
    table: str
    final: bool
    where: str | None
    limit: int | None
    if_exists: bool
    where_offset: int = 0


@dataclass(frozen=True, slots=True)
class ClusterByStatement:
    table: str
    columns: tuple[str, ...]
    if_exists: bool
    curve: Curve | None = None
    """`USING HILBERT | ZORDER | LINEAR`; None: the default for the column count."""


Statement = ReclusterStatement | ClusterByStatement


def parse_statement(text: str) -> Statement:
    """Parse one statement; OPTIMIZE TABLE t RECLUSTER is a FINAL recluster of the whole table."""
    parser = Parser(text)
    if parser.accept("OPTIMIZE"):
        parser.expect("TABLE")
        table = parser.table()
        parser.expect("RECLUSTER")
        parser.end()
        return ReclusterStatement(table, final=True, where=None, limit=None, if_exists=False)
    parser.expect("ALTER")
    parser.expect("TABLE")
    if_exists = False
    if parser.accept("IF"):
        parser.expect("EXISTS")
        if_exists = True
    table = parser.table()
    if parser.accept("CLUSTER"):
        parser.expect("BY")
        parser.expect("(")
        columns = [parser.identifier()]
        while parser.accept(","):
            columns.append(parser.identifier())
        parser.expect(")")
        curve = None
        if parser.accept("USING"):
            if parser.current.upper not in ("HILBERT", "ZORDER", "LINEAR"):
                raise parser.error("HILBERT, ZORDER or LINEAR after USING")
            curve = Curve(parser.take().text.lower())
        parser.end()
        return ClusterByStatement(table, tuple(columns), if_exists, curve)
    parser.expect("RECLUSTER")
    final = parser.accept("FINAL")
    where = None
    start = 0
    if parser.accept("WHERE"):
        start = parser.current.position
        depth = 0
        while parser.current.kind != "end" and not (depth == 0 and parser.current.upper in ("LIMIT", ";")):
            depth += {"(": 1, ")": -1}.get(parser.current.text, 0) if parser.current.kind == "op" else 0
            parser.index += 1
        where = text[start : parser.current.position].strip()
        if not where:
            raise parser.error("a condition after WHERE")
    limit = None
    if parser.accept("LIMIT"):
        token = parser.current
        if token.kind != "number" or not token.text.isdigit() or int(token.text) < 1:
            raise parser.error("a positive whole number after LIMIT")
        limit = int(parser.take().text)
    parser.end()
    return ReclusterStatement(table, final, where, limit, if_exists, where_offset=start if where else 0)
