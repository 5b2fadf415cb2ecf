"""Cluster keys and their order-preserving encoding. Pure: no Spark, no Delta, no I/O.

A key range is the tuple of per-column minimums and the tuple of per-column maximums, compared
lexicographically. To compare tuples of any Delta primitive type quickly and uniformly, each tuple is encoded to
bytes whose plain byte order is the tuple order (NULL first, NaN after +inf, as Spark sorts ascending).
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from recluster.core.blocks import Block
from recluster.core.curves import DRIFT_SHARE, RANK_LAYOUT, Curve, RangeBounds
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


_NULL = b"\x00"


VALUE_MARKER = b"\x01"
"""Starts every non-NULL value's code (NULL is `_NULL` alone, so it sorts first)."""

ONE_NUMBER_KEY_BYTES = len(VALUE_MARKER) + 8
"""The length of a key of one 8-byte number (integer, date, timestamp, float), unpartitioned."""


_EPOCH = dt.datetime(1970, 1, 1)


_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


_EPOCH_DATE = dt.date(1970, 1, 1)


_SIGN64 = 1 << 63


_MASK64 = (1 << 64) - 1


_CANONICAL_NAN = 0x7FF8000000000000


_DECIMAL_CONTEXT = decimal.Context(prec=80)  # Delta decimals have up to 38 digits; the default 28 would round


def _encode_int(value: int, width: int = 8) -> bytes:
    bias = 1 << (8 * width - 1)
    return (value + bias).to_bytes(width, "big")


def _encode_float(value: float) -> bytes:
    if math.isnan(value):
        bits = _CANONICAL_NAN  # every NaN equal, above +inf
    else:
        (bits,) = struct.unpack(">Q", struct.pack(">d", value + 0.0))  # + 0.0 folds -0.0 into 0.0
    bits = (~bits & _MASK64) if bits & _SIGN64 else bits | _SIGN64
    return bits.to_bytes(8, "big")


def _encode_bytes(value: bytes) -> bytes:
    # Escape 0x00 so that a terminator 0x00 0x00 sorts a prefix before its extensions.
    return value.replace(b"\x00", b"\x00\xff") + b"\x00\x00"


