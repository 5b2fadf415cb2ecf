"""A snapshot's blocks column by column (docs/architecture.md#blocks-as-columns). Pure: numpy and Arrow arrays, no I/O.

A million-file table as a million `Block` objects costs about a microsecond and 600 bytes each; metrics and
selection need only a few numbers per file. `BlockTable` holds them as arrays (paths and per-column stats stay
Arrow arrays), ranks every key once, and makes a `Block` only for a file a task takes (or for everything, once,
when iterated: the engine's per-file paths). Keys of one numeric column in an unpartitioned table (the common
case) are held as the unsigned 64-bit words they order as; any other key as bytes objects.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, overload

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from recluster.core.blocks import Block, Partition, file_age
from recluster.core.deletion_vectors import DeletionVector
from recluster.core.file_columns import (
    Column,
    Numbers,
    column_positions,
    number_at,
    numbers_of,
    position,
    take_files,
    total_of,
    value_at,
)
from recluster.core.ranks import (
    BoolArray,
    FloatArray,
    IntArray,
    dense_ranks,
    key_arrays,
    rank_keys,
    rank_words,
    word_key,
)

NO_HORIZON = -1


class BlockTable(Sequence[Block]):
    """The blocks of one snapshot (or any set of blocks) as columns; indexing makes a `Block`.

    Everything selection and metrics read: rows, bytes, key ranks (`key_ranks`), level, partition code, key
    fingerprint code, run age and absorb horizon (from the file name), first-key-column positions.
    """

    def __init__(
        self,
        *,
        paths: pa.Array | pa.ChunkedArray | Sequence[str],
        rows: Numbers,
        sizes: Numbers,
        min_keys: npt.NDArray[Any],
        max_keys: npt.NDArray[Any],
        clustered: BoolArray,
        ranged: BoolArray,
        lows: Sequence[Column],
        highs: Sequence[Column],
        levels: IntArray,
        partition_codes: IntArray,
        partitions: Sequence[Partition],
        fingerprint_codes: IntArray,
        fingerprints: Sequence[str | None],
        modified_ms: Numbers,
        ages: IntArray,
        horizons: IntArray,
        curve_ranges: Mapping[int, tuple[int, int]] | None = None,
        stats_overrides: Mapping[int, tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]] | None = None,
        deletion_vectors: Mapping[int, DeletionVector] | None = None,
        blocks: Sequence[Block] | None = None,
        partition_prefixes: Sequence[bytes] | None = None,
    ) -> None:
        self.paths = paths
        self._rows, self._sizes, self._modified = rows, sizes, modified_ms
        """Kept as the log's Arrow columns when nothing had to be filled in: the floor holds them already."""
        self.min_keys, self.max_keys, self.clustered = min_keys, max_keys, clustered
        self.partition_prefixes = tuple(partition_prefixes) if partition_prefixes is not None else None
        """Set when the keys are words within partitions: a file's key is its partition's prefix, then the word's
        key (a partitioned table's million keys held as numbers, not as byte strings)."""
        self.ranged = ranged
        """Files with min/max tuples of every key column (NULL values allowed): what column scans count."""
        self.lows, self.highs = tuple(lows), tuple(highs)
        self.levels = levels
        self.partition_codes, self.partitions = partition_codes, tuple(partitions)
        self.fingerprint_codes, self.fingerprints = fingerprint_codes, tuple(fingerprints)
        self.ages, self.horizons = ages, horizons
        self.curve_ranges = dict(curve_ranges or {})
        """Under a curve key: each file's curve values (files not sorted on the curve are absent)."""
        self.stats_overrides = dict(stats_overrides or {})
        """Files whose min/max tuples came from the Parquet footer (not the log columns)."""
        self.deletion_vectors = dict(deletion_vectors or {})
        self._given = blocks
        """The `Block`s the table was made from, if any."""
        self._made: dict[int, Block] = {}
        """The Blocks made so far (a list of a million empty slots alone would cost 8 MB)."""
        self._ranks: tuple[IntArray, IntArray, int] | None = None
        self._clustered_count = int(np.count_nonzero(clustered))

    @classmethod
    def from_blocks(cls, blocks: Sequence[Block]) -> BlockTable:
        """The columns of `Block`s made elsewhere (tests, commits, the job's state): each attribute read once for
        every block at C speed (`attrgetter`), a file name parsed only when it can be one recluster wrote."""
        if isinstance(blocks, BlockTable):
            return blocks
        blocks = blocks if isinstance(blocks, list | tuple) else list(blocks)
        count = len(blocks)
        paths, rows, sizes, min_keys, max_keys, min_values, max_values, levels, partition, fingerprint, modified = (
            list(map(operator.attrgetter(name), blocks)) for name in _BLOCK_FIELDS
        )
        partitions = list(dict.fromkeys(partition))
        fingerprints = list(dict.fromkeys(fingerprint))
        ages = np.array(modified, dtype=np.int64)
        horizons = np.full(count, NO_HORIZON, dtype=np.int64)
        for index in itertools.compress(itertools.count(), map(operator.contains, paths, itertools.repeat("part-L"))):
            age, horizon = file_age(blocks[index])
            if horizon is not None:
                ages[index], horizons[index] = age, horizon
        width = max(map(len, filter(None, min_values)), default=0)
        lows, highs = key_arrays(min_keys, max_keys)
        return cls(
            paths=paths,
            rows=np.array(rows, dtype=np.int64),
            sizes=np.array(sizes, dtype=np.int64),
            min_keys=lows,
            max_keys=highs,
            clustered=_flags(min_keys, operator.is_not, None) & _flags(max_keys, operator.is_not, None),
            ranged=_flags(min_values, operator.truth) & _flags(max_values, operator.truth),
            lows=[[v[j] if v and j < len(v) else None for v in min_values] for j in range(width)],
            highs=[[v[j] if v and j < len(v) else None for v in max_values] for j in range(width)],
            levels=np.array(levels, dtype=np.int64),
            partition_codes=_codes(partition, partitions),
            partitions=partitions,
            fingerprint_codes=_codes(fingerprint, fingerprints),
            fingerprints=fingerprints,
            modified_ms=np.array(modified, dtype=np.int64),
            ages=ages,
            horizons=horizons,
            curve_ranges=_present(blocks, "curve_range"),
            deletion_vectors=_present(blocks, "deletion_vector"),
            blocks=blocks,
        )

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, index: int) -> Block: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Block]: ...

    def __getitem__(self, index: int | slice) -> Block | Sequence[Block]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if self._given is not None:
            return self._given[index]
        block = self._made.get(index)
        if block is None:
            block = self._made[index] = self._make(index)
        return block

    def __iter__(self) -> Iterator[Block]:
        for index in range(len(self)):
            yield self[index]

    def take(self, indices: IntArray | Sequence[int]) -> list[Block]:
        """The `Block`s of these files (made once each)."""
        return [self[int(i)] for i in indices]

    def _key(self, keys: npt.NDArray[Any], index: int) -> bytes | None:
        if not self.clustered[index]:
            return None
        if keys.dtype == object:
            key: bytes = keys[index]
            return key
        prefix = b"" if self.partition_prefixes is None else self.partition_prefixes[self.partition_codes[index]]
        return prefix + word_key(keys[index])

    def _make(self, index: int) -> Block:
        if index in self.stats_overrides:
            mins, maxes = self.stats_overrides[index]
        elif self.lows:
            mins = tuple(value_at(c, index) for c in self.lows)
            maxes = tuple(value_at(c, index) for c in self.highs)
        else:
            mins = maxes = None
        return Block(
            str(value_at(self.paths, index)),
            number_at(self._rows, index),
            number_at(self._sizes, index),
            self._key(self.min_keys, index),
            self._key(self.max_keys, index),
            mins,
            maxes,
            int(self.levels[index]),
            self.partitions[self.partition_codes[index]],
            self.fingerprints[self.fingerprint_codes[index]],
            number_at(self._modified, index),
            self.deletion_vectors.get(index),
            self.curve_ranges.get(index),
        )

    def rows_of(self, indices: IntArray | None = None) -> IntArray:
        """Row counts of these files (None: all) as int64."""
        return self._numbers("_rows", indices)

    def modified_of(self, indices: IntArray | None = None) -> IntArray:
        """Modification times (ms) of these files (None: all) as int64."""
        return self._numbers("_modified", indices)

    def sizes_of(self, indices: IntArray | None = None) -> IntArray:
        """Sizes in bytes of these files (None: all) as int64."""
        return self._numbers("_sizes", indices)

    def _numbers(self, name: str, indices: IntArray | None) -> IntArray:
        """One of the per-file number columns; in a partitioned table a subset asked converts an Arrow column once
        and keeps it (selection asks partition by partition: a conversion each would cost partitions x files)."""
        numbers: Numbers = getattr(self, name)
        if indices is not None and len(self.partitions) > 1 and not isinstance(numbers, np.ndarray):
            numbers = numbers_of(numbers, None)
            setattr(self, name, numbers)
        return numbers_of(numbers, indices)

    def smallest_first(self, indices: IntArray) -> IntArray:
        """These files ordered by size, then path (one Arrow sort: a backfilled table has a million of them)."""
        if not len(indices):
            return indices
        columns = pa.table({"size": self.sizes_of(indices), "path": take_files(self.paths, indices)})
        order = pc.sort_indices(columns, sort_keys=[("size", "ascending"), ("path", "ascending")])
        ordered: IntArray = indices[order.to_numpy()]
        return ordered

    def total_rows(self, indices: IntArray | None = None) -> int:
        return total_of(self._rows, indices)

    def total_bytes(self, indices: IntArray | None = None) -> int:
        return total_of(self._sizes, indices)

    def key_ranks(self) -> tuple[IntArray, IntArray, int]:
        """Every file's minimum and maximum key as int32 ranks among all the table's distinct keys (one sort,
        kept); -1 for an unclustered file."""
        if self._ranks is None:
            every = self._clustered_count == len(self)
            chosen: IntArray | slice = slice(None) if every else np.flatnonzero(self.clustered)
            if self.min_keys.dtype == object:
                ranks, points = rank_keys([*self.min_keys[chosen], *self.max_keys[chosen]])
                ranks = ranks.astype(np.int32)
            else:
                groups = None
                if self.partition_prefixes is not None:  # partitions in the order of their prefixes, never overlapping
                    order = sorted(range(len(self.partition_prefixes)), key=self.partition_prefixes.__getitem__)
                    place = np.empty(len(order), dtype=np.int32)
                    place[order] = np.arange(len(order), dtype=np.int32)
                    groups = place[self.partition_codes[chosen]]
                ranks, points = rank_words(self.min_keys[chosen], self.max_keys[chosen], groups)
            count = self._clustered_count
            if every:
                lo, hi = ranks[:count], ranks[count:]
            else:
                lo, hi = np.full(len(self), -1, dtype=np.int32), np.full(len(self), -1, dtype=np.int32)
                lo[chosen], hi[chosen] = ranks[:count], ranks[count:]
            self._ranks = (lo, hi, points)
        return self._ranks

    def ranks_of(self, indices: IntArray, *, dense: bool = False) -> tuple[IntArray, IntArray, int]:
        """These (distinct, clustered) files' key ranks, for `ranked_depth_profile`: the table's own while they are
        a good share of it (points no file of theirs touches are allowed), else dense among themselves (a small
        set's arrays stay small). `dense`: always dense among their own ends, so the table's own only when they are
        all its clustered files (no second sort of a million files' keys)."""
        lo, hi, points = self.key_ranks()
        whole = len(indices) == self._clustered_count
        if whole or (not dense and len(indices) * 4 >= self._clustered_count):
            return lo[indices], hi[indices], points
        return dense_ranks(lo[indices], hi[indices])

    def first_positions(self, indices: IntArray) -> tuple[FloatArray, FloatArray]:
        """These files' first-key-column minimums and maximums as numbers on that column's axis (`position`); NaN
        where there is none (no stats, a NULL, a type that does not subtract)."""
        if not self.lows:
            return np.full(len(indices), np.nan), np.full(len(indices), np.nan)
        every = len(indices) == len(self)  # (indices are distinct: all of them, in some order)
        if every:  # positions of all, then in the order asked (one full-size temporary at a time)
            lows, highs = column_positions(self.lows[0])[indices], column_positions(self.highs[0])[indices]
        else:
            lows, highs = (
                column_positions(take_files(self.lows[0], indices)),
                column_positions(take_files(self.highs[0], indices)),
            )
        overridden = np.fromiter(self.stats_overrides, dtype=np.int64, count=len(self.stats_overrides))
        for place in np.flatnonzero(np.isin(indices, overridden)).tolist():
            mins, maxes = self.stats_overrides[int(indices[place])]
            lows[place], highs[place] = position(mins[0] if mins else None), position(maxes[0] if maxes else None)
        return lows, highs

    def first_value(self, index: int, high: bool) -> Any:
        """The first key column's minimum (or maximum) of one file; None when it has none."""
        values = (self[index].max_values if high else self[index].min_values) or (None,)
        return values[0]

    def column_values(self, index: int, high: bool) -> Column:
        """One key column's minimum (or maximum) of every file, overrides applied; a column of a table built
        from the log stays an Arrow array while no file's stats came from elsewhere."""
        column = (self.highs if high else self.lows)[index]
        if not self.stats_overrides or not isinstance(column, pa.Array | pa.ChunkedArray):
            return column
        values = column.to_pylist()
        for file, (mins, maxes) in self.stats_overrides.items():
            chosen = maxes if high else mins
            values[file] = chosen[index] if chosen and index < len(chosen) else None
        return values


