"""Sorted runs (docs/concepts.md) found from the log alone, as `absorb` and its time-like decision see them. Pure."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recluster.core.block_table import NO_HORIZON, BlockTable, as_table
from recluster.core.blocks import Block
from recluster.core.ranks import IntArray


@dataclass(frozen=True, slots=True)
class Run:
    """One sorted run (docs/concepts.md#selection-policies) as `Block`s: the files sharing an age (see `Runs`)."""

    age_ms: int
    files: tuple[Block, ...]
    horizon_ms: int | None = None
    """Largest horizon among its absorb-written files: an absorb takes in the runs up to this age."""


@dataclass(frozen=True, slots=True, eq=False)
class Runs(Sequence[Run]):
    """The sorted runs of one partition's clustered files, oldest first, recovered from the log alone.

    The age of a file written by `absorb` is its run id (the age of the run that absorbed); of any other
    file its modificationTime, so an appended file is its own run and a `levels` merge output one run.
    """

    table: BlockTable
    files: IntArray
    """Table indices, run by run, each run by (min key, path)."""
    bounds: IntArray
    """Run i is files[bounds[i]:bounds[i + 1]]."""
    ages: IntArray
    horizons: IntArray
    """Per run, the largest horizon of its absorb-written files (NO_HORIZON: none)."""

    def __len__(self) -> int:
        return len(self.ages)

    @overload
    def __getitem__(self, index: int) -> Run: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Run]: ...

    def __getitem__(self, index: int | slice) -> Run | Sequence[Run]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        horizon = int(self.horizons[index])
        files = tuple(self.table.take(self.members(index)))
        return Run(int(self.ages[index]), files, None if horizon == NO_HORIZON else horizon)

    def __iter__(self) -> Iterator[Run]:
        return (self[i] for i in range(len(self)))

    def members(self, index: int) -> IntArray:
        return self.files[self.bounds[index] : self.bounds[index + 1]]


def recover_runs(blocks: Sequence[Block]) -> Runs:
    """The runs of one partition's clustered files, oldest first."""
    table = as_table(blocks)
    return table_runs(table, np.arange(len(table)))


def table_runs(table: BlockTable, indices: IntArray) -> Runs:
    """The runs of some clustered files of a table (distinct, ascending): by age, each by (min key, path)."""
    every = len(indices) == len(table)  # then indices is every file in order: no gathers
    ages = table.ages if every else table.ages[indices]
    mins, _, points = table.key_ranks()
    mins = mins if every else mins[indices]
    order = sort_pairs(ages, mins, points)
    if len(order) > 1 and _tied(ages, mins, order):  # equal minimums in one run: by path (rare: ranking costs)
        paths = table.paths if isinstance(table.paths, pa.Array | pa.ChunkedArray) else pa.array(table.paths)
        path_ranks = pc.rank(pc.take(paths, pa.array(indices)), tiebreaker="dense").to_numpy().astype(np.int64)
        order = np.lexsort((path_ranks, mins, ages))
    files = indices[order]
    sorted_ages = ages[order]
    del order
    starts = np.flatnonzero(np.diff(sorted_ages, prepend=sorted_ages[:1] - 1)) if len(files) else np.zeros(0, np.int64)
    bounds = np.append(starts, len(files)).astype(np.int64)
    horizons = np.maximum.reduceat(table.horizons[files], starts) if len(starts) else np.zeros(0, np.int64)
    return Runs(table, files, bounds, sorted_ages[starts], horizons.astype(np.int64))


def _tied(ages: IntArray, mins: IntArray, order: IntArray) -> bool:
    """Whether two neighbours in `order` have the same age and minimum (checked a chunk at a time: no full-size
    temporaries)."""
    step = 1 << 16
    for start in range(0, len(order) - 1, step):
        here, after = order[start : start + step], order[start + 1 : start + step + 1]
        here = here[: len(after)]
        if np.any((ages[here] == ages[after]) & (mins[here] == mins[after])):
            return True
    return False


def sort_pairs(major: IntArray, minor: IntArray, minor_limit: int) -> IntArray:
    """The order of (major, minor) pairs, ties in input order, with minor in [0, minor_limit): one sort of one
    number per pair while those fit in 63 bits (several times faster than `np.lexsort`)."""
    if not len(major):
        return np.zeros(0, dtype=np.int64)
    low = int(major.min())
    if (int(major.max()) - low + 1) * max(minor_limit, 1) >= 1 << 63:
        return np.lexsort((minor, major))
    composite = major.astype(np.int64)  # (ranks may be int32: the product must not wrap)
    composite -= low
    composite *= max(minor_limit, 1)
    composite += minor
    return np.argsort(composite, kind="stable")
