"""The table-shape fixtures of tests/table_shapes.py are what they claim to be (no Spark).

Each deletion-vector table is checked three ways: its log and vector files byte by byte against the Delta protocol
("Deletion Vectors", "Deletion Vector File Storage Format") with a decoder written here (z85, magic, portable 64-bit
RoaringBitmapArray, version byte, big-endian size and CRC-32, `offset` = position of the size field), then read back
by delta-rs (`DeltaTable.scan`, which applies the vectors) and by DuckDB's delta extension; both must return exactly
the live rows the writer expects. A missing DuckDB extension fails these tests, it never skips them.
"""

from __future__ import annotations

import json
import struct
import tomllib
import uuid
import zlib
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyroaring import BitMap

from tests.table_shapes import (
    MAGIC,
    Z85,
    DvTable,
    read_with_delta_rs,
    read_with_duckdb,
    rows_digest,
    set_protocol_features,
    write_dv_table,
    write_escaped_partition_table,
    z85_encode,
)

ROOT = Path(__file__).resolve().parent.parent


# --- an independent reader of what the protocol says, used only to check the fixtures ---


def z85_decode(text: str) -> bytes:
    """ZeroMQ Z85: every 5 characters are 4 bytes, big endian."""
    assert len(text) % 5 == 0, text
    out = bytearray()
    for start in range(0, len(text), 5):
        value = 0
        for char in text[start : start + 5]:
            value = value * 85 + Z85.index(char)
        out += value.to_bytes(4, "big")
    return bytes(out)


def decode_vector(data: bytes) -> list[int]:
    """Deleted row positions of a serialized vector: magic (LE) + portable 64-bit RoaringBitmapArray."""
    (magic,) = struct.unpack_from("<I", data, 0)
    assert magic == MAGIC
    (buckets,) = struct.unpack_from("<Q", data, 4)
    # the fixtures' files hold fewer than 2**32 rows: exactly one bucket, whose 32-bit bitmap is the rest
    assert buckets == 1
    (high,) = struct.unpack_from("<I", data, 12)
    assert high == 0
    return [(high << 32) | low for low in BitMap.deserialize(data[16:])]


def vector_frames(blob: bytes) -> dict[int, bytes]:
    """Every vector of a deletion-vector file by the offset of its size field; checks the version and each CRC."""
    assert blob[0] == 1, "version byte"
    frames, position = {}, 1
    while position < len(blob):
        (size,) = struct.unpack_from(">I", blob, position)
        data = blob[position + 4 : position + 4 + size]
        (crc,) = struct.unpack_from(">I", blob, position + 4 + size)
        assert crc == zlib.crc32(data)
        frames[position] = data
        position += 4 + size + 4
    assert position == len(blob), "trailing bytes"
    return frames


