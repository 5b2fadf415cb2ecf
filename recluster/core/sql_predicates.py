"""WHERE predicates evaluated on file stats: `parse_predicate` compiles a clause on key and partition columns to
`may_match(block)`. Pure: no I/O.

A WHERE clause only chooses candidate files: a file is a candidate when its key range (or partition
values) *may* hold a matching row. It never filters rows out of a rewritten file.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from recluster.core.blocks import Block
from recluster.core.key_encoding import encode_value
from recluster.core.keys import DELTA_STRING_STATS_PREFIX, ClusterKey, KeyColumn, KeyType
from recluster.core.sql_parser import Parser, SqlError, Token, unquote

TRUNCATED_STRING_MAX = "\U0010ffff"
TIMESTAMP_STATS_SLACK = dt.timedelta(milliseconds=1)
"""Delta truncates timestamp stats to milliseconds: a max stat can be up to 1 ms below the real max."""


@dataclass(frozen=True, slots=True)
class Predicate:
    """A WHERE clause compiled to `may_match(block)`: False only when no row of the file can match."""

    text: str
    may_match: Callable[[Block], bool]


def _literal(token: Token, parser: Parser) -> object:
    if token.kind == "number":
        return decimal.Decimal(token.text) if "." in token.text or "e" in token.text.lower() else int(token.text)
    if token.kind == "string":
        return unquote(token.text)
    if token.kind == "word" and token.upper in ("TRUE", "FALSE"):
        return token.upper == "TRUE"
    if token.kind == "word" and token.upper == "NULL":
        return None
    if token.kind == "word" and token.upper in ("DATE", "TIMESTAMP") and parser.current.kind == "string":
        return unquote(parser.take().text)
    parser.index -= 1
    raise parser.error("a literal value")


def _coerce(value: object, column: KeyColumn, position: int) -> object:
    """A literal as the key column's type, so it encodes (and compares) like the column's stats."""
    try:
        match column.type:
            case KeyType.INTEGER:
                return int(str(value))
            case KeyType.FLOAT:
                return float(str(value))
            case KeyType.DECIMAL:
                return decimal.Decimal(str(value))
            case KeyType.STRING:
                return str(value)
            case KeyType.BINARY:
                return str(value).encode("utf-8")
            case KeyType.BOOLEAN:
                return value if isinstance(value, bool) else str(value).lower() == "true"
            case KeyType.DATE:
                return dt.date.fromisoformat(str(value))
            case KeyType.TIMESTAMP:
                parsed = dt.datetime.fromisoformat(str(value))
                return parsed.replace(tzinfo=None) - (parsed.utcoffset() or dt.timedelta())
    except (ValueError, decimal.InvalidOperation):
        pass
    raise SqlError(f"syntax error at column {position + 1}: {value!r} is not a valid {column.type} for {column.name!r}")


def _naive(value: object) -> object:
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.replace(tzinfo=None) - (value.utcoffset() or dt.timedelta())
    return value


def _widened_max(value: object, column: KeyColumn) -> object:
    """Undo Delta's lossy max stats: truncated timestamps and 32-character string prefixes."""
    if isinstance(value, dt.datetime):
        return _naive(value) + TIMESTAMP_STATS_SLACK  # type: ignore[operator]
    if column.type is KeyType.STRING and isinstance(value, str) and len(value) >= DELTA_STRING_STATS_PREFIX:
        return value + TRUNCATED_STRING_MAX
    return value


_Test = Callable[[Block], bool]


def _comparison(column_index: int, column: KeyColumn, op: str, literal: object) -> _Test:
    """may_match for `column op literal` on a block's [min, max] of that column (NULL min = has NULLs)."""
    target = encode_value(literal, column)

    def bounds(block: Block) -> tuple[bytes, bytes | None]:
        assert block.min_values is not None and block.max_values is not None
        low = block.min_values[column_index]
        high = block.max_values[column_index]
        # A NULL min means the file has NULLs: its lowest non-NULL value is unknown, so assume none.
        low_key = encode_value(None, column) if low is None else encode_value(_naive(low), column)
        high_key = None if high is None else encode_value(_widened_max(high, column), column)
        return low_key, high_key

    def test(block: Block) -> bool:
        if not block.clustered or block.min_values is None:
            return True
        low, high = bounds(block)
        if high is None:  # every value NULL: no comparison with a literal is true
            return False
        return {
            "=": low <= target <= high,
            "<": low < target,
            "<=": low <= target,
            ">": high > target,
            ">=": high >= target,
            "!=": not (low == high == target),
        }[op]

    return test