_BLOCK_FIELDS = (
    "path",
    "rows",
    "bytes",
    "min_key",
    "max_key",
    "min_values",
    "max_values",
    "level",
    "partition",
    "key_fingerprint",
    "modified_ms",
)
"""The `Block` attributes `from_blocks` reads, each for every block in one `map` (`zip(*...)` over a million
tuples is far slower)."""


def _flags(values: Sequence[Any], test: Callable[..., bool], *against: Any) -> BoolArray:
    """`test(value, *against)` of every value, at C speed."""
    tests = map(test, values, *(itertools.repeat(a) for a in against))
    return np.fromiter(tests, dtype=bool, count=len(values))


def _present(blocks: Sequence[Block], name: str) -> dict[int, Any]:
    """{index: value} of the blocks whose attribute `name` is set."""
    values = list(map(operator.attrgetter(name), blocks))
    return {i: values[i] for i in itertools.compress(itertools.count(), _flags(values, operator.is_not, None))}


def _codes(values: Sequence[Any], distinct: Sequence[Any]) -> IntArray:
    """Each value's place in `distinct`."""
    if len(distinct) == 1:
        return np.zeros(len(values), dtype=np.int64)
    place = {v: i for i, v in enumerate(distinct)}
    return np.array([place[v] for v in values], dtype=np.int64)


def release_arrow_memory() -> None:
    """Hand back the pages Arrow's pool keeps after a big step over every file: the numpy arrays of the next step
    cannot reuse them, so they would add to the process's peak memory (a million files: tens of MB)."""
    pa.default_memory_pool().release_unused()


def as_table(blocks: Sequence[Block]) -> BlockTable:
    """A `BlockTable` as it is; `Block`s into one."""
    return blocks if isinstance(blocks, BlockTable) else BlockTable.from_blocks(blocks)
