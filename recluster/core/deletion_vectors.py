"""Deletion vectors (Delta protocol, "Deletion Vectors"): the descriptor a log entry carries and the decoding
of the serialized vector into the row positions it deletes.

Pure: bytes in, numpy arrays out. Reading a vector's bytes from its file is the caller's job (log_replay).
A data file is identified in the log by (path, deletion vector id): a remove must carry the descriptor of the
add it removes, else the add stays live.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import numpy as np
import numpy.typing as npt

from recluster.core.errors import TableError

MAGIC = 1681511377
"""First 4 bytes (little endian) of a serialized deletion vector: a RoaringBitmapArray in portable format."""

INLINE = "i"
RELATIVE = "u"
ABSOLUTE = "p"

_Z85_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUES = {c: i for i, c in enumerate(_Z85_ALPHABET)}
_UUID_Z85_LENGTH = 20

_COOKIE_NO_RUNS = 12346
_COOKIE_RUNS = 12347
_NO_OFFSET_THRESHOLD = 4
_ARRAY_LIMIT = 4096
_BITMAP_BYTES = 8192


class DeletionVectorError(ValueError):
    """A deletion vector that cannot be decoded: its file is never rewritten from it."""


def z85_decode(text: str) -> bytes:
    """ZeroMQ Z85: every 5 characters are 4 bytes (big endian base 85)."""
    if len(text) % 5:
        raise DeletionVectorError(f"z85 text of length {len(text)} is not a multiple of 5")
    out = bytearray()
    for start in range(0, len(text), 5):
        value = 0
        for char in text[start : start + 5]:
            try:
                value = value * 85 + _Z85_VALUES[char]
            except KeyError:
                raise DeletionVectorError(f"invalid z85 character {char!r}") from None
        if value >= 1 << 32:
            raise DeletionVectorError("z85 group out of range")
        out += value.to_bytes(4, "big")
    return bytes(out)


@dataclass(frozen=True, slots=True)
class DeletionVector:
    """The `deletionVector` descriptor of an add or remove action."""

    storage_type: str
    path_or_inline_dv: str
    size_in_bytes: int
    cardinality: int
    offset: int | None = None
    max_row_index: int | None = None

    @classmethod
    def from_log(cls, entry: dict[str, Any]) -> DeletionVector:
        storage_type = str(entry["storageType"])
        if storage_type not in (INLINE, RELATIVE, ABSOLUTE):
            raise DeletionVectorError(f"unknown deletion vector storage type {storage_type!r}")
        offset = entry.get("offset")
        max_row_index = entry.get("maxRowIndex")
        return cls(
            storage_type=storage_type,
            path_or_inline_dv=str(entry["pathOrInlineDv"]),
            size_in_bytes=int(entry["sizeInBytes"]),
            cardinality=int(entry["cardinality"]),
            offset=None if offset is None else int(offset),
            max_row_index=None if max_row_index is None else int(max_row_index),
        )

    def to_log(self) -> dict[str, Any]:
        """The descriptor as the log writes it (a remove repeats its add's descriptor exactly)."""
        entry: dict[str, Any] = {
            "storageType": self.storage_type,
            "pathOrInlineDv": self.path_or_inline_dv,
            "sizeInBytes": self.size_in_bytes,
            "cardinality": self.cardinality,
        }
        if self.offset is not None:
            entry["offset"] = self.offset
        if self.max_row_index is not None:
            entry["maxRowIndex"] = self.max_row_index
        return entry

    @property
    def unique_id(self) -> str:
        """The protocol's id of the vector: with the path it identifies a live file."""
        suffix = "" if self.offset is None else f"@{self.offset}"
        return f"{self.storage_type}{self.path_or_inline_dv}{suffix}"

    def file_path(self) -> str:
        """Where a stored vector is: relative to the table root ('u') or an absolute URI ('p')."""
        if self.storage_type == ABSOLUTE:
            return self.path_or_inline_dv
        if self.storage_type != RELATIVE:
            raise DeletionVectorError("an inline deletion vector has no file")
        encoded = self.path_or_inline_dv
        prefix, tail = encoded[:-_UUID_Z85_LENGTH], encoded[-_UUID_Z85_LENGTH:]
        name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(tail))}.bin"
        return f"{prefix}/{name}" if prefix else name


def inline_bytes(vector: DeletionVector) -> bytes:
    """The serialized vector of an inline descriptor (z85 pads it to a multiple of 4 bytes)."""
    data = z85_decode(vector.path_or_inline_dv)
    if len(data) < vector.size_in_bytes:
        raise DeletionVectorError("inline deletion vector shorter than its sizeInBytes")
    return data[: vector.size_in_bytes]


def stored_bytes(vector: DeletionVector, block: bytes) -> bytes:
    """The serialized vector from the bytes of its file starting at `offset`: a 4-byte big-endian size, the
    vector, a 4-byte big-endian CRC-32 of it (checked)."""
    if len(block) < 8:
        raise DeletionVectorError("deletion vector file truncated")
    (size,) = struct.unpack(">I", block[:4])
    if size != vector.size_in_bytes or len(block) < 8 + size:
        raise DeletionVectorError(f"deletion vector size {size} does not match the descriptor's {vector.size_in_bytes}")
    data = block[4 : 4 + size]
    (checksum,) = struct.unpack(">I", block[4 + size : 8 + size])
    if zlib.crc32(data) != checksum:
        raise DeletionVectorError("deletion vector checksum mismatch")
    return data


