"""Where the merge kernel cuts a sorted partition into output files (docs/guarantees.md): pure row arithmetic, shared by
the kernel (recluster/merge/kernel.py) and the models that project what merges will do
(recluster/core/estimate/)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt


def files_for_rows(rows: int, target_rows: int) -> int:
    """How many files `rows` sorted rows become by row count: a remainder within 25% of a target file joins the
    others (one file up to 1.25 targets)."""
    return max(1, math.ceil(rows / target_rows - 0.25))


def file_segments(
    run_starts: npt.NDArray[np.int64],
    rows: int,
    target_rows: int,
    files: int,
    inner_starts: npt.NDArray[np.int64] | None = None,
    forced: Sequence[int] = (),
) -> list[tuple[int, int]]:
    """[start, stop) row ranges of the output files of one sorted partition.

    `forced` are cut positions that must be kept (run starts: see `split_positions`); each stretch between them
    gets its share of the `files` (by rows, `files_for_rows` at the partition's rows per file), so a forced cut
    never leaves a sliver beside an even cut. Within a stretch: about that many even pieces, cut only at run
    starts. A run of >= target_rows rows (one heavy value) is split inside: at `inner_starts` (full-key changes,
    when runs are of the first key column) into pieces that each hold that one first-column value, or else into
    constant pieces of >= target_rows (level -1).
    """
    if rows == 0:
        return []
    edges = [0, *sorted({int(c) for c in forced if 0 < c < rows}), rows]
    if len(edges) > 2:
        rows_per_file = rows / max(files, 1)
        segments = []
        for start, stop in itertools.pairwise(edges):
            runs = run_starts[(run_starts > start) & (run_starts < stop)] - start
            inner = None if inner_starts is None else inner_starts[(inner_starts > start) & (inner_starts < stop)]
            segments += [
                (start + low, start + high)
                for low, high in file_segments(
                    np.concatenate(([0], runs)).astype(np.int64),
                    stop - start,
                    target_rows,
                    files_for_rows(stop - start, math.ceil(rows_per_file)),
                    None if inner is None else np.concatenate(([0], inner - start)).astype(np.int64),
                )
            ]
        return segments
    ends = np.append(run_starts[1:], rows)
    lengths = ends - run_starts
    cuts: set[int] = set()
    for i in np.flatnonzero(lengths >= target_rows):
        start, length = int(run_starts[i]), int(lengths[i])
        if inner_starts is None:
            pieces = length // target_rows
            cuts.update(start + (length * j) // pieces for j in range(pieces + 1))
            continue
        inside = inner_starts[(inner_starts >= start) & (inner_starts < start + length)] - start
        for low, high in file_segments(inside, length, target_rows, max(1, length // target_rows)):
            cuts.update((start + low, start + high))
    if files > 1:
        ideal = np.array([(rows * j) // files for j in range(1, files)], dtype=np.int64)
        right = np.clip(np.searchsorted(run_starts, ideal), 0, len(run_starts) - 1)
        left = np.clip(right - 1, 0, len(run_starts) - 1)
        nearest = np.where(
            np.abs(run_starts[left] - ideal) <= np.abs(run_starts[right] - ideal),
            run_starts[left],
            run_starts[right],
        )
        cuts.update(int(c) for c in nearest)
    bounds = [0, *sorted(c for c in cuts if 0 < c < rows), rows]
    return list(itertools.pairwise(bounds))