def _null_test(column_index: int, negated: bool) -> _Test:
    def test(block: Block) -> bool:
        if block.min_values is None or block.max_values is None:
            return True
        has_nulls = block.min_values[column_index] is None
        has_values = block.max_values[column_index] is not None
        return has_values if negated else has_nulls

    return test


def _partition_test(name: str, op: str, literal: object) -> _Test:
    text = None if literal is None else str(literal).lower() if isinstance(literal, bool) else str(literal)

    def test(block: Block) -> bool:
        value = dict(block.partition).get(name)
        if value is None or text is None:
            return False
        try:
            left: object = decimal.Decimal(value)
            right: object = decimal.Decimal(text)
        except decimal.InvalidOperation:
            left, right = value, text
        outcome: bool = {
            "=": left == right,
            "!=": left != right,
            "<": left < right,  # type: ignore[operator]
            "<=": left <= right,  # type: ignore[operator]
            ">": left > right,  # type: ignore[operator]
            ">=": left >= right,  # type: ignore[operator]
        }[op]
        return outcome

    return test


class _PredicateParser(Parser):
    def __init__(self, text: str, key: ClusterKey, partition_columns: Sequence[str], offset: int) -> None:
        super().__init__(text, offset)
        self.key = key
        self.partitions = list(partition_columns)

    def expression(self) -> _Test:
        left = self.conjunction()
        while self.accept("OR"):
            right = self.conjunction()
            left = (lambda a, b: lambda block: a(block) or b(block))(left, right)
        return left

    def conjunction(self) -> _Test:
        left = self.negation()
        while self.accept("AND"):
            right = self.negation()
            left = (lambda a, b: lambda block: a(block) and b(block))(left, right)
        return left

    def negation(self) -> _Test:
        if self.accept("NOT"):
            self.negation()
            return lambda block: True  # stats cannot refute a negation safely: keep every file
        if self.accept("("):
            inner = self.expression()
            self.expect(")")
            return inner
        return self.comparison()

    def comparison(self) -> _Test:
        position = self.current.position
        name = self.identifier()
        if name in self.partitions:
            return self._partition_comparison(name)
        index = next((i for i, c in enumerate(self.key.columns) if c.name.lower() == name.lower()), None)
        if index is None:
            allowed = ", ".join([*self.key.names, *self.partitions])
            raise SqlError(
                f"syntax error at column {position + 1}: WHERE may use key or partition columns "
                f"({allowed}), not {name!r}"
            )
        column = self.key.columns[index]
        if self.accept("IS"):
            negated = self.accept("NOT")
            self.expect("NULL")
            return _null_test(index, negated)
        if self.accept("BETWEEN"):
            low = _coerce(_literal(self.take(), self), column, position)
            self.expect("AND")
            high = _coerce(_literal(self.take(), self), column, position)
            above, below = _comparison(index, column, ">=", low), _comparison(index, column, "<=", high)
            return lambda block: above(block) and below(block)
        if self.accept("IN"):
            self.expect("(")
            tests = [_comparison(index, column, "=", _coerce(_literal(self.take(), self), column, position))]
            while self.accept(","):
                tests.append(_comparison(index, column, "=", _coerce(_literal(self.take(), self), column, position)))
            self.expect(")")
            return lambda block: any(test(block) for test in tests)
        op = self._operator()
        value = _literal(self.take(), self)
        if value is None:
            return lambda block: False  # comparing with NULL is never true
        return _comparison(index, column, op, _coerce(value, column, position))

    def _operator(self) -> str:
        token = self.current
        if token.kind == "op" and token.text in ("=", "<", "<=", ">", ">=", "<>", "!="):
            self.index += 1
            return "!=" if token.text == "<>" else token.text
        raise self.error("a comparison operator (=, <, <=, >, >=, <>, IS, IN, BETWEEN)")

    def _partition_comparison(self, name: str) -> _Test:
        if self.accept("IS"):
            negated = self.accept("NOT")
            self.expect("NULL")
            return lambda block: (dict(block.partition).get(name) is None) != negated
        op = self._operator()
        return _partition_test(name, op, _literal(self.take(), self))


def parse_predicate(text: str, key: ClusterKey, partition_columns: Sequence[str], offset: int = 0) -> Predicate:
    """Compile a WHERE clause; `offset` is where it starts in its statement, so errors point right."""
    parser = _PredicateParser(text, key, partition_columns, offset)
    test = parser.expression()
    parser.end()
    return Predicate(text, test)
