"""Helpers shared by the tests."""

from __future__ import annotations

import hashlib

import pyarrow as pa


def row_multiset(table: pa.Table) -> tuple[int, str]:
    """Count plus an order-independent hash over all columns: equal iff the row multisets are equal."""
    columns = sorted(table.column_names)
    digests = sorted(
        hashlib.sha256(repr(tuple(row[c] for c in columns)).encode()).hexdigest() for row in table.to_pylist()
    )
    return table.num_rows, hashlib.sha256("".join(digests).encode()).hexdigest()


METRIC_KEYS = [
    "total_block_count",
    "constant_block_count",
    "unclustered_block_count",
    "total_rows",
    "total_bytes",
    "average_overlaps",
    "average_depth",
    "p95_depth",
    "p99_depth",
    "block_depth_histogram",
]
"""The metric keys of `recluster info --json`, in order (the DESIGN §4 contract)."""
