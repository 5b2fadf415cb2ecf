"""Table shapes other writers produce, written protocol-exactly for the tests, and two independent readers.

delta-rs (1.6) cannot write deletion vectors (its DELETE rewrites files), so `write_dv_table` writes them as the
Delta protocol specifies ("Deletion Vectors"): the serialized vector is the magic number 1681511377 (4 bytes, little
endian) and a RoaringBitmapArray in the 64-bit portable format (8-byte count of 32-bit bitmaps, each a 4-byte high
key and a portable roaring bitmap, serialized here by pyroaring, an implementation independent of ours); inline
vectors are z85 text in the descriptor, the others live in `[prefix/]deletion_vector_<uuid>.bin` files (a version
byte 1, then per vector a 4-byte big-endian size, the vector and its big-endian CRC-32; `offset` is the position
of the size). Every fixture is checked by reading it back with delta-rs and DuckDB before a test uses it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import struct
import uuid
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake
from pyroaring import BitMap

MAGIC = 1681511377
Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def z85_encode(data: bytes) -> str:
    """ZeroMQ Z85 (4 bytes -> 5 characters); the caller pads to a multiple of 4 bytes."""
    assert len(data) % 4 == 0
    out = []
    for start in range(0, len(data), 4):
        value = int.from_bytes(data[start : start + 4], "big")
        chunk = []
        for _ in range(5):
            value, digit = divmod(value, 85)
            chunk.append(Z85[digit])
        out.append("".join(reversed(chunk)))
    return "".join(out)


def serialize_vector(deleted: Sequence[int]) -> bytes:
    """Magic + RoaringBitmapArray (portable 64-bit format) of the deleted row positions."""
    by_high: dict[int, list[int]] = {}
    for position in sorted(set(deleted)):
        by_high.setdefault(position >> 32, []).append(position & 0xFFFFFFFF)
    parts = [struct.pack("<I", MAGIC), struct.pack("<Q", len(by_high))]
    for high, lows in sorted(by_high.items()):
        bitmap = BitMap(lows)
        bitmap.run_optimize()
        parts += [struct.pack("<I", high), bitmap.serialize()]
    return b"".join(parts)


def _commit(location: str, actions: Sequence[Mapping[str, Any]], operation: str) -> int:
    """Write the next commit (create-if-absent, as every Delta writer must); returns its version."""
    version = DeltaTable(location).version() + 1
    info = {"commitInfo": {"timestamp": int(dt.datetime.now().timestamp() * 1000), "operation": operation}}
    lines = "".join(json.dumps(a) + "\n" for a in [info, *actions])
    with open(Path(location) / "_delta_log" / f"{version:020d}.json", "x", encoding="utf-8") as out:
        out.write(lines)
    return version


def _last_actions(location: str, kind: str) -> dict[str, Any]:
    """The newest `protocol` or `metaData` action in the JSON commits (fixtures never checkpoint first)."""
    found: dict[str, Any] = {}
    for name in sorted(os.listdir(Path(location) / "_delta_log")):
        if name.endswith(".json") and name[:20].isdigit():
            for line in (Path(location) / "_delta_log" / name).read_text().splitlines():
                action = json.loads(line)
                if kind in action:
                    found = action[kind]
    return found


def set_protocol_features(
    location: str, reader_features: Sequence[str], writer_features: Sequence[str], properties: Mapping[str, str] = {}
) -> int:
    """Upgrade to reader 3 / writer 7 with exactly these features (plus table properties) in one commit."""
    metadata = _last_actions(location, "metaData")
    metadata["configuration"] = {**metadata.get("configuration", {}), **properties}
    protocol = {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": list(reader_features),
        "writerFeatures": list(writer_features),
    }
    return _commit(location, [{"protocol": protocol}, {"metaData": metadata}], "SET TBLPROPERTIES")


def _live_adds(location: str) -> dict[str, dict[str, Any]]:
    """Live add actions by path, replayed from the JSON commits."""
    live: dict[str, dict[str, Any]] = {}
    for name in sorted(os.listdir(Path(location) / "_delta_log")):
        if name.endswith(".json") and name[:20].isdigit():
            for line in (Path(location) / "_delta_log" / name).read_text().splitlines():
                action = json.loads(line)
                if "add" in action:
                    live[action["add"]["path"]] = action["add"]
                elif "remove" in action:
                    live.pop(action["remove"]["path"], None)
    return live


def _descriptor(location: str, deleted: Sequence[int], inline: bool, prefix: str = "") -> dict[str, Any]:
    data = serialize_vector(deleted)
    if inline:
        padded = data + b"\x00" * (-len(data) % 4)
        return {
            "storageType": "i",
            "pathOrInlineDv": z85_encode(padded),
            "sizeInBytes": len(data),
            "cardinality": len(set(deleted)),
        }
    file_id = uuid.uuid4()
    directory = Path(location) / prefix if prefix else Path(location)
    directory.mkdir(parents=True, exist_ok=True)
    # one file, two vectors: a decoy before ours, so `offset` must be honoured
    decoy = serialize_vector([0])
    blob = bytearray(b"\x01")
    for vector in (decoy, data):
        offset = len(blob)
        blob += struct.pack(">I", len(vector)) + vector + struct.pack(">I", zlib.crc32(vector))
    (directory / f"deletion_vector_{file_id}.bin").write_bytes(bytes(blob))
    return {
        "storageType": "u",
        "pathOrInlineDv": prefix + z85_encode(file_id.bytes),
        "offset": offset,
        "sizeInBytes": len(data),
        "cardinality": len(set(deleted)),
    }


def add_deletion_vector(location: str, path: str, deleted: Sequence[int], inline: bool = False) -> int:
    """What a DELETE of Delta Spark does to one file: remove it (with its old vector) and add it back with a
    vector of the old positions plus `deleted`. Returns the commit version."""
    add = dict(_live_adds(location)[path])
    old = _positions(location, add.get("deletionVector"))
    remove = {
        "path": path,
        "deletionTimestamp": 1,
        "dataChange": True,
        "extendedFileMetadata": True,
        "partitionValues": add["partitionValues"],
        "size": add["size"],
    }
    if add.get("deletionVector"):
        remove["deletionVector"] = add["deletionVector"]
    add["deletionVector"] = _descriptor(
        location, sorted(set(old) | set(deleted)), inline, prefix="" if inline else "xy"
    )
    add["dataChange"] = True
    return _commit(location, [{"remove": remove}, {"add": add}], "DELETE")


def _positions(location: str, descriptor: Mapping[str, Any] | None) -> list[int]:
    """Deleted positions of a descriptor this module wrote (read back with pyroaring)."""
    if not descriptor:
        return []
    from recluster.core.deletion_vectors import DeletionVector
    from recluster.delta.replay import read_deleted_positions

    return [int(p) for p in read_deleted_positions(location, None, DeletionVector.from_log(dict(descriptor)))]


@dataclass(frozen=True)
class DvTable:
    location: str
    expected: pa.Table
    """The live rows: what a reader that applies the vectors returns."""
    physical_rows: int
    deleted_rows: int
    inline_vectors: int
    file_vectors: int


def write_dv_table(
    location: str,
    *,
    files: int = 40,
    rows_per_file: int = 20_000,
    dv_files: int = 25,
    inline: int = 12,
    seed: int = 7,
    partitioned: bool = False,
) -> DvTable:
    """A table with deletion vectors on `dv_files` of its `files` files (`inline` of them inline, the rest in
    vector files, one under a random prefix), 0-90 % of each such file's rows deleted."""
    rng = np.random.default_rng(seed)
    frames = []
    for index in range(files):
        ids = np.arange(index * rows_per_file, (index + 1) * rows_per_file, dtype=np.int64)
        frame = pa.table(
            {
                "id": ids,
                "k": rng.integers(0, 10**9, rows_per_file),
                "s": pa.array([f"s{v % 997}" for v in ids.tolist()]),
                "ts": pa.array(
                    (1_700_000_000_000_000 + ids * 1_000_003).astype("datetime64[us]"), pa.timestamp("us", tz="UTC")
                ),
            }
        )
        if partitioned:
            frame = frame.append_column("p", pa.array(["a b", "c=d"][index % 2] for _ in range(rows_per_file)))
        write_deltalake(location, frame, mode="append", partition_by=["p"] if partitioned else None)
        frames.append(frame)
    set_protocol_features(location, ["deletionVectors"], ["deletionVectors"], {"delta.enableDeletionVectors": "true"})
    adds = _live_adds(location)
    order = sorted(adds, key=lambda p: adds[p]["modificationTime"])
    chosen = rng.choice(len(order), size=dv_files, replace=False)
    actions: list[dict[str, Any]] = []
    keep: dict[str, np.ndarray] = {}
    for rank, index in enumerate(sorted(chosen)):
        path = order[index]
        rows = json.loads(adds[path]["stats"])["numRecords"]
        deleted = np.flatnonzero(rng.random(rows) < rng.uniform(0.0, 0.9)).tolist() or [0]
        prefix = "ab" if rank == dv_files - 1 else ""
        descriptor = _descriptor(location, deleted, inline=rank < inline, prefix=prefix)
        actions.append(
            {
                "remove": {
                    "path": path,
                    "deletionTimestamp": 1,
                    "dataChange": True,
                    "extendedFileMetadata": True,
                    "partitionValues": adds[path]["partitionValues"],
                    "size": adds[path]["size"],
                }
            }
        )
        actions.append({"add": {**adds[path], "deletionVector": descriptor}})
        mask = np.ones(rows, dtype=bool)
        mask[deleted] = False
        keep[path] = mask
    _commit(location, actions, "DELETE")
    # the expected live rows: each file's rows in file order, masked
    live = []
    for path in order:
        from urllib.parse import unquote

        import pyarrow.parquet as pq

        data = pq.read_table(Path(location) / unquote(path))
        if partitioned:
            value = adds[path]["partitionValues"]["p"]
            data = data.append_column("p", pa.array([value] * data.num_rows))
        live.append(data.filter(pa.array(keep[path])) if path in keep else data)
    expected = pa.concat_tables(live, promote_options="default")
    deleted_total = int(sum((~m).sum() for m in keep.values()))
    return DvTable(
        location,
        expected,
        files * rows_per_file,
        deleted_total,
        min(inline, dv_files),
        dv_files - min(inline, dv_files),
    )


