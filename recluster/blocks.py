"""The Block model, order-preserving key encoding and the names of the files recluster writes.

Pure: no Spark, no Delta, no I/O. A block is one data file of a snapshot; its key range is the tuple of
per-column minimums and the tuple of per-column maximums of the cluster key, compared lexicographically.
To compare tuples of any Delta primitive type quickly and uniformly, each tuple is encoded to bytes whose
plain byte order is the tuple order (NULL first, NaN after +inf, as Spark sorts ascending).
"""

from __future__ import annotations

import builtins
import datetime as dt
import decimal
import hashlib
import math
import re
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from recluster.deletion_vectors import DeletionVector

LEVEL_APPENDED = 0
LEVEL_CONSTANT = -1
"""Constant files (min == max) with at least the target row count: final, never merged again."""

MAX_LEVEL = 32
"""Levels above this are clamped, to avoid unbounded level growth (as Databend's MAX_RECLUSTER_LEVEL)."""


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


_NULL = b"\x00"
_VALUE = b"\x01"
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
            return _VALUE + _encode_int(int(value))
        case KeyType.FLOAT:
            return _VALUE + _encode_float(float(value))
        case KeyType.DECIMAL:
            unscaled = int(decimal.Decimal(value).scaleb(column.scale, _DECIMAL_CONTEXT).to_integral_value())
            return _VALUE + _encode_int(unscaled, 16)
        case KeyType.STRING:
            return _VALUE + _encode_bytes(str(value).encode("utf-8"))
        case KeyType.BINARY:
            return _VALUE + _encode_bytes(bytes(value))
        case KeyType.BOOLEAN:
            return _VALUE + (b"\x01" if value else b"\x00")
        case KeyType.DATE:
            return _VALUE + _encode_int((value - _EPOCH_DATE).days)
        case KeyType.TIMESTAMP:
            micros = value if isinstance(value, int) else _micros(value)
            return _VALUE + _encode_int(micros)
    raise ValueError(f"unsupported key type {column.type!r}")  # pragma: no cover - enum is exhaustive


def encode_key(values: Sequence[Any], columns: Sequence[KeyColumn], prefix: bytes = b"") -> bytes:
    """Encode a key tuple; `prefix` (the encoded partition) keeps blocks of different partitions apart."""
    return prefix + b"".join(encode_value(v, c) for v, c in zip(values, columns, strict=True))


def encode_partition(partition: Sequence[tuple[str, str | None]]) -> bytes:
    """Partition values as a key prefix: files of two partitions never overlap."""
    return b"".join(_NULL if v is None else _VALUE + _encode_bytes(v.encode("utf-8")) for _, v in partition)


Partition = tuple[tuple[str, str | None], ...]


@dataclass(frozen=True, slots=True)
class Block:
    """One data file of a snapshot, as metrics and selection see it.

    `min_key`/`max_key` are `encode_key` of the per-column minimum and maximum tuples (with the partition
    prefix); both are None when some key column has no usable stats: such a block is *unclustered*,
    excluded from the depth figures and always a merge candidate, never dropped.
    """

    path: str
    rows: int
    bytes: int
    min_key: builtins.bytes | None
    max_key: builtins.bytes | None
    min_values: tuple[Any, ...] | None = None
    max_values: tuple[Any, ...] | None = None
    level: int = LEVEL_APPENDED
    partition: Partition = ()
    key_fingerprint: str | None = None
    modified_ms: int = 0
    """The add action's modificationTime (ms): the age of an appended file for the `absorb` policy."""
    deletion_vector: DeletionVector | None = None
    """The file's deletion vector in the log: `rows` counts the rows it hides, `live_rows` does not."""

    @property
    def has_deletion_vector(self) -> bool:
        return self.deletion_vector is not None

    @property
    def deleted_rows(self) -> int:
        return 0 if self.deletion_vector is None else self.deletion_vector.cardinality

    @property
    def live_rows(self) -> int:
        return self.rows - self.deleted_rows

    @property
    def clustered(self) -> bool:
        return self.min_key is not None and self.max_key is not None

    @property
    def constant(self) -> bool:
        return self.clustered and self.min_key == self.max_key


def key_fingerprint(columns: Sequence[str], mode: str = "lexicographic") -> str:
    """Short, stable hash of the cluster key (column list and ordering mode), written into file names."""
    text = f"{mode}:" + ",".join(c.lower() for c in columns)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]


_FILE_NAME = re.compile(
    r"(?:^|/)part-L(?P<level>-1|\d{2})-k(?P<fingerprint>[0-9a-f]{8})-r(?P<run>[0-9a-f]{12})-"
    r"(?:h(?P<horizon>[0-9a-f]{12})-)?(?P<uuid>[0-9a-f]{32})\.parquet$"
)


@dataclass(frozen=True, slots=True)
class WrittenFileName:
    """What the name of a file recluster wrote says: level, key fingerprint and the run that wrote it."""

    level: int
    fingerprint: str
    run_id: str
    horizon_ms: int | None = None
    """Written by the `absorb` policy: run_id is the run's age (ms, hex) and this the age of the newest run
    the absorb takes in, so a sliced absorb can resume from the log alone."""


def data_file_name(level: int, fingerprint: str, run_id: str, horizon_ms: int | None = None) -> str:
    """`part-L01-k3f9a1c07-r<run>[-h<horizon>]-<uuid>.parquet`: level, key and run survive log checkpoints."""
    level_text = "-1" if level == LEVEL_CONSTANT else f"{min(level, MAX_LEVEL):02d}"
    horizon = "" if horizon_ms is None else f"h{horizon_ms:012x}-"
    return f"part-L{level_text}-k{fingerprint}-r{run_id}-{horizon}{uuid.uuid4().hex}.parquet"


def parse_data_file_name(path: str) -> WrittenFileName | None:
    """Level, fingerprint and run of a file recluster wrote; None for any other file (level 0)."""
    match = _FILE_NAME.search(path)
    if match is None:
        return None
    horizon = None if match["horizon"] is None else int(match["horizon"], 16)
    return WrittenFileName(int(match["level"]), match["fingerprint"], match["run"], horizon)


def age_run_id(age_ms: int) -> str:
    """The run id of an `absorb` run: its age in milliseconds as 12 hex digits (sorts by age)."""
    return f"{age_ms:012x}"


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]
