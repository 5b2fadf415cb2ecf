"""A pure model of a table: files hold real int64 keys, a merge sorts and cuts them as the merge kernel does (at
target_rows, where the key changes, and at the task's split values: `recluster.core.segments`), and the product's
own selection (`select_merge_tasks`) decides the merges. The tests drive the policies with it; `estimate` projects
a table's future with it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from recluster.core.blocks import LEVEL_CONSTANT, Block, data_file_name
from recluster.core.key_encoding import encode_key
from recluster.core.keys import KeyColumn, KeyType, key_fingerprint
from recluster.core.metrics import clustering_metrics
from recluster.core.segments import file_segments, files_for_rows
from recluster.core.selection import select_merge_tasks
from recluster.core.selection.plan import MergeTask, Policy, ReclusterPlan, SelectionBounds

KEY = (KeyColumn("k", KeyType.INTEGER),)
FINGERPRINT = key_fingerprint(["k"])
MODEL_BYTES_PER_ROW = 8


def make_block(path: str, keys: np.ndarray, modified_ms: int, level: int = 0) -> Block:
    low, high = int(keys.min()), int(keys.max())
    return Block(
        path=path,
        rows=len(keys),
        bytes=len(keys) * MODEL_BYTES_PER_ROW,
        min_key=encode_key((low,), KEY),
        max_key=encode_key((high,), KEY),
        min_values=(low,),
        max_values=(high,),
        level=level,
        key_fingerprint=None if level == 0 else FINGERPRINT,
        modified_ms=modified_ms,
    )


def cut_sorted(keys: np.ndarray, target_rows: int, split_values: Sequence[int]) -> list[np.ndarray]:
    """Pieces of a sorted key array as the merge kernel cuts them (`file_segments`): about target_rows each, cut
    only where the key changes, and just below and above every split value."""
    if not len(keys):
        return []
    run_starts = np.concatenate(([0], np.flatnonzero(np.diff(keys)) + 1)).astype(np.int64)
    forced = [int(np.searchsorted(keys, v, side=side)) for v in split_values for side in ("left", "right")]
    segments = file_segments(run_starts, len(keys), target_rows, files_for_rows(len(keys), target_rows), forced=forced)
    return [keys[start:stop] for start, stop in segments]


@dataclass
class ModelTable:
    """Files (path -> keys) plus their blocks; rows rewritten and appended are counted."""

    target_rows: int
    keys: dict[str, np.ndarray] = field(default_factory=dict)
    blocks: dict[str, Block] = field(default_factory=dict)
    clock: int = 1_000
    appended: int = 0
    rewritten: int = 0
    serial: int = 0

    def append(self, keys: np.ndarray) -> None:
        self.clock += 1_000
        self.serial += 1
        path = f"part-{self.serial:05d}-append.parquet"
        self.keys[path] = np.asarray(keys, dtype=np.int64)
        self.blocks[path] = make_block(path, self.keys[path], self.clock)
        self.appended += len(keys)

    def merge(self, task: MergeTask) -> list[str]:
        """Apply one task: its files' keys sorted and cut; returns the new paths."""
        self.clock += 1
        merged = np.sort(np.concatenate([self.keys.pop(b.path) for b in task.files]))
        for block in task.files:
            del self.blocks[block.path]
        self.rewritten += len(merged)
        paths = []
        for piece in cut_sorted(merged, self.target_rows, task.split_values):
            constant = piece[0] == piece[-1] and len(piece) >= self.target_rows  # as the kernel levels it
            level = LEVEL_CONSTANT if constant else task.output_level
            run, horizon = task.output_run or "0" * 12, task.horizon_ms
            if task.upper_run is not None and piece[0] > task.upper_run.above:  # as the kernel's `starts_above`
                run, horizon = task.upper_run.run_id, task.upper_run.horizon_ms
            path = data_file_name(level, FINGERPRINT, run, horizon)
            self.keys[path] = piece
            self.blocks[path] = make_block(path, piece, self.clock, level)
            paths.append(path)
        return paths

    def replace(self, paths: Sequence[str], pieces: Sequence[np.ndarray]) -> None:
        """Another tool's rewrite (compact, a full sort): these files become these pieces as they are (level 1)."""
        self.clock += 1
        for path in paths:
            self.rewritten += len(self.keys.pop(path))
            del self.blocks[path]
        for piece in pieces:
            path = data_file_name(1, FINGERPRINT, "0" * 12)
            self.keys[path] = piece
            self.blocks[path] = make_block(path, piece, self.clock, 1)

    def plan(self, bounds: SelectionBounds) -> ReclusterPlan:
        return select_merge_tasks("t", self.serial, list(self.blocks.values()), bounds)

    def round(self, bounds: SelectionBounds) -> ReclusterPlan:
        plan = self.plan(bounds)
        for task in plan.tasks:
            self.merge(task)
        return plan

    @property
    def clustered(self) -> list[Block]:
        """The files as selection sees them: without the constant pieces of heavy key values (level -1)."""
        return [b for b in self.blocks.values() if b.level != LEVEL_CONSTANT]

    @property
    def average_depth(self) -> float:
        return clustering_metrics(list(self.blocks.values())).average_depth

    def all_keys(self) -> np.ndarray:
        if not self.keys:
            return np.zeros(0, dtype=np.int64)
        return np.sort(np.concatenate(list(self.keys.values())), kind="stable")  # radix: a full sort stays fast


def absorb_bounds(
    beta: float = 1.0, max_bytes: int = 1 << 60, max_files: int = 1 << 30, tasks: int = 4
) -> SelectionBounds:
    return SelectionBounds(0.1, 16.0, max_bytes, max_files, tasks, FINGERPRINT, policy=Policy.ABSORB, beta=beta)
