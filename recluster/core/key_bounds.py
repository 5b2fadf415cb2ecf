"""Key values in the form a curve key's range bounds compare (`comparable`), the bounds as JSON, and whether a
table's files drifted outside them. Pure: no Spark, no Delta, no I/O.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Sequence
from typing import Any

from recluster.core.blocks import Block
from recluster.core.curves import DRIFT_SHARE, RangeBounds
from recluster.core.key_encoding import epoch_days, timestamp_micros
from recluster.core.keys import ClusterKey, KeyColumn, KeyType


def bound_to_json(value: Any, column: KeyColumn) -> Any:
    """A bound as JSON: numbers and strings as they are, dates ISO, timestamps as microseconds, decimals as text."""
    match column.type:
        case KeyType.DATE:
            return value.isoformat()
        case KeyType.TIMESTAMP:
            return comparable(value, column)
        case KeyType.DECIMAL:
            return str(value)
        case KeyType.BINARY:
            return bytes(value).hex()
    return value


def comparable(value: Any, column: KeyColumn) -> Any:
    """A value (Python, or a bound read back from JSON) in the form ranks compare: dates as days, timestamps as
    microseconds, decimals as floats (monotone), binary as bytes, booleans as 0/1."""
    match column.type:
        case KeyType.DATE:
            day = dt.date.fromisoformat(value) if isinstance(value, str) else value
            return epoch_days(day)
        case KeyType.TIMESTAMP:
            return value if isinstance(value, int) else timestamp_micros(value)
        case KeyType.DECIMAL:
            return float(decimal.Decimal(value))
        case KeyType.BINARY:
            return bytes.fromhex(value) if isinstance(value, str) else bytes(value)
        case KeyType.BOOLEAN:
            return int(bool(value))
    return value


_COMPARABLE_AS_IS = (KeyType.INTEGER, KeyType.FLOAT, KeyType.STRING)


def comparable_values(values: list[Any], column: KeyColumn) -> list[Any]:
    """`comparable` of each value (the same list where the column's values already compare as they are)."""
    return values if column.type in _COMPARABLE_AS_IS else [comparable(v, column) for v in values]


def comparable_bounds(bounds: RangeBounds, columns: Sequence[KeyColumn]) -> list[list[Any]]:
    """Per column, its bounds in `comparable` form (what `curves.column_ranks` compares values with)."""
    return [[comparable(v, c) for v in b] for b, c in zip(bounds.bounds, columns, strict=True)]


def bounds_drifted(blocks: Sequence[Block], key: ClusterKey) -> bool:
    """Whether a curve key needs new range bounds: it has none, or more than DRIFT_SHARE of the live rows sit in
    files whose range of some key column lies entirely outside that column's bounds (stats tell, no data read)."""
    if key.bounds is None:
        return True
    total = sum(b.live_rows for b in blocks)
    columns = comparable_bounds(key.bounds, key.columns)
    for index, (column, bounds) in enumerate(zip(key.columns, columns, strict=True)):
        if not bounds or not total:
            continue
        outside = 0
        for block in blocks:
            low, high = block.column_range(index)
            if low is None or high is None:
                continue
            try:
                if comparable(low, column) > bounds[-1] or comparable(high, column) < bounds[0]:
                    outside += block.live_rows
            except TypeError:  # a stat of another type than the column's (an older schema): no verdict
                continue
        if outside > DRIFT_SHARE * total:
            return True
    return False
