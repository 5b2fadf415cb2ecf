"""Row tracking (writer feature `rowTracking`): every row keeps its row id and row commit version through our
rewrites, the way Delta Spark's OPTIMIZE keeps them.

A row's id is its file's materialized row-id column where that is not NULL, else the file's `baseRowId` plus the
row's position in the file (deleted rows counted); its commit version likewise from the materialized column or
the file's `defaultRowCommitVersion`. A rewrite writes both materialized columns (named by the table properties)
for every row it keeps, and its adds get fresh `baseRowId`s above the `delta.rowTracking` high water mark, which
the commit raises, and the commit's version as `defaultRowCommitVersion`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recluster.core.errors import TableError

ROW_ID_COLUMN = "delta.rowTracking.materializedRowIdColumnName"
ROW_COMMIT_VERSION_COLUMN = "delta.rowTracking.materializedRowCommitVersionColumnName"
DOMAIN = "delta.rowTracking"
FEATURE = "rowTracking"


@dataclass(frozen=True, slots=True)
class RowTracking:
    """What a merge needs to keep its inputs' row ids (picklable: it travels to Spark tasks)."""

    row_id_column: str
    commit_version_column: str
    inputs: tuple[tuple[int, int], ...]
    """Per input file (in the task's order): its baseRowId and defaultRowCommitVersion."""

    @property
    def fields(self) -> list[pa.Field]:
        """The materialized columns every output file holds (after the table's data columns)."""
        return [pa.field(self.row_id_column, pa.int64()), pa.field(self.commit_version_column, pa.int64())]


def materialized_columns(properties: Mapping[str, str]) -> tuple[str, str] | None:
    """The materialized row-id and row-commit-version column names, when the table tracks row ids."""
    if properties.get("delta.enableRowTracking", "false").lower() != "true":
        return None
    row_id, version = properties.get(ROW_ID_COLUMN), properties.get(ROW_COMMIT_VERSION_COLUMN)
    return (row_id, version) if row_id and version else None


def row_tracking_for(
    properties: Mapping[str, str], paths: Sequence[str], row_ids: Mapping[str, tuple[int | None, int | None]]
) -> RowTracking | None:
    """The row tracking of a merge of `paths` (None: the table tracks no row ids). `row_ids` holds each live
    file's baseRowId and defaultRowCommitVersion from the log; an input without them cannot keep its ids."""
    names = materialized_columns(properties)
    if names is None:
        return None
    inputs = []
    for path in paths:
        base, version = row_ids.get(path, (None, None))
        if base is None or version is None:
            raise TableError(f"file {path} has no baseRowId/defaultRowCommitVersion: its row ids cannot be kept")
        inputs.append((base, version))
    return RowTracking(names[0], names[1], tuple(inputs))


def with_row_tracking(piece: pa.RecordBatch, tracking: RowTracking, index: int, first: int) -> pa.RecordBatch:
    """A batch of input file `index` whose first row is at position `first` of the file, with both materialized
    columns filled in for every row (kept where the file has them, derived where NULL or absent)."""
    base, version = tracking.inputs[index]
    positions = pa.array(np.arange(base + first, base + first + piece.num_rows, dtype=np.int64))
    columns = dict(zip(piece.schema.names, piece.columns, strict=True))
    found = columns.get(tracking.row_id_column)
    columns[tracking.row_id_column] = positions if found is None else pc.coalesce(found.cast(pa.int64()), positions)
    found = columns.get(tracking.commit_version_column)
    default = pa.scalar(version, pa.int64())
    columns[tracking.commit_version_column] = (
        pa.array(np.full(piece.num_rows, version, dtype=np.int64))
        if found is None
        else pc.coalesce(found.cast(pa.int64()), default)
    )
    return pa.RecordBatch.from_arrays(list(columns.values()), names=list(columns))


def high_water_mark(domains: Mapping[str, Mapping[str, Any]]) -> int:
    """The highest row id assigned so far (-1: none)."""
    domain = domains.get(DOMAIN)
    return int(json.loads(domain["configuration"]).get("rowIdHighWaterMark", -1)) if domain else -1


def assign_row_ids(
    adds: list[dict[str, Any]], domains: Mapping[str, Mapping[str, Any]], version: int
) -> list[dict[str, Any]]:
    """Give each add a fresh baseRowId (its rows' ids if they were new) and `version` as its
    defaultRowCommitVersion; returns the domainMetadata action with the raised high water mark."""
    mark = high_water_mark(domains)
    for action in adds:
        add = action["add"]
        add["baseRowId"] = mark + 1
        add["defaultRowCommitVersion"] = version
        mark += int(json.loads(add["stats"])["numRecords"])
    configuration = json.dumps({"rowIdHighWaterMark": mark, "domainName": DOMAIN})
    return [{"domainMetadata": {"domain": DOMAIN, "configuration": configuration, "removed": False}}]
