"""A key tuple as bytes whose plain byte order is the tuple order, one value at a time or a column at once (numpy).
Pure: no Spark, no Delta, no I/O.

A key range is the tuple of per-column minimums and the tuple of per-column maximums, compared
lexicographically. To compare tuples of any Delta primitive type quickly and uniformly, each tuple is encoded to
bytes whose plain byte order is the tuple order (NULL first, NaN after +inf, as Spark sorts ascending).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from recluster.core.keys import KeyColumn, KeyType

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


def timestamp_micros(value: dt.datetime) -> int:
    """Microseconds since the epoch; a timestamp without a zone counts as UTC."""
    delta = value - (_EPOCH if value.tzinfo is None else _EPOCH_UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def epoch_days(day: dt.date) -> int:
    """Days since 1970-01-01."""
    return (day - _EPOCH_DATE).days


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
            return VALUE_MARKER + _encode_int(epoch_days(value))
        case KeyType.TIMESTAMP:
            micros = value if isinstance(value, int) else timestamp_micros(value)
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
