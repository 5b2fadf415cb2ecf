"""The SQL front end: `ALTER TABLE t RECLUSTER [FINAL] [WHERE cond] [LIMIT n]`, `OPTIMIZE TABLE t RECLUSTER`,
`ALTER TABLE t CLUSTER BY (a, b) [USING HILBERT | ZORDER | LINEAR]`, and WHERE predicates evaluated on file stats.

A WHERE clause only chooses candidate files: a file is a candidate when its key range (or partition
values) *may* hold a matching row. It never filters rows out of a rewritten file.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from recluster.core.blocks import Block
from recluster.core.curves import Curve
from recluster.core.key_encoding import encode_value
from recluster.core.keys import DELTA_STRING_STATS_PREFIX, ClusterKey, KeyColumn, KeyType

TRUNCATED_STRING_MAX = "\U0010ffff"
TIMESTAMP_STATS_SLACK = dt.timedelta(milliseconds=1)
"""Delta truncates timestamp stats to milliseconds: a max stat can be up to 1 ms below the real max."""


class SqlError(ValueError):
    """A statement that does not parse; the message names the column and the offending token."""


_TOKEN = re.compile(
    r"""\s*(?:
    (?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
    |(?P<string>'(?:[^']|'')*')
    |(?P<dquoted>"(?:[^"]|"")*")
    |(?P<quoted>`(?:[^`]|``)*`)
    |(?P<op><=|>=|<>|!=|=|<|>|\(|\)|,|\.|;)
    |(?P<word>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)


@dataclass(frozen=True, slots=True)
class Token:
    kind: str
    text: str
    position: int

    @property
    def upper(self) -> str:
        return self.text.upper() if self.kind == "word" else self.text


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    position = 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            start = len(text) - len(text[position:].lstrip())
            raise SqlError(f"syntax error at column {start + 1}: unexpected character {text[start]!r}")
        kind = match.lastgroup or "op"
        tokens.append(Token(kind, match.group(kind), match.start(kind)))
        position = match.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


class _Parser:
    def __init__(self, text: str, offset: int = 0) -> None:
        self.tokens = [Token(t.kind, t.text, t.position + offset) for t in tokenize(text)]
        self.index = 0

    @property
    def current(self) -> Token:
        return self.tokens[self.index]

    def error(self, expected: str) -> SqlError:
        token = self.current
        found = "end of statement" if token.kind == "end" else repr(token.text)
        return SqlError(f"syntax error at column {token.position + 1}: expected {expected}, found {found}")

    def accept(self, *words: str) -> bool:
        if self.current.upper in words and self.current.kind in ("word", "op"):
            self.index += 1
            return True
        return False

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            raise self.error(" or ".join(words))

    def take(self) -> Token:
        token = self.current
        self.index += 1
        return token

    def identifier(self, what: str = "a column name") -> str:
        token = self.current
        if token.kind == "word":
            return self.take().text
        if token.kind in ("quoted", "dquoted"):
            return _unquote(self.take().text)
        raise self.error(what)

    def table(self) -> str:
        token = self.current
        if token.kind == "word" and token.upper == "DELTA" and self.tokens[self.index + 1].text == ".":
            self.index += 2
            token = self.current
            if token.kind != "quoted":
                raise self.error("a `quoted` table location after delta.")
            return _unquote(self.take().text)
        if token.kind in ("string", "quoted", "dquoted"):
            return _unquote(self.take().text)
        raise self.error("a table (delta.`URI` or a quoted path)")

    def end(self) -> None:
        self.accept(";")
        if self.current.kind != "end":
            raise self.error("end of statement")


def _unquote(text: str) -> str:
    quote = text[0]
    return text[1:-1].replace(quote * 2, quote)


# --- predicates on file stats -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Predicate:
    """A WHERE clause compiled to `may_match(block)`: False only when no row of the file can match."""

    text: str
    may_match: Callable[[Block], bool]


def _literal(token: Token, parser: _Parser) -> object:
    if token.kind == "number":
        return decimal.Decimal(token.text) if "." in token.text or "e" in token.text.lower() else int(token.text)
    if token.kind == "string":
        return _unquote(token.text)
    if token.kind == "word" and token.upper in ("TRUE", "FALSE"):
        return token.upper == "TRUE"
    if token.kind == "word" and token.upper == "NULL":
        return None
    if token.kind == "word" and token.upper in ("DATE", "TIMESTAMP") and parser.current.kind == "string":
        return _unquote(parser.take().text)
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


class _PredicateParser(_Parser):
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


# --- statements ---------------------------------------------------------------------------------------


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
    parser = _Parser(text)
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