ESCAPED_VALUES = ["New York", "a=b", "x/y", "50%", "Zürich", "t:1", "#hash?", None]


def write_escaped_partition_table(location: str, appends: int = 4, rows: int = 400, seed: int = 3) -> pa.Table:
    """Partition values that need escaping in paths (space, =, /, %, :, unicode, NULL) and a timestamp
    partition column; several appends so each partition has several files. Returns every row written."""
    rng = np.random.default_rng(seed)
    written = []
    for batch in range(appends):
        city = [ESCAPED_VALUES[i] for i in rng.integers(0, len(ESCAPED_VALUES), rows)]
        day = [dt.datetime(2024, 1, 1 + int(i), 12, 30, 15) for i in rng.integers(0, 2, rows)]
        frame = pa.table(
            {
                "k": rng.integers(0, 10**6, rows),
                "v": np.arange(rows, dtype=np.int64) + batch * rows,
                "city": pa.array(city, pa.string()),
                "day": pa.array(day, pa.timestamp("us")),
            }
        )
        write_deltalake(location, frame, mode="append", partition_by=["city", "day"])
        written.append(frame)
    return pa.concat_tables(written)


def _canonical(table: pa.Table) -> pa.Table:
    """Both engines' reads in one form: columns by name, strings plain, timestamps as UTC microseconds."""
    columns = {}
    for name in sorted(table.column_names):
        column = table.column(name)
        if pa.types.is_timestamp(column.type):
            column = pc.cast(column.cast(pa.timestamp("us", tz=column.type.tz)), pa.int64())
        elif pa.types.is_large_string(column.type) or pa.types.is_string_view(column.type):
            column = column.cast(pa.string())
        columns[name] = column
    return pa.table(columns)


