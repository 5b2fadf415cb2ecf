"""Spark event logs as Spark writes them (`spark.eventLog.dir`): single files (`app-123`, `local-123.zstd`,
`...inprogress`) and rolling directories (`eventlog_v2_<app>/events_<n>_<app>.zstd`), plain or compressed with
zstd, lz4 or snappy (Spark's `spark.eventLog.compression.codec`), on a local path or an object-store prefix.

A file that is malformed or cut short is one problem line; the events before the fault still count, and the other
files are read (docs/advise.md#event-logs).
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from recluster.core.errors import TableError
from recluster.delta.storage import table_filesystem

CODECS = ("zstd", "lz4", "snappy", "lzf")
LZ4_MAGIC = b"LZ4Block"
SNAPPY_MAGIC = b"\x82SNAPPY\x00"
CHUNK = 1 << 20
_ROLLED = re.compile(r"events_(\d+)_")
_KIND = re.compile(rb'\{\s*"Event"\s*:\s*"([^"]+)"')
"""An event line's start, naming its kind: Spark writes the kind first."""


class EventLogError(ValueError):
    """A file that is not a Spark event log, or one cut short."""


@dataclass(frozen=True, slots=True)
class EventLogProblem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"event log {self.path}: {self.message}"


def _codec(name: str) -> str | None:
    base = name.removesuffix(".inprogress")
    suffix = base.rsplit(".", 1)[-1] if "." in base else ""
    return suffix if suffix in CODECS else None


def _is_event_log(name: str) -> bool:
    return not name.startswith((".", "appstatus_", "_")) and not name.endswith(".crc")


def event_log_files(location: str, storage_options: Mapping[str, str]) -> tuple[pafs.FileSystem, list[tuple[str, str]]]:
    """The event log files at `location` (a file, or a directory or prefix searched below), rolled parts in order:
    each as (its path on the returned filesystem, its name to show)."""
    remote = "://" in location and not location.startswith("file://")
    filesystem = table_filesystem(location, storage_options)
    base = "" if remote else os.path.abspath(location.removeprefix("file://"))
    try:
        info = filesystem.get_file_info(base)
    except (OSError, pa.ArrowException) as error:
        raise TableError(f"event logs {location}: {error}") from error
    if info.type == pafs.FileType.File:
        return filesystem, [(base, location)]
    if info.type == pafs.FileType.NotFound and not remote:
        raise TableError(f"event logs {location}: no such file or directory")
    try:
        found = filesystem.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=remote))
    except (OSError, pa.ArrowException) as error:
        raise TableError(f"event logs {location}: {error}") from error

    def order(path: str) -> tuple[str, int, str]:
        directory, _, name = path.rpartition("/")
        rolled = _ROLLED.match(name)
        return (directory, int(rolled.group(1)) if rolled else 0, name)

    files = sorted((i.path for i in found if i.type == pafs.FileType.File and _is_event_log(i.base_name)), key=order)
    if not files:
        raise TableError(f"event logs {location}: no event log files found")
    return filesystem, [(path, f"{location.rstrip('/')}/{path}" if remote else path) for path in files]


def _lz4_blocks(stream: Any) -> Iterator[bytes]:
    """lz4-java's LZ4BlockOutputStream: blocks of magic, token, compressed and original lengths, checksum, data."""
    codec = pa.Codec("lz4_raw")
    while True:
        header = stream.read(21)
        if not header:
            return
        if len(header) < 21 or header[:8] != LZ4_MAGIC:
            raise EventLogError("lz4: bad or cut-short block header")
        method = header[8] & 0xF0
        compressed, original = struct.unpack("<ii", header[9:17])
        if original == 0:
            return
        data = stream.read(compressed)
        if len(data) < compressed:
            raise EventLogError("lz4: cut short inside a block")
        yield data if method == 0x10 else codec.decompress(data, decompressed_size=original).to_pybytes()


def _varint(data: bytes) -> int:
    value = shift = 0
    for byte in data[:5]:
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value
        shift += 7
    raise EventLogError("snappy: bad block length")


def _snappy_chunks(stream: Any) -> Iterator[bytes]:
    """snappy-java's SnappyOutputStream: a 16-byte header, then chunks of a big-endian length and a snappy block."""
    codec = pa.Codec("snappy")
    header = stream.read(16)
    if header[:8] != SNAPPY_MAGIC:
        raise EventLogError("snappy: not a snappy-java stream")
    while True:
        length = stream.read(4)
        if not length:
            return
        if len(length) < 4:
            raise EventLogError("snappy: cut short between chunks")
        (size,) = struct.unpack(">i", length)
        data = stream.read(size)
        if len(data) < size:
            raise EventLogError("snappy: cut short inside a chunk")
        yield codec.decompress(data, decompressed_size=_varint(data)).to_pybytes()


def _bytes(filesystem: pafs.FileSystem, path: str) -> Iterator[bytes]:
    codec = _codec(path.rsplit("/", 1)[-1])
    if codec == "lzf":
        raise EventLogError("lzf-compressed event logs are not supported (use zstd, lz4 or snappy)")
    with filesystem.open_input_stream(path, compression=None) as raw:  # not guessed from the name
        if codec == "lz4":
            yield from _lz4_blocks(raw)
            return
        if codec == "snappy":
            yield from _snappy_chunks(raw)
            return
        stream = pa.CompressedInputStream(raw, "zstd") if codec == "zstd" else raw
        while chunk := stream.read(CHUNK):
            yield chunk


def read_events(
    filesystem: pafs.FileSystem, path: str, kinds: frozenset[str] | None = None
) -> Iterator[dict[str, Any]]:
    """The events of one file (only those of `kinds`, when given: the others are checked for an event's shape, not
    parsed); EventLogError (after the events before it) when it is malformed or cut short."""
    wanted = None if kinds is None else {kind.encode() for kind in kinds}
    pending, line = b"", 0
    try:
        for chunk in _bytes(filesystem, path):
            *lines, pending = (pending + chunk).split(b"\n")
            for text in lines:
                line += 1
                if not text.strip():
                    continue
                kind = _KIND.match(text)
                if wanted is None or (kind is not None and kind.group(1) in wanted):
                    yield _event(text, line)
                elif kind is None or not text.rstrip().endswith(b"}"):
                    raise EventLogError(f"line {line} is not a Spark listener event")
    except (OSError, pa.ArrowException) as error:
        raise EventLogError(f"unreadable after line {line}: {error}") from error
    if pending.strip():
        yield _event(pending, line + 1, last=True)


def _event(text: bytes, line: int, last: bool = False) -> dict[str, Any]:
    try:
        event = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        where = "cut short at its last line" if last else f"line {line} is not JSON"
        raise EventLogError(f"{where} ({error.__class__.__name__})") from error
    if not isinstance(event, dict) or "Event" not in event:
        raise EventLogError(f"line {line} is not a Spark listener event")
    return event
