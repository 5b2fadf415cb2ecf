"""Count plus an order-independent hash of a table's rows, vectorized (pandas' 64-bit row hashes): the exactness
check of the benchmarks on millions of rows, shared with the tests that run them short (bench/ imports it from
here). tests/table_shapes.py's `rows_digest` hashes row by row in Python, for the tests' small tables."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np
import pandas as pd  # type: ignore[import-untyped]  # pandas-stubs is not a dependency
import pyarrow as pa


def row_fingerprint(table: pa.Table) -> tuple[int, str]:
    """Count plus an order-independent hash of all rows (64-bit row hashes, sorted, then SHA-256).

    A vectorized stand-in for tests.helpers.row_multiset (which hashes row by row in Python: minutes on millions
    of rows); quick mode checks with both.
    """
    return batches_fingerprint(table.to_batches())


def batches_fingerprint(batches: Iterable[pa.RecordBatch]) -> tuple[int, str]:
    """`row_fingerprint` of the rows of `batches`, one batch in memory at a time (plus 8 bytes a row)."""
    hashes = [
        pd.util.hash_pandas_object(batch.select(sorted(batch.schema.names)).to_pandas(), index=False).to_numpy()
        for batch in batches
    ]
    joined = np.sort(np.concatenate(hashes)) if hashes else np.zeros(0, dtype=np.uint64)
    return len(joined), hashlib.sha256(joined.tobytes()).hexdigest()
