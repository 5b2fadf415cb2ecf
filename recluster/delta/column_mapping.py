"""Column mapping (`delta.columnMapping.mode` name or id) at the I/O boundary: everything inside recluster works on
logical column names; data files and the log's stats use physical names (and Parquet field ids).

delta-rs gives the table schema with logical names, each field carrying `delta.columnMapping.physicalName` and
`delta.columnMapping.id` in its metadata (nested struct fields too). Data files written before a type was widened
(type widening) hold the narrower type: reading casts to the table's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa

PHYSICAL_NAME = b"delta.columnMapping.physicalName"
COLUMN_ID = b"delta.columnMapping.id"
PARQUET_FIELD_ID = b"PARQUET:field_id"


def stored_name(field: pa.Field) -> str:
    """The column's name in data files and stats: its physical name under column mapping."""
    metadata = field.metadata or {}
    return str(metadata[PHYSICAL_NAME].decode()) if PHYSICAL_NAME in metadata else str(field.name)


def is_mapped(schema: pa.Schema) -> bool:
    """Whether the table's columns have physical names of their own (column mapping name or id)."""
    return any(PHYSICAL_NAME in (field.metadata or {}) for field in schema)


def _stored_type(arrow_type: pa.DataType, mapped: pa.DataType) -> pa.DataType:
    """`arrow_type` with the nested field names and ids `mapped` (the same shape, from the Delta schema) has."""
    if pa.types.is_struct(arrow_type):
        return pa.struct([stored_field(arrow_type.field(i), mapped.field(i)) for i in range(arrow_type.num_fields)])
    if pa.types.is_large_list(arrow_type):
        return pa.large_list(stored_field(arrow_type.value_field, mapped.value_field))
    if pa.types.is_list(arrow_type):
        return pa.list_(stored_field(arrow_type.value_field, mapped.value_field))
    if pa.types.is_map(arrow_type):
        key = stored_field(arrow_type.key_field, mapped.key_field)
        item = stored_field(arrow_type.item_field, mapped.item_field)
        return pa.map_(key, item)
    return arrow_type


def stored_field(field: pa.Field, mapped: pa.Field | None = None) -> pa.Field:
    """How a data file holds `field` (typed as the table wants it): physical names and Parquet field ids from
    `mapped`, the same column in the Delta schema (default: `field` itself)."""
    mapped = field if mapped is None else mapped
    metadata = mapped.metadata or {}
    ids = {PARQUET_FIELD_ID: metadata[COLUMN_ID]} if COLUMN_ID in metadata else None
    return pa.field(stored_name(mapped), _stored_type(field.type, mapped.type), field.nullable, metadata=ids)


def stored_schema(schema: pa.Schema, mapped: pa.Schema) -> pa.Schema:
    """`schema` as data files hold it (`mapped`: the Delta schema, same columns in the same order)."""
    return pa.schema([stored_field(field, mapped.field(i)) for i, field in enumerate(schema)])


def stored_columns(stored: pa.Schema, present: Iterable[str]) -> list[str]:
    """The columns of a stored schema that a file holds (it may predate some)."""
    names = set(present)
    return [field.name for field in stored if field.name in names]


def logical_batch(piece: pa.RecordBatch, schema: pa.Schema, stored: pa.Schema) -> pa.RecordBatch:
    """A file's batch in the table's schema: columns found by their stored names (a column the file predates is
    NULL), types widened to the table's, physical names (nested too) given back their logical ones."""
    columns = []
    for field, kept in zip(schema, stored, strict=True):
        if kept.name not in piece.schema.names:
            columns.append(pa.nulls(piece.num_rows, field.type))
            continue
        column = piece.column(kept.name).cast(kept.type)
        columns.append(column if kept.type == field.type else column.view(field.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def stored_table(table: pa.Table, stored: pa.Schema) -> pa.Table:
    """Rows in the table's schema as a data file holds them (physical names and field ids)."""
    columns = [
        column if column.type == kept.type else pa.chunked_array([c.view(kept.type) for c in column.chunks], kept.type)
        for column, kept in zip(table.columns, stored, strict=True)
    ]
    return pa.Table.from_arrays(columns, schema=stored)


def stored_stats(stats: dict[str, Any], schema: pa.Schema, stored: pa.Schema) -> dict[str, Any]:
    """Delta stats of a file keyed by the stored column names (Delta reads them so under column mapping)."""
    names = {field.name: kept.name for field, kept in zip(schema, stored, strict=True)}
    return {
        k: {names.get(c, c): v for c, v in value.items()} if isinstance(value, dict) else value
        for k, value in stats.items()
    }