def read_descriptor(location: str, descriptor: dict[str, Any]) -> list[int]:
    """The deleted positions of a descriptor, checking every field the protocol defines."""
    size = descriptor["sizeInBytes"]
    if descriptor["storageType"] == "i":
        assert "offset" not in descriptor
        encoded = descriptor["pathOrInlineDv"]
        assert len(encoded) == -(-size // 4) * 5, "z85 of the vector zero-padded to whole 4-byte groups"
        data = z85_decode(encoded)[:size]
    else:
        assert descriptor["storageType"] == "u"
        encoded = descriptor["pathOrInlineDv"]
        prefix, file_id = encoded[:-20], uuid.UUID(bytes=z85_decode(encoded[-20:]))
        path = Path(location) / prefix / f"deletion_vector_{file_id}.bin"
        frames = vector_frames(path.read_bytes())
        data = frames[descriptor["offset"]]
    assert len(data) == size
    positions = decode_vector(data)
    assert len(positions) == descriptor["cardinality"]
    return positions


def commits(location: str) -> list[list[dict[str, Any]]]:
    """The JSON commits of the table, in version order (the fixtures never checkpoint)."""
    log = Path(location) / "_delta_log"
    names = sorted(p.name for p in log.glob("*.json"))
    assert names == [f"{v:020d}.json" for v in range(len(names))]
    return [[json.loads(line) for line in (log / name).read_text().splitlines()] for name in names]


def live_vectors(location: str) -> dict[str, dict[str, Any]]:
    """Logged path -> live add action, for the adds that carry a deletion vector (replayed here)."""
    live: dict[str, dict[str, Any]] = {}
    for actions in commits(location):
        for action in actions:
            if "add" in action:
                live[action["add"]["path"]] = action["add"]
            elif "remove" in action:
                live.pop(action["remove"]["path"])
    return {path: add for path, add in live.items() if add.get("deletionVector")}


def ids_by_file(location: str, path: str) -> list[int]:
    """The `id` column of one data file, in physical row order."""
    import pyarrow.parquet as pq

    return pq.read_table(Path(location) / unquote(path), columns=["id"]).column("id").to_pylist()


# --- fixtures ---


@pytest.fixture(scope="module")
def dv_table(tmp_path_factory: pytest.TempPathFactory) -> DvTable:
    """The default shape: 40 files x 20,000 rows, vectors on 25 files (12 inline, 13 in vector files)."""
    return write_dv_table(str(tmp_path_factory.mktemp("dv") / "table"))


@pytest.fixture(scope="module")
def dv_expected(dv_table: DvTable) -> tuple[int, str]:
    return rows_digest(dv_table.expected)


# --- the deletion-vector table ---


def test_dv_table_counts(dv_table: DvTable) -> None:
    assert (dv_table.physical_rows, dv_table.inline_vectors, dv_table.file_vectors) == (800_000, 12, 13)
    assert 0 < dv_table.deleted_rows < dv_table.physical_rows
    assert dv_table.expected.num_rows == dv_table.physical_rows - dv_table.deleted_rows
    assert len(dv_table.expected.column("id").unique()) == dv_table.expected.num_rows


def test_delta_rs_scan_returns_exactly_the_live_rows(dv_table: DvTable, dv_expected: tuple[int, str]) -> None:
    read = read_with_delta_rs(dv_table.location)
    assert read.num_rows == dv_table.physical_rows - dv_table.deleted_rows
    assert rows_digest(read) == dv_expected


def test_duckdb_delta_scan_returns_exactly_the_live_rows(dv_table: DvTable, dv_expected: tuple[int, str]) -> None:
    assert rows_digest(read_with_duckdb(dv_table.location)) == dv_expected


def test_delta_rs_reports_exactly_the_files_with_vectors(dv_table: DvTable) -> None:
    """`deletion_vectors()` lists the 25 files (as file:// URIs), each selection vector as long as the file, False
    exactly at the positions the descriptor (decoded here) deletes."""
    location = dv_table.location
    vectors = live_vectors(location)
    assert len(vectors) == 25
    reported = pa.table(DeltaTable(location).deletion_vectors()).to_pylist()
    root = Path(location).resolve().as_uri() + "/"
    by_path = {unquote(entry["filepath"].removeprefix(root)): entry["selection_vector"] for entry in reported}
    assert set(by_path) == {unquote(path) for path in vectors}
    for path, add in vectors.items():
        selection = by_path[unquote(path)]
        assert len(selection) == json.loads(add["stats"])["numRecords"] == 20_000
        deleted = read_descriptor(location, add["deletionVector"])
        assert [i for i, keep in enumerate(selection) if not keep] == deleted


def test_dv_log_is_protocol_exact(dv_table: DvTable) -> None:
    """Upgrade commit: protocol 3/7 with the feature plus the old metaData with the property; vector commit: per file a
    remove of the exact logged path and the same add (stats of the physical rows) with a descriptor; commitInfo in
    every commit."""
    log = commits(dv_table.location)
    assert len(log) == 40 + 2
    assert all("commitInfo" in actions[0] for actions in log)
    old_metadata = next(a["metaData"] for a in log[0] if "metaData" in a)
    upgrade = {key: value for action in log[40] for key, value in action.items()}
    assert upgrade["protocol"] == {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": ["deletionVectors"],
        "writerFeatures": ["deletionVectors"],
    }
    new_metadata = dict(upgrade["metaData"])
    assert new_metadata.pop("configuration") == {**old_metadata["configuration"], "delta.enableDeletionVectors": "true"}
    assert new_metadata == {key: value for key, value in old_metadata.items() if key != "configuration"}

    before = {a["add"]["path"]: a["add"] for actions in log[:40] for a in actions if "add" in a}
    actions = log[41][1:]
    removes = [a["remove"] for a in actions if "remove" in a]
    adds = [a["add"] for a in actions if "add" in a]
    assert len(removes) == len(adds) == 25 == len(actions) / 2
    for remove, add in zip(removes, adds, strict=True):
        assert remove["path"] == add["path"] and remove["path"] in before
        assert remove["dataChange"] is True and add["dataChange"] is True
        assert remove["size"] == add["size"] and remove["partitionValues"] == add["partitionValues"]
        assert {k: v for k, v in add.items() if k != "deletionVector"} == {**before[add["path"]], "dataChange": True}
    kinds = [add["deletionVector"]["storageType"] for add in adds]
    assert (kinds.count("i"), kinds.count("u")) == (12, 13)


def test_vector_files_hold_several_vectors_and_the_offset_is_honoured(dv_table: DvTable) -> None:
    """Every .bin file parses completely into several framed vectors; ours is not the first one, so a reader that
    ignored `offset` would read the wrong vector; one file lives under a random prefix."""
    location = Path(dv_table.location)
    files = sorted(location.rglob("deletion_vector_*.bin"))
    assert files and all(len(vector_frames(f.read_bytes())) >= 2 for f in files)
    assert any(f.parent != location for f in files)
    descriptors = [add["deletionVector"] for add in live_vectors(str(location)).values()]
    on_disk = [d for d in descriptors if d["storageType"] == "u"]
    assert all(d["offset"] > 1 for d in on_disk)
    assert sum(len(d["pathOrInlineDv"]) > 20 for d in on_disk) >= 1
    assert all((location / d["pathOrInlineDv"][:-20]).is_dir() for d in on_disk if len(d["pathOrInlineDv"]) > 20)


@pytest.mark.parametrize(("kind", "inline"), [("inline", 1), ("prefixed-file", 0)])
def test_one_inline_or_one_prefixed_file_vector_is_read_correctly(tmp_path: Path, kind: str, inline: int) -> None:
    """A table whose only vector is inline, or in a file under a prefix: both engines drop exactly its rows."""
    location = str(tmp_path / "t")
    table = write_dv_table(location, files=3, rows_per_file=3_000, dv_files=1, inline=inline, seed=11)
    ((path, add),) = live_vectors(location).items()
    descriptor = add["deletionVector"]
    if kind == "inline":
        assert descriptor["storageType"] == "i" and "offset" not in descriptor
    else:
        assert descriptor["storageType"] == "u" and descriptor["pathOrInlineDv"].startswith("ab")
        assert len(descriptor["pathOrInlineDv"]) == 22
    deleted = read_descriptor(location, descriptor)
    assert 0 < len(deleted) == table.deleted_rows
    gone = {ids_by_file(location, path)[i] for i in deleted}
    for read in (read_with_delta_rs(location), read_with_duckdb(location)):
        ids = set(read.column("id").to_pylist())
        assert len(ids) == read.num_rows == 9_000 - len(deleted)
        assert not ids & gone
        assert rows_digest(read) == rows_digest(table.expected)


def test_partitioned_dv_table_with_an_escaped_partition_value(tmp_path: Path) -> None:
    location = tmp_path / "t"
    table = write_dv_table(str(location), files=8, rows_per_file=2_000, dv_files=6, inline=3, partitioned=True)
    assert {p.name for p in location.iterdir() if p.name.startswith("p=")} == {"p=a%20b", "p=c%3Dd"}
    values = {add["partitionValues"]["p"] for add in live_vectors(str(location)).values()}
    assert values == {"a b", "c=d"}
    expected = rows_digest(table.expected)
    assert rows_digest(read_with_delta_rs(str(location))) == expected
    assert rows_digest(read_with_duckdb(str(location))) == expected


def test_an_offset_past_the_size_field_is_refused_by_both_engines(tmp_path: Path) -> None:
    """The convention both kernels use: `offset` is the position of the 4-byte size, not of the bitmap."""
    location = str(tmp_path / "t")
    write_dv_table(location, files=2, rows_per_file=500, dv_files=1, inline=0)
    log = Path(location) / "_delta_log"
    last = sorted(log.glob("*.json"))[-1]
    text = last.read_text()
    descriptor = next(a["add"]["deletionVector"] for a in map(json.loads, text.splitlines()) if "add" in a)
    last.write_text(text.replace(f'"offset": {descriptor["offset"]}', f'"offset": {descriptor["offset"] + 4}'))
    for reader in (read_with_delta_rs, read_with_duckdb):
        with pytest.raises(Exception, match="DV size mismatch"):
            reader(location)


# --- the escaped-partition table ---


def test_escaped_partition_table_read_by_both_engines(tmp_path: Path) -> None:
    location = tmp_path / "t"
    expected = write_escaped_partition_table(str(location))
    digest = rows_digest(expected)
    assert digest[0] == 4 * 400
    assert rows_digest(read_with_delta_rs(str(location))) == digest
    assert rows_digest(read_with_duckdb(str(location))) == digest

    adds = [a["add"] for actions in commits(str(location)) for a in actions if "add" in a]
    cities = {add["partitionValues"]["city"] for add in adds}
    assert {None, "New York", "a=b", "x/y", "50%", "Zürich", "t:1"} <= cities
    assert all(add["partitionValues"]["day"].startswith("2024-01-0") for add in adds)
    per_partition: dict[tuple[Any, ...], int] = {}
    for add in adds:
        key = tuple(sorted(add["partitionValues"].items(), key=lambda item: item[0]))
        per_partition[key] = per_partition.get(key, 0) + 1
    assert min(per_partition.values()) >= 2
    for add in adds:  # the logged path is a URI: the escaped directory names once more percent-encoded
        assert (location / unquote(add["path"])).is_file()
    assert (location / "city=x%2Fy").is_dir() and (location / "city=__HIVE_DEFAULT_PARTITION__").is_dir()


# --- set_protocol_features and the commit files ---


def test_set_protocol_features_upgrades_to_3_7_keeping_the_metadata(tmp_path: Path) -> None:
    location = str(tmp_path / "t")
    write_deltalake(location, pa.table({"k": [1, 2, 3]}))
    before = DeltaTable(location).metadata()
    version = set_protocol_features(location, ["timestampNtz"], ["timestampNtz", "appendOnly"])
    table = DeltaTable(location)
    assert version == table.version() == 1
    protocol = table.protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (3, 7)
    assert (protocol.reader_features, sorted(protocol.writer_features or [])) == (
        ["timestampNtz"],
        ["appendOnly", "timestampNtz"],
    )
    after = table.metadata()
    assert (after.id, after.partition_columns, after.configuration) == (
        before.id,
        before.partition_columns,
        before.configuration,
    )
    assert rows_digest(read_with_delta_rs(location)) == rows_digest(read_with_duckdb(location))


def test_commits_are_put_if_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer that read a stale version does not overwrite the commit another writer made meanwhile."""
    import tests.table_shapes as shapes

    location = tmp_path / "t"
    write_deltalake(str(location), pa.table({"k": [1]}))
    write_deltalake(str(location), pa.table({"k": [2]}), mode="append")  # another writer won version 1
    won = (location / "_delta_log" / f"{1:020d}.json").read_bytes()

    class Stale(DeltaTable):
        def version(self) -> int:
            return 0

    monkeypatch.setattr(shapes, "DeltaTable", Stale)
    with pytest.raises(FileExistsError):
        set_protocol_features(str(location), [], ["appendOnly"])
    assert (location / "_delta_log" / f"{1:020d}.json").read_bytes() == won
    assert sorted(p.name for p in (location / "_delta_log").glob("*.json"))[-1] == f"{1:020d}.json"


# --- the helpers themselves ---


def test_z85_matches_the_zeromq_reference_vector() -> None:
    raw = bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
    assert z85_encode(raw) == "HelloWorld"
    assert z85_decode("HelloWorld") == raw


def test_rows_digest_is_order_independent_and_normalises_types() -> None:
    rows = {
        "id": pa.array([1, 2, 2], pa.int64()),
        "s": pa.array(["a", "b", "b"], pa.string()),
        "ts": pa.array([0, 1_000_000, 1_000_000], pa.timestamp("us", tz="UTC")),
    }
    table = pa.table(rows)
    shuffled = pa.table(
        {
            "ts": pa.array([1_000_000, 0, 1_000_000], pa.timestamp("us", tz="UTC")),
            "s": pa.array(["b", "a", "b"], pa.large_string()),
            "id": pa.array([2, 1, 2], pa.int64()),
        }
    )
    assert rows_digest(table) == rows_digest(shuffled)
    assert rows_digest(table) == rows_digest(
        table.cast(pa.schema([("id", pa.int64()), ("s", pa.string_view()), ("ts", pa.timestamp("us", tz="UTC"))]))
    )
    one_copy = table.slice(0, 2)
    assert rows_digest(one_copy)[0] == 2 and rows_digest(one_copy)[1] != rows_digest(table)[1]
    changed = table.set_column(0, "id", pa.array([1, 2, 3], pa.int64()))
    assert rows_digest(changed)[1] != rows_digest(table)[1]


def test_a_missing_duckdb_extension_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the bundled extension, reading with DuckDB raises: a test that needs it fails, never skips."""
    import duckdb_extension_delta

    location = str(tmp_path / "t")
    write_deltalake(location, pa.table({"k": [1]}))
    monkeypatch.setattr(duckdb_extension_delta, "__file__", str(tmp_path / "nowhere" / "__init__.py"))
    with pytest.raises(AssertionError, match="no delta extension"):
        read_with_duckdb(location)


def test_pinned_duckdb_and_extension_are_the_installed_pair() -> None:
    """pyproject pins duckdb and duckdb-extension-delta to one version; the installed ones are exactly those, and the
    extension file bundled for it exists."""
    import duckdb
    import duckdb_extension_delta

    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    pins = dict(entry.split("==") for entry in dev if "==" in entry)
    assert pins["duckdb"] == pins["duckdb-extension-delta"] == duckdb.__version__
    assert metadata.version("duckdb-extension-delta") == pins["duckdb-extension-delta"]
    assert any(entry.startswith("pyroaring") for entry in dev)
    bundled = Path(duckdb_extension_delta.__file__).parent / "extensions" / f"v{duckdb.__version__}"
    assert (bundled / "delta.duckdb_extension").is_file()


def test_deleted_fraction_spans_the_range(dv_table: DvTable) -> None:
    """Seeded random deletions of 0-90 % per file: some files lose little, some most, none all."""
    fractions = [
        add["deletionVector"]["cardinality"] / json.loads(add["stats"])["numRecords"]
        for add in live_vectors(dv_table.location).values()
    ]
    assert min(fractions) < 0.3 and 0.6 < max(fractions) < 0.95
    assert np.isclose(sum(f * 20_000 for f in fractions), dv_table.deleted_rows)
