"""What every fault step ends with, on a copy of the table's prefix taken straight from the S3 server (around the
front): Delta Spark (the referee) reads exactly the rows appended, every file the latest version references exists,
and the outputs of ours that no retained version references (orphans, for `recluster clean`) are listed. Each is
judged by other code than recluster's: Delta Spark for rows, delta-rs for what each version references."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from recluster.core.blocks import parse_data_file_name
from tests.referee import Referee
from tests.s3_server import S3Server
from tests.table_shapes import _canonical, rows_digest


def copy_table(s3: S3Server, uri: str, into: Path) -> Path:
    """Every object under the table's prefix, downloaded with boto3 from the server itself into `into`."""
    prefix = uri.removeprefix(f"s3://{s3.bucket}/").rstrip("/") + "/"
    client = s3.client()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=s3.bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            target = into / item["Key"][len(prefix) :]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(client.get_object(Bucket=s3.bucket, Key=item["Key"])["Body"].read())
    return into


def our_files(table: Path) -> set[str]:
    """Data files named as recluster writes them, relative to the table root."""
    return {
        str(p.relative_to(table)) for p in table.rglob("*.parquet") if "_delta_log" not in p.parts and is_ours(p.name)
    }


def is_ours(name: str) -> bool:
    return parse_data_file_name(name) is not None


def referenced_by_retained_versions(table: Path) -> set[str]:
    """Every file some version still loadable from the log references (delta-rs), newest version first."""
    at = DeltaTable(str(table))
    referenced: set[str] = set()
    for version in range(at.version(), -1, -1):
        try:
            at.load_as_version(version)
        except Exception:  # cleaned up behind a checkpoint: no older version is retained either
            break
        referenced.update(str(Path(uri.removeprefix("file://")).relative_to(table)) for uri in at.file_uris())
    return referenced


def our_task_ids(table: Path) -> set[str]:
    """The task ids of the commits of ours the log (still) holds."""
    return {str(e["recluster.taskId"]) for e in DeltaTable(str(table)).history() if e.get("recluster.taskId")}


@dataclass(frozen=True, slots=True)
class TableCheck:
    """The table after a step, as other readers see it."""

    version: int
    rows: int
    expected_rows: int
    rows_exact: bool
    lost_rows: int
    duplicated_rows: int
    dangling: tuple[str, ...]
    """Files the latest version references that are not there."""
    orphans: tuple[str, ...]
    """Our files no retained version references."""
    task_ids: frozenset[str]

    @property
    def intact(self) -> bool:
        return self.rows_exact and not self.dangling


def check_table(s3: S3Server, uri: str, referee: Referee, appended: pa.Table, copy: Path) -> TableCheck:
    """Copy the table to `copy` and judge it (see the module docstring)."""
    local = copy_table(s3, uri, copy)
    latest = DeltaTable(str(local))
    dangling = tuple(sorted(u for u in latest.file_uris() if not Path(u.removeprefix("file://")).exists()))
    read = referee.read(local) if not dangling else pa.table({})
    got, want = rows_digest(read) if not dangling else (0, ""), rows_digest(appended)
    lost, duplicated = (0, 0) if got == want else _difference(read, appended)
    orphans = tuple(sorted(our_files(local) - referenced_by_retained_versions(local)))
    return TableCheck(
        latest.version(),
        got[0],
        want[0],
        got == want,
        lost,
        duplicated,
        dangling,
        orphans,
        frozenset(our_task_ids(local)),
    )


def _difference(read: pa.Table, appended: pa.Table) -> tuple[int, int]:
    """(rows appended but not read, rows read more often than appended)."""

    def rows(table: pa.Table) -> Counter[Any]:
        if table.num_rows == 0:
            return Counter()
        return Counter(
            tuple(sorted(r.items())) for r in _canonical(table.select(sorted(appended.column_names))).to_pylist()
        )

    got, want = rows(read), rows(appended)
    return sum((want - got).values()), sum((got - want).values())