class _Reader:
    def __init__(self, data: bytes, position: int) -> None:
        self.data = data
        self.position = position

    def take(self, count: int) -> bytes:
        if self.position + count > len(self.data):
            raise DeletionVectorError("deletion vector truncated")
        chunk = self.data[self.position : self.position + count]
        self.position += count
        return chunk

    def uint(self, width: int) -> int:
        return int.from_bytes(self.take(width), "little")

    def uint16s(self, count: int) -> npt.NDArray[np.uint64]:
        return np.frombuffer(self.take(2 * count), dtype="<u2").astype(np.uint64)


def _roaring32(reader: _Reader) -> npt.NDArray[np.uint64]:
    """One 32-bit roaring bitmap in the portable serialization (CRoaring / RoaringFormatSpec)."""
    cookie = reader.uint(4)
    if cookie & 0xFFFF == _COOKIE_RUNS:
        containers = (cookie >> 16) + 1
        run_flags = np.unpackbits(np.frombuffer(reader.take((containers + 7) // 8), np.uint8), bitorder="little")
    elif cookie == _COOKIE_NO_RUNS:
        containers = reader.uint(4)
        run_flags = np.zeros(containers, np.uint8)
    else:
        raise DeletionVectorError(f"not a portable roaring bitmap (cookie {cookie})")
    header = reader.uint16s(2 * containers).reshape(-1, 2) if containers else np.zeros((0, 2), np.uint64)
    if cookie == _COOKIE_NO_RUNS or containers >= _NO_OFFSET_THRESHOLD:
        reader.take(4 * containers)  # offsets: containers are read in order
    parts = []
    for index in range(containers):
        key, cardinality = int(header[index, 0]), int(header[index, 1]) + 1
        if run_flags[index]:
            runs = reader.uint16s(2 * reader.uint(2)).reshape(-1, 2)
            lows = np.concatenate(
                [np.arange(s, s + n + 1, dtype=np.uint64) for s, n in runs] or [np.zeros(0, np.uint64)]
            )
        elif cardinality <= _ARRAY_LIMIT:
            lows = reader.uint16s(cardinality)
        else:
            bits = np.unpackbits(np.frombuffer(reader.take(_BITMAP_BYTES), np.uint8), bitorder="little")
            lows = np.flatnonzero(bits).astype(np.uint64)
        parts.append((np.uint64(key) << np.uint64(16)) | lows)
    return np.concatenate(parts) if parts else np.zeros(0, np.uint64)


def deleted_positions(serialized: bytes) -> npt.NDArray[np.uint64]:
    """Row positions a serialized deletion vector deletes, ascending: the magic number, then a
    RoaringBitmapArray (8-byte count of 32-bit bitmaps, each a 4-byte high key and a portable bitmap)."""
    reader = _Reader(serialized, 0)
    if reader.uint(4) != MAGIC:
        raise DeletionVectorError("not a deletion vector (wrong magic number)")
    parts = []
    for _ in range(reader.uint(8)):
        high = np.uint64(reader.uint(4)) << np.uint64(32)
        parts.append(high | _roaring32(reader))
    return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.uint64)


def keep_mask(rows: int, deleted: npt.NDArray[np.uint64]) -> npt.NDArray[np.bool_]:
    """A mask of the rows a vector leaves live in a file of `rows` physical rows."""
    if deleted.size and int(deleted[-1]) >= rows:
        raise DeletionVectorError(f"deletion vector deletes row {int(deleted[-1])} of a file of {rows} rows")
    mask = np.ones(rows, dtype=bool)
    mask[deleted.astype(np.int64)] = False
    return mask


def match_deletion_vectors(paths: Sequence[str], vectors: Mapping[str, DeletionVector]) -> dict[int, DeletionVector]:
    """Each vector (keyed by its file's path as the log holds it) to the position of its file in `paths` (the file
    list, paths as delta-rs gives them): the same string, else the same path with one side percent-decoded once
    (a path as logged against the same path as stored). A vector that matches no file, or two, is a TableError,
    never dropped: its deleted rows would come back in a rewrite, and the row check before a commit counts from the
    same files, so it could not see them."""
    exact = {path: at for at, path in enumerate(paths)}
    forms: dict[str, int | None] | None = None
    matched: dict[int, DeletionVector] = {}
    for path, vector in vectors.items():
        at = exact.get(path)
        if at is None:
            if forms is None:
                forms = {}
                for position, candidate in enumerate(paths):
                    for form in {candidate, unquote(candidate)}:
                        forms[form] = position if forms.get(form, position) == position else None
            found = {forms.get(form) for form in (path, unquote(path)) if form in forms}
            at = found.pop() if len(found) == 1 else None
        if at is None:
            raise TableError(
                f"the deletion vector of {path} matches no single live file of the snapshot (its rows could come "
                "back): the log and the file list disagree"
            )
        matched[at] = vector
    return matched