def rows_digest(table: pa.Table) -> tuple[int, str]:
    """Count plus an order-independent hash of the multiset of rows (all columns, by name)."""
    canonical = _canonical(table)
    digests = sorted(hashlib.sha256(repr(sorted(row.items())).encode()).digest() for row in canonical.to_pylist())
    return canonical.num_rows, hashlib.sha256(b"".join(digests)).hexdigest()


def read_with_delta_rs(location: str) -> pa.Table:
    """delta-rs's read with deletion vectors applied (`scan`; `to_pyarrow_table` refuses such tables)."""
    return pa.table(DeltaTable(location).scan().read_all())


def duckdb_extension() -> str:
    """The delta extension bundled in the PyPI package duckdb-extension-delta (built for this duckdb)."""
    import duckdb
    import duckdb_extension_delta

    path = (
        Path(duckdb_extension_delta.__file__).parent
        / "extensions"
        / f"v{duckdb.__version__}"
        / "delta.duckdb_extension"
    )
    assert path.exists(), f"no delta extension for duckdb {duckdb.__version__} at {path}"
    return str(path)


def read_with_duckdb(location: str) -> pa.Table:
    """DuckDB's delta extension (delta-kernel-rs) reading the table: a second engine."""
    import duckdb

    connection = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    try:
        connection.execute(f"LOAD '{duckdb_extension()}'")
        return connection.execute("SELECT * FROM delta_scan(?)", [str(Path(location).resolve())]).to_arrow_table()
    finally:
        connection.close()
