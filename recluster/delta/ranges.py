"""The range bounds of a curve key, stored with the table under `_recluster/` in its directory (Delta readers and
VACUUM leave `_`-prefixed directories alone, as does `recluster clean`), never in the Delta log: a metaData commit
would fail every concurrent Delta Spark transaction (docs/guarantees.md#no-metadata-commits-of-our-own).

- `ranges-<id>.json`: the bounds, content-addressed (the id is their hash), so a file never changes.
- `current-ranges-<columns>-<sequence>.json`: which bounds are current for a key's columns (a fingerprint of the
  names), the highest sequence winning. Each is created only if absent (`storage.put_if_absent`), with the sequence
  after the newest one its writer saw: of two processes that sample new bounds at once exactly one wins, and the
  other reloads and uses the winner's. Any process reads the same current bounds from the table alone.
- Tables whose bounds an older recluster named in the table property `recluster.curveRanges` keep them until new
  bounds are sampled (the property counts as sequence 0).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from recluster.core.blocks import Block, parse_data_file_name
from recluster.core.curves import RANGES_PER_COLUMN, RangeBounds, sample_quantile_bounds
from recluster.core.errors import TableError
from recluster.core.key_bounds import bound_to_json
from recluster.core.keys import ClusterKey, key_fingerprint
from recluster.delta.log import PRODUCER, CommitEntry
from recluster.delta.storage import file_location, put_if_absent, stored_location, table_filesystem

RANGES_DIRECTORY = "_recluster"
POINTER_PREFIX = "current-ranges-"
SAMPLE_PER_RANGE = 100
"""Values sampled per range and column when bounds are computed (100,000 for 1,000 ranges)."""

_loaded: dict[tuple[str, str], RangeBounds] = {}
_pointed: dict[tuple[str, str], str] = {}
"""Per (table, pointer file), the bounds id it names (pointer files never change either)."""


def ranges_path(bounds_id: str) -> str:
    return f"{RANGES_DIRECTORY}/ranges-{bounds_id}.json"


def pointer_path(columns: Sequence[str], sequence: int) -> str:
    return f"{RANGES_DIRECTORY}/{POINTER_PREFIX}{key_fingerprint(columns)}-{sequence:010d}.json"


def load_range_bounds(uri: str, storage_options: Mapping[str, str], bounds_id: str) -> RangeBounds:
    """The bounds of one id (cached: the file never changes)."""
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
    """Write the bounds' file unless it exists (then it holds the same bounds: its name is their hash); created
    whole or not at all, so a reader never sees it half written."""
    filesystem = table_filesystem(uri, storage_options)
    filesystem.create_dir(stored_location(uri, RANGES_DIRECTORY), recursive=True)
    put_if_absent(uri, ranges_path(bounds.id), bounds.to_json().encode("utf-8"), storage_options)


@dataclass(frozen=True, slots=True)
class CurrentRanges:
    """The range bounds a key's columns are on now, and the sequence of the pointer that names them (0: none, or
    the legacy table property)."""

    bounds: RangeBounds | None
    sequence: int

    def __str__(self) -> str:
        return f"{self.bounds or 'no ranges'} (sequence {self.sequence})"


def _newest_pointer(uri: str, storage_options: Mapping[str, str], columns: Sequence[str]) -> tuple[int, str] | None:
    """(sequence, stored path) of the newest pointer of `columns`: one listing of `_recluster/`."""
    filesystem = table_filesystem(uri, storage_options)
    selector = pafs.FileSelector(stored_location(uri, RANGES_DIRECTORY), allow_not_found=True)
    prefix = f"{POINTER_PREFIX}{key_fingerprint(columns)}-"
    names = [info.base_name for info in filesystem.get_file_info(selector)]
    numbers = [n[len(prefix) : -len(".json")] for n in names if n.startswith(prefix) and n.endswith(".json")]
    sequences = [int(number) for number in numbers if number.isdigit()]
    if not sequences:
        return None
    newest = max(sequences)
    return newest, pointer_path(columns, newest)


def _pointed_bounds_id(uri: str, storage_options: Mapping[str, str], path: str) -> str:
    cached = _pointed.get((uri, path))
    if cached is not None:
        return cached
    location = file_location(uri, path)
    try:
        with table_filesystem(uri, storage_options).open_input_stream(location) as stream:
            bounds_id = str(json.loads(stream.read().decode("utf-8"))["ranges"])
    except (OSError, ValueError, KeyError) as error:
        raise TableError(f"cannot read the curve's current range bounds {location}: {error}") from None
    _pointed[(uri, path)] = bounds_id
    return bounds_id


def current_range_bounds(
    uri: str, storage_options: Mapping[str, str], columns: Sequence[str], legacy_id: str | None = None
) -> CurrentRanges:
    """The bounds `columns` are on now: the newest pointer's, else those `legacy_id` (the table property
    `recluster.curveRanges`) names; bounds of other columns count as none."""
    newest = _newest_pointer(uri, storage_options, columns)
    if newest is not None:
        sequence, bounds_id = newest[0], _pointed_bounds_id(uri, storage_options, newest[1])
    elif legacy_id:
        sequence, bounds_id = 0, legacy_id
    else:
        return CurrentRanges(None, 0)
    bounds = load_range_bounds(uri, storage_options, bounds_id)
    return CurrentRanges(bounds if bounds.columns == tuple(columns) else None, sequence)


def publish_range_bounds(
    uri: str, storage_options: Mapping[str, str], bounds: RangeBounds, after: CurrentRanges, version: int
) -> bool:
    """Make `bounds` (sampled at `version`) current for their columns: store them, then create the pointer after
    `after`'s only if absent. False when another process published that sequence first: its bounds are current."""
    store_range_bounds(uri, storage_options, bounds)
    pointer = {"columns": list(bounds.columns), "ranges": bounds.id, "sampledVersion": version}
    data = json.dumps(pointer, sort_keys=True).encode("utf-8")
    return put_if_absent(uri, pointer_path(bounds.columns, after.sequence + 1), data, storage_options)


def on_other_curve(commit: CommitEntry, key: ClusterKey) -> bool:
    """A rewrite of ours whose outputs lie on another curve than curve key `key`'s: new bounds were published (no
    metaData commit says so), so a state keyed on `key` is stale: reload it."""
    if commit.producer != PRODUCER or not key.on_curve:
        return False
    written = (parse_data_file_name(str(add.get("path", ""))) for add in commit.adds)
    return any(w is not None and w.curve_range is not None and w.fingerprint != key.fingerprint for w in written)


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
