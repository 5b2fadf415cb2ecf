"""The predicates of a logged scan, from the text Spark's plan gives them: `PushedFilters` (data source filters,
`[IsNotNull(a), EqualTo(a,0), In(b, [1,2,3])]`) and `PartitionFilters` (Catalyst expressions, `[(p#12 = 3)]`).
Pure.

Spark writes literals without quotes (`EqualTo(s,17)` for `s = '17'`), so a literal stays text here and is
converted by whoever knows the column's type. Only conjuncts on one column are kept; an OR across columns, a NOT and
anything unrecognised prune nothing in this model and are left out (docs/advise.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class PredicateShape(StrEnum):
    EQUALITY = "equality"
    RANGE = "range"
    IN = "in"
    PREFIX = "prefix"


@dataclass(frozen=True, slots=True)
class Predicate:
    """A conjunct on one column: `column = value`, `column IN values`, a (half-)open range, or a string prefix."""

    column: str
    shape: PredicateShape
    values: tuple[str, ...] = ()
    """EQUALITY, IN: the values; PREFIX: the prefix."""
    low: str | None = None
    high: str | None = None
    """RANGE: the bounds (None: open); inclusive or not does not matter at file granularity."""

    def __str__(self) -> str:
        match self.shape:
            case PredicateShape.EQUALITY:
                return f"{self.column} = {self.values[0]}"
            case PredicateShape.IN:
                return f"{self.column} IN ({', '.join(self.values)})"
            case PredicateShape.PREFIX:
                return f"{self.column} LIKE '{self.values[0]}%'"
        return " AND ".join(
            part
            for part in (
                f"{self.column} >= {self.low}" if self.low is not None else "",
                f"{self.column} <= {self.high}" if self.high is not None else "",
            )
            if part
        )


_LOWER = ("GreaterThan", "GreaterThanOrEqual")
_UPPER = ("LessThan", "LessThanOrEqual")


def split_arguments(text: str) -> list[str]:
    """Top-level comma-separated parts of `text` (brackets and parentheses nest)."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:index].strip())
            start = index + 1
    last = text[start:].strip()
    return [*parts, last] if last or parts else []


def _call(text: str) -> tuple[str, list[str]] | None:
    """`Name(arg, ...)` as its name and arguments, or None."""
    match = re.fullmatch(r"(\w+)\((.*)\)", text.strip(), re.DOTALL)
    return (match.group(1), split_arguments(match.group(2))) if match else None


def _column(text: str) -> str:
    return text.strip().strip("`")


def _source_filter(text: str) -> list[Predicate]:
    """The predicates of one data source filter (`And` of them flattened; `Or` of equalities on one column as IN)."""
    call = _call(text)
    if call is None:
        return []
    name, arguments = call
    if name == "And":
        return [p for argument in arguments for p in _source_filter(argument)]
    if name == "Or":
        sides = [_source_filter(argument) for argument in arguments]
        if all(len(side) == 1 and side[0].shape in (PredicateShape.EQUALITY, PredicateShape.IN) for side in sides):
            columns = {side[0].column for side in sides}
            if len(columns) == 1:
                values = tuple(v for side in sides for v in side[0].values)
                return [Predicate(columns.pop(), PredicateShape.IN, values)]
        return []
    if len(arguments) < 2:
        return []  # IsNotNull, IsNull, Not(...) of one argument: no pruning in this model
    column, value = _column(arguments[0]), ",".join(arguments[1:]).strip()
    if name in ("EqualTo", "EqualNullSafe"):
        return [Predicate(column, PredicateShape.EQUALITY, (value,))]
    if name == "In":
        listed = value[1:-1] if value.startswith("[") and value.endswith("]") else value
        return [Predicate(column, PredicateShape.IN, tuple(split_arguments(listed)))]
    if name in _LOWER:
        return [Predicate(column, PredicateShape.RANGE, low=value)]
    if name in _UPPER:
        return [Predicate(column, PredicateShape.RANGE, high=value)]
    if name == "StringStartsWith":
        return [Predicate(column, PredicateShape.PREFIX, (value,))]
    return []


_COMPARISON = re.compile(r"\(?\s*`?([^`#\s()]+)`?#\d+L?\s*(=|<=>|>=|<=|>|<)\s*(.+?)\s*\)?$")
_IN_LIST = re.compile(r"`?([^`#\s()]+)`?#\d+L?\s+IN\s+\((.*)\)$")
_FLIPPED = {">": "<", ">=": "<=", "<": ">", "<=": ">="}


def _catalyst_filter(text: str) -> list[Predicate]:
    """One Catalyst conjunct as Spark prints it (`(p#12 = 3)`, `p#12 IN (1,2)`); others are left out."""
    text = text.strip()
    found = _IN_LIST.fullmatch(text)
    if found:
        return [Predicate(found.group(1), PredicateShape.IN, tuple(split_arguments(found.group(2))))]
    found = _COMPARISON.fullmatch(text)
    if not found:
        return []
    column, operator, value = found.groups()
    if operator in ("=", "<=>"):
        return [Predicate(column, PredicateShape.EQUALITY, (value,))]
    if operator in (">", ">="):
        return [Predicate(column, PredicateShape.RANGE, low=value)]
    return [Predicate(column, PredicateShape.RANGE, high=value)]


def _listed(text: str) -> list[str]:
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return split_arguments(text)


def merged(predicates: list[Predicate]) -> tuple[Predicate, ...]:
    """One predicate per column and shape: a lower and an upper bound on one column become one range."""
    result: dict[tuple[str, PredicateShape], Predicate] = {}
    for predicate in predicates:
        key = (predicate.column, predicate.shape)
        seen = result.get(key)
        if seen is not None and predicate.shape is PredicateShape.RANGE:
            predicate = Predicate(
                predicate.column,
                PredicateShape.RANGE,
                low=predicate.low if predicate.low is not None else seen.low,
                high=predicate.high if predicate.high is not None else seen.high,
            )
        result[key] = predicate if seen is None or predicate.shape is PredicateShape.RANGE else seen
    return tuple(result.values())


def scan_predicates(pushed: str, partition: str = "") -> tuple[Predicate, ...]:
    """The predicates of a scan node, from its `PushedFilters` and `PartitionFilters` metadata."""
    found = [p for text in _listed(pushed) for p in _source_filter(text)]
    found += [p for text in _listed(partition) for p in _catalyst_filter(text)]
    return merged(found)
