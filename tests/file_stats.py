"""Files a predicate reads after min/max pruning, from a Delta table's add actions: the measure of the upkeep and
curve benchmarks, shared with the tests that check it (tests/test_upkeep_bench.py; bench/ imports it from here)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable

PREDICATES = 200
"""Narrow predicates per column: each covers WIDTH of the column's domain (strings: one value)."""
WIDTH = 0.001


def add_actions(path: Path) -> pa.Table:
    """The add actions of the latest version, one row per live file (flattened: stats as `min.<col>` etc.)."""
    return pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))


def as_numbers(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A column as numbers to compare (dates as days, timestamps as microseconds); strings stay strings."""
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return np.asarray(column.to_pylist(), dtype=object)
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.timestamp("us", tz=column.type.tz)).cast(pa.int64())
    elif pa.types.is_date32(column.type):
        column = column.cast(pa.int32())
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)


class Predicates:
    """Per key column, PREDICATES fixed uniform draws placed in the domain of the rows appended so far."""

    def __init__(self, batches: list[pa.Table], key: tuple[str, ...], seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.draws = {name: rng.random(PREDICATES) for name in key}
        self.prefix = np.cumsum([b.num_rows for b in batches])
        self.values = {name: as_numbers(pa.chunked_array([b[name] for b in batches])) for name in key}
        self.lows: dict[str, np.ndarray] = {}
        self.highs: dict[str, np.ndarray] = {}
        for name, values in self.values.items():
            if values.dtype != object:
                self.lows[name] = np.minimum.accumulate([values[:n].min() for n in self.prefix])
                self.highs[name] = np.maximum.accumulate([values[:n].max() for n in self.prefix])

    def at(self, step: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The predicates after append `step` (0-based): {column: (lows, highs)}."""
        out = {}
        for name, draws in self.draws.items():
            values = self.values[name]
            if values.dtype == object:
                picks = values[(draws * self.prefix[step]).astype(np.int64)]
                out[name] = (picks, picks)
                continue
            low, high = float(self.lows[name][step]), float(self.highs[name][step])
            width = (high - low) * WIDTH
            starts = low + draws * (high - low - width)
            out[name] = (starts, starts + width)
        return out


def files_read(path: Path, predicates: dict[str, tuple[np.ndarray, np.ndarray]]) -> tuple[dict[str, float], int]:
    """Per key column the mean files a predicate reads after min/max pruning; the live files."""
    actions = add_actions(path)
    read = {}
    for name, (low, high) in predicates.items():
        file_low, file_high = as_numbers(actions[f"min.{name}"]), as_numbers(actions[f"max.{name}"])
        if pa.types.is_timestamp(actions[f"max.{name}"].type):
            file_high = file_high + 999  # Delta's stats keep milliseconds: a max may be below the real one
        hits = (file_low[None, :] <= high[:, None]) & (low[:, None] <= file_high[None, :])
        read[name] = float(hits.sum(axis=1).mean())
    return read, actions.num_rows
