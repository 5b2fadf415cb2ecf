"""The range bounds of a curve key, stored with the table: `_recluster/ranges-<id>.json` in its directory (Delta
readers and VACUUM leave `_`-prefixed directories alone), named by the table property `recluster.curveRanges`.
Content-addressed, so any process reads the same bounds from the table alone and a rewrite of the file is harmless.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from recluster.core.blocks import Block
from recluster.core.curves import RANGES_PER_COLUMN, RangeBounds, sample_quantile_bounds
from recluster.core.errors import TableError
from recluster.core.keys import ClusterKey, bound_to_json
from recluster.delta.storage import file_location, table_filesystem

RANGES_DIRECTORY = "_recluster"
SAMPLE_PER_RANGE = 100
"""Values sampled per range and column when bounds are computed (100,000 for 1,000 ranges)."""

_loaded: dict[tuple[str, str], RangeBounds] = {}


def ranges_path(bounds_id: str) -> str:
    return f"{RANGES_DIRECTORY}/ranges-{bounds_id}.json"


def load_range_bounds(uri: str, storage_options: Mapping[str, str], bounds_id: str) -> RangeBounds:
    """The bounds a table property names (cached: the file never changes)."""
    cached = _loaded.get((uri, bounds_id))
    if cached is not None:
        return cached
    filesystem = table_filesystem(uri, storage_options)
    location = file_location(uri, ranges_path(bounds_id))
    try:
        with filesystem.open_input_stream(location) as stream:
            bounds = RangeBounds.from_json(stream.read().decode("utf-8"))
    except (OSError, ValueError, KeyError) as error:
        raise TableError(f"cannot read the curve's range bounds {location}: {error}") from None
    if bounds.id != bounds_id:
        raise TableError(f"range bounds {location} do not match their id {bounds_id} (the file was changed)")
    _loaded[(uri, bounds_id)] = bounds
    return bounds


def store_range_bounds(uri: str, storage_options: Mapping[str, str], bounds: RangeBounds) -> None:
    filesystem = table_filesystem(uri, storage_options)
    location = file_location(uri, ranges_path(bounds.id))
    parent = location.rsplit("/", 1)[0]
    filesystem.create_dir(parent, recursive=True)
    with filesystem.open_output_stream(location) as sink:
        sink.write(bounds.to_json().encode("utf-8"))


def sample_range_bounds(
    uri: str,
    storage_options: Mapping[str, str],
    blocks: Sequence[Block],
    key: ClusterKey,
    ranges: int = RANGES_PER_COLUMN,
) -> RangeBounds:
    """Quantile bounds of each key column from a random sample of the live files' rows (NULL and NaN left out:
    they have ranks of their own)."""
    filesystem = table_filesystem(uri, storage_options)
    total = sum(b.rows for b in blocks)
    share = min(1.0, SAMPLE_PER_RANGE * ranges / max(total, 1))
    generator = np.random.default_rng(total)
    pieces: list[pa.Table] = []
    for block in blocks:
        with filesystem.open_input_file(file_location(uri, block.path)) as handle:
            parquet = pq.ParquetFile(handle)
            present = [c for c in key.columns if c.stored_name in parquet.schema_arrow.names]
            table = parquet.read(columns=[c.stored_name for c in present]).rename_columns([c.name for c in present])
        take = min(table.num_rows, math.ceil(table.num_rows * share))
        chosen = np.sort(generator.choice(table.num_rows, size=take, replace=False))
        pieces.append(table.take(pa.array(chosen)))
    bounds: list[tuple[Any, ...]] = []
    for column in key.columns:
        values = [p.column(column.name) for p in pieces if column.name in p.column_names]
        if not values:
            bounds.append(())
            continue
        widest = pa.unify_schemas([pa.schema([("v", v.type)]) for v in values], promote_options="permissive")
        sample = pa.chunked_array(
            [c.cast(widest.field(0).type) for v in values for c in v.chunks], widest.field(0).type
        )
        bounds.append(tuple(bound_to_json(v, column) for v in sample_quantile_bounds(sample, ranges)))
    return RangeBounds(key.names, tuple(bounds))
