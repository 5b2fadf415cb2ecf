"""The Delta `stats` of a file we write, and their exact JSON text (docs/guarantees.md, "Statistics").

A reader skips a file when no value between its min and max can satisfy the predicate, so each min must sort at
or below, and each max at or above, every value of the file, in each reader's order:
- decimals keep all their digits: `stats_text` writes them as JSON numbers (a double keeps 17 of DECIMAL(38,18)'s
  38, and Delta Spark skipped the file holding the value it rounded);
- floats as Delta Spark writes them: NaN and the infinities as the strings "NaN", "Infinity" and "-Infinity", a
  column holding NaN with max "NaN" (NaN sorts above +inf in Spark and DataFusion); a zero min is written -0.0 and
  a zero max 0.0, so readers that order -0.0 below 0.0 keep both zeros;
- timestamps at milliseconds, a min rounded down and a max up; strings cut to Delta's 32-character prefix, a max
  followed by a tie-breaker above whatever was cut. Key columns keep their exact values (`stat_value`);
- dates, integers and booleans as they are; binary and nested columns get none (Delta Spark writes none either).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from recluster.core.keys import DELTA_STRING_STATS_PREFIX

STRING_TIE_BREAKER = "\U0010ffff"
"""Appended to a truncated string max stat: above any suffix the real value may have (the highest code point)."""

DEFAULT_INDEXED_COLUMNS = 32

NOT_A_NUMBER, INFINITY = "NaN", "Infinity"
"""Delta Spark's JSON text for the floats JSON has no number for."""


def stats_columns(schema: pa.Schema, properties: Mapping[str, str]) -> list[str]:
    """Columns that get min/max/nullCount, honouring the Delta data-skipping properties."""
    explicit = properties.get("delta.dataSkippingStatsColumns")
    if explicit:
        wanted = [c.strip().strip("`") for c in explicit.split(",") if c.strip()]
        return [c for c in wanted if c in schema.names]
    count = int(properties.get("delta.dataSkippingNumIndexedCols", DEFAULT_INDEXED_COLUMNS))
    names = list(schema.names)
    return names if count < 0 else names[:count]


def stat_value(value: Any, arrow_type: pa.DataType, upper: bool, truncate: bool = True) -> Any:
    """A min (upper=False) or max (upper=True) in Delta's JSON form; None when it cannot be written.

    Strings and timestamps are truncated like Delta's (32 characters, milliseconds) except for key columns
    (truncate=False): files cut between keys that share a prefix or a millisecond would otherwise get
    overlapping ranges, and every later round would rewrite them again."""
    if value is None:
        return None
    if isinstance(value, float):
        return _float_stat(value, upper)
    if isinstance(value, dt.datetime):
        return _timestamp_stat(value, arrow_type.tz is not None, upper, truncate)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, str):
        return _string_stat(value, upper) if truncate else value
    if isinstance(value, bool | int | decimal.Decimal):
        return value  # a Decimal exactly: `stats_text` writes its digits
    return None  # binary (Delta collects no stats for it) and anything without a Delta stats form


def _float_stat(value: float, upper: bool) -> float | str:
    if math.isnan(value):
        return NOT_A_NUMBER
    if math.isinf(value):
        return INFINITY if value > 0 else f"-{INFINITY}"
    if value == 0:
        return 0.0 if upper else -0.0
    return value


def _timestamp_stat(value: dt.datetime, utc: bool, upper: bool, truncate: bool) -> str | None:
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    micros = value.microsecond % 1000 if truncate else 0
    try:
        if upper and micros:  # round a max up to whole milliseconds: never below the real max
            value += dt.timedelta(microseconds=1000 - micros)
        else:
            value -= dt.timedelta(microseconds=micros)
    except OverflowError:  # above 9999-12-31T23:59:59.999: no max to write
        return None
    text = value.isoformat(timespec="milliseconds" if truncate else "microseconds")
    return text + "Z" if utc else text


def _string_stat(value: str, upper: bool) -> str:
    if len(value) <= DELTA_STRING_STATS_PREFIX:
        return value
    if not upper:
        return value[:DELTA_STRING_STATS_PREFIX]
    end = DELTA_STRING_STATS_PREFIX  # the tie-breaker must follow a character below it: extend past its own kind
    while end < len(value) and value[end] == STRING_TIE_BREAKER:
        end += 1
    return value if end == len(value) else value[:end] + STRING_TIE_BREAKER


def _extremes(column: pa.ChunkedArray) -> tuple[Any, Any]:
    """The column's min and max; with NaN the max is NaN (Arrow's min_max leaves NaN out unless all are NaN)."""
    extremes = pc.min_max(column)
    low, high = extremes["min"].as_py(), extremes["max"].as_py()
    if pa.types.is_floating(column.type) and pc.any(pc.is_nan(column)).as_py():
        return low, math.nan
    return low, high


def delta_stats(table: pa.Table, columns: Sequence[str], key: Sequence[str] = ()) -> dict[str, Any]:
    """numRecords, minValues, maxValues and nullCount of one output file (exact strings for `key`)."""
    minimums: dict[str, Any] = {}
    maximums: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name in columns:
        column = table.column(name)
        if pa.types.is_nested(column.type):
            continue
        nulls[name] = column.null_count
        if column.null_count == len(column) or pa.types.is_binary(column.type):
            continue
        low, high = _extremes(column)
        exact = name in key
        low = stat_value(low, column.type, upper=False, truncate=not exact)
        high = stat_value(high, column.type, upper=True, truncate=not exact)
        if low is not None and high is not None:
            minimums[name], maximums[name] = low, high
    return {"numRecords": table.num_rows, "minValues": minimums, "maxValues": maximums, "nullCount": nulls}


def stats_text(stats: Mapping[str, Any]) -> str:
    """The `stats` JSON of an add action: compact, a Decimal as a JSON number with all its digits (Python's json
    writes a Decimal only as a string or through a float; Delta's form is the number)."""
    return _json_text(stats)


def _json_text(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{json.dumps(str(k))}:{_json_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(map(_json_text, value)) + "]"
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise ValueError(f"no JSON number for {value}")
        return format(value, "f")
    return json.dumps(value, allow_nan=False)


def parse_stats(text: str) -> dict[str, Any]:
    """`stats_text` read back to values it writes again digit for digit: a number with a fraction as a Decimal
    (a decimal column's exact value; a double's shortest text), one with an exponent as a float."""
    parsed: dict[str, Any] = json.loads(text, parse_float=_number)
    return parsed


def _number(text: str) -> float | decimal.Decimal:
    return float(text) if "e" in text or "E" in text else decimal.Decimal(text)