def _micros(value: dt.datetime) -> int:
    delta = value - (_EPOCH if value.tzinfo is None else _EPOCH_UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def encode_value(value: Any, column: KeyColumn) -> bytes:
    """Encode one key component; byte order equals Spark's ascending order with NULLs first."""
    if value is None:
        return _NULL
    match column.type:
        case KeyType.INTEGER:
            return VALUE_MARKER + _encode_int(int(value))
        case KeyType.FLOAT:
            return VALUE_MARKER + _encode_float(float(value))
        case KeyType.DECIMAL:
            unscaled = int(decimal.Decimal(value).scaleb(column.scale, _DECIMAL_CONTEXT).to_integral_value())
            return VALUE_MARKER + _encode_int(unscaled, 16)
        case KeyType.STRING:
            return VALUE_MARKER + _encode_bytes(str(value).encode("utf-8"))
        case KeyType.BINARY:
            return VALUE_MARKER + _encode_bytes(bytes(value))
        case KeyType.BOOLEAN:
            return VALUE_MARKER + (b"\x01" if value else b"\x00")
        case KeyType.DATE:
            return VALUE_MARKER + _encode_int((value - _EPOCH_DATE).days)
        case KeyType.TIMESTAMP:
            micros = value if isinstance(value, int) else _micros(value)
            return VALUE_MARKER + _encode_int(micros)
    raise ValueError(f"unsupported key type {column.type!r}")  # pragma: no cover - enum is exhaustive


def encode_key(values: Sequence[Any], columns: Sequence[KeyColumn], prefix: bytes = b"") -> bytes:
    """Encode a key tuple; `prefix` (the encoded partition) keeps blocks of different partitions apart."""
    return prefix + b"".join(encode_value(v, c) for v, c in zip(values, columns, strict=True))


_TIME_UNIT_MICROS = {"s": 1_000_000, "ms": 1_000, "us": 1}


def arrow_numbers(values: pa.Array | pa.ChunkedArray, fill: int | float) -> npt.NDArray[Any]:
    """An Arrow column as one numpy array of our own (NULLs as `fill`): one copy, writable, changed in place."""
    if values.null_count:
        values = values.fill_null(fill)
    array: npt.NDArray[Any] = values.to_numpy(zero_copy_only=False)
    return array if array.flags.writeable else array.copy()  # (a view of Arrow's memory is read-only)


def signed_words(numbers: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
    """int64 numbers as the unsigned words their keys order as (the sign bit flipped), in place."""
    words: npt.NDArray[np.uint64] = numbers.view(np.uint64)
    words ^= np.uint64(_SIGN64)
    return words


def number_words(values: pa.Array, column: KeyColumn) -> npt.NDArray[np.uint64] | None:
    """What `encode_value` writes after the marker for every value at once, as the native unsigned 64-bit words
    that order as those 8 bytes (a NULL row's word is garbage): integers, dates, timestamps (s/ms/us) and floats.
    None: no 8-byte vectorized encoding. Built in place (a million keys: no temporaries beyond the array)."""
    kind = values.type
    match column.type:
        case KeyType.INTEGER | KeyType.DATE | KeyType.TIMESTAMP:
            if column.type is KeyType.INTEGER and (not pa.types.is_integer(kind) or pa.types.is_uint64(kind)):
                return None  # (unsigned 64-bit values may exceed int64: Python ints only)
            if column.type is KeyType.DATE and not pa.types.is_date32(kind):
                return None
            if column.type is KeyType.TIMESTAMP and getattr(kind, "unit", None) not in _TIME_UNIT_MICROS:
                return None
            if column.type is KeyType.DATE:
                values = values.cast(pa.int32())
            numbers = arrow_numbers(values.cast(pa.int64()), 0).astype(np.int64, copy=False)
            if column.type is KeyType.TIMESTAMP and _TIME_UNIT_MICROS[kind.unit] != 1:
                numbers *= _TIME_UNIT_MICROS[kind.unit]
            return signed_words(numbers)
        case KeyType.FLOAT if pa.types.is_floating(kind):
            floats = arrow_numbers(values.cast(pa.float64()), 0.0).astype(np.float64, copy=False)
            floats += 0.0  # -0.0 -> 0.0
            nan = np.isnan(floats)
            bits: npt.NDArray[np.uint64] = floats.view(np.uint64)
            bits[nan] = np.uint64(_CANONICAL_NAN)
            negative = (bits & np.uint64(_SIGN64)) != 0
            np.invert(bits, out=bits, where=negative)
            np.bitwise_or(bits, np.uint64(_SIGN64), out=bits, where=~negative)
            return bits
    return None


def _value_codes(values: pa.Array, column: KeyColumn) -> npt.NDArray[np.uint8] | None:
    """What `encode_value` writes after the marker, for every value at once (rows x bytes; a null row's bytes
    are garbage): integers, dates, timestamps (s/ms/us), floats and booleans. None: no vectorized path."""
    if column.type is KeyType.BOOLEAN and pa.types.is_boolean(values.type):
        flags: npt.NDArray[np.bool_] = values.fill_null(False).to_numpy(zero_copy_only=False)
        return flags.astype(np.uint8).reshape(-1, 1)
    words = number_words(values, column)
    if words is None:
        return None
    codes: npt.NDArray[np.uint8] = words.astype(">u8").view(np.uint8).reshape(-1, 8)
    return codes


def encode_keys(
    columns_values: Sequence[pa.Array], columns: Sequence[KeyColumn], prefixes: Sequence[bytes] | None = None
) -> list[bytes] | None:
    """`encode_key` of every row of per-column value arrays at once (a row's key: `prefixes[row]` then its
    values); None when a column's type has no vectorized path (strings, binary, decimals): encode per row."""
    count = len(columns_values[0]) if columns_values else len(prefixes or ())
    pieces: list[npt.NDArray[np.uint8]] = []
    nulls: list[npt.NDArray[np.bool_]] = []
    for values, column in zip(columns_values, columns, strict=True):
        codes = _value_codes(values, column)
        if codes is None:
            return None
        pieces.append(np.hstack([np.full((count, 1), VALUE_MARKER[0], dtype=np.uint8), codes]))
        nulls.append(pc.is_null(values).to_numpy(zero_copy_only=False))
    if not any(n.any() for n in nulls):
        blob = np.hstack(pieces).tobytes() if pieces else b""
        width = len(blob) // count if count else 0
        keys = [blob[start : start + width] for start in range(0, count * width, width)] if width else [b""] * count
        return keys if prefixes is None else [p + k for p, k in zip(prefixes, keys, strict=True)]
    parts = []
    for piece, null in zip(pieces, nulls, strict=True):
        blob, width = piece.tobytes(), piece.shape[1]
        parts.append([_NULL if null[i] else blob[i * width : (i + 1) * width] for i in range(count)])
    starts = prefixes or [b""] * count
    return [start + b"".join(row) for start, row in zip(starts, zip(*parts, strict=True), strict=True)]


def encode_partition(partition: Sequence[tuple[str, str | None]]) -> bytes:
    """Partition values as a key prefix: files of two partitions never overlap."""
    return b"".join(_NULL if v is None else VALUE_MARKER + _encode_bytes(v.encode("utf-8")) for _, v in partition)


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
            return (day - _EPOCH_DATE).days
        case KeyType.TIMESTAMP:
            return value if isinstance(value, int) else _micros(value)
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
