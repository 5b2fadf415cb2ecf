"""The one check every reliability scenario ends with, and the soak switch."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from recluster.engine.rounds import ReclusterResult, recluster_table, snapshot_loader
from recluster.settings import Settings
from tests.helpers import row_multiset


def soak() -> bool:
    """The long mode (`--soak` or RECLUSTER_SOAK=1); never in CI."""
    return os.environ.get("RECLUSTER_SOAK") == "1" and os.environ.get("CI") != "true"


def scaled(ci: int, long: int) -> int:
    return long if soak() else ci


@dataclass
class Counts:
    """What the suite checked, printed at the end of the run (the issue's closing counts)."""

    scenarios: int = 0
    kills: int = 0
    rows: int = 0
    files: int = 0


COUNTS = Counts()


def assert_intact(path: Path | str, expected: pa.Table | tuple[int, str], version: int | None = None) -> DeltaTable:
    """The table (at `version`, default latest) holds exactly `expected`'s rows and every file it references
    exists on disk. `expected` is a table of rows or its row_multiset."""
    table = DeltaTable(str(path), version=version)
    uris = table.file_uris()
    missing = [uri for uri in uris if not os.path.exists(uri.removeprefix("file://"))]
    assert not missing, f"referenced files missing: {missing[:5]}"
    assert len(set(uris)) == len(uris), "a file is referenced twice"
    want = expected if isinstance(expected, tuple) else row_multiset(expected)
    got = row_multiset(table.to_pyarrow_table())
    assert got == want, f"row multiset differs: {got[0]} rows, expected {want[0]}"
    COUNTS.scenarios += 1
    COUNTS.rows += got[0]
    COUNTS.files += len(uris)
    return table


def run_final(path: Path, spark: object, settings: Settings) -> ReclusterResult:
    """`recluster run --final` on the table with the test session's Spark."""
    loader = snapshot_loader(str(path), settings, None)
    return recluster_table(str(path), loader, settings=settings, spark_factory=lambda: spark, final=True)
