"""The Block model (one data file of a snapshot) and the names of the files recluster writes. Pure.

Levels and key fingerprints must survive log checkpoints and be readable from the log alone, so they are encoded
in the file name (`part-L02-k3f9a1c07-r<run>-<uuid>.parquet`; delta-rs's AddAction has no tags).
"""

from __future__ import annotations

import builtins
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from recluster.core.deletion_vectors import DeletionVector

LEVEL_APPENDED = 0


LEVEL_CONSTANT = -1
"""Constant files (min == max) with at least the target row count: final, never merged again."""


MAX_LEVEL = 32
"""Levels above this are clamped, to avoid unbounded level growth (as Databend's MAX_RECLUSTER_LEVEL)."""


Partition = tuple[tuple[str, str | None], ...]


@dataclass(frozen=True, slots=True)
class Block:
    """One data file of a snapshot, as metrics and selection see it.

    `min_key`/`max_key` are `encode_key` of the per-column minimum and maximum tuples (with the partition
    prefix); both are None when some key column has no usable stats: such a block is *unclustered*,
    excluded from the depth figures and always a merge candidate, never dropped.
    """

    path: str
    rows: int
    bytes: int
    min_key: builtins.bytes | None
    max_key: builtins.bytes | None
    min_values: tuple[Any, ...] | None = None
    max_values: tuple[Any, ...] | None = None
    level: int = LEVEL_APPENDED
    partition: Partition = ()
    key_fingerprint: str | None = None
    modified_ms: int = 0
    """The add action's modificationTime (ms): the age of an appended file for the `absorb` policy."""
    deletion_vector: DeletionVector | None = None
    """The file's deletion vector in the log: `rows` counts the rows it hides, `live_rows` does not."""
    curve_range: tuple[int, int] | None = None
    """Under a curve key, the file's curve values (from its name; None: not sorted on the current curve)."""

    def column_range(self, index: int) -> tuple[Any, Any]:
        """(min, max) of key column `index` from the file's stats; None where it has none."""
        return (
            self.min_values[index] if self.min_values else None,
            self.max_values[index] if self.max_values else None,
        )

    @property
    def cut_range(self) -> tuple[Any, Any]:
        """The file's range in what merges cut outputs on: the curve value, else the first key column."""
        return self.curve_range if self.curve_range is not None else self.column_range(0)

    @property
    def has_deletion_vector(self) -> bool:
        return self.deletion_vector is not None

    @property
    def deleted_rows(self) -> int:
        return 0 if self.deletion_vector is None else self.deletion_vector.cardinality

    @property
    def live_rows(self) -> int:
        return self.rows - self.deleted_rows

    @property
    def clustered(self) -> bool:
        return self.min_key is not None and self.max_key is not None

    @property
    def constant(self) -> bool:
        return self.clustered and self.min_key == self.max_key


_FILE_NAME = re.compile(
    r"(?:^|/)part-L(?P<level>-1|\d{2})-k(?P<fingerprint>[0-9a-f]{8})-r(?P<run>[0-9a-f]{12})-"
    r"(?:h(?P<horizon>[0-9a-f]{12})-)?(?:c(?P<curve_low>[0-9a-f]{10})-(?P<curve_high>[0-9a-f]{10})-)?"
    r"(?P<uuid>[0-9a-f]{32})\.parquet$"
)


@dataclass(frozen=True, slots=True)
class WrittenFileName:
    """What the name of a file recluster wrote says: level, key fingerprint and the run that wrote it."""

    level: int
    fingerprint: str
    run_id: str
    horizon_ms: int | None = None
    """Written by the `absorb` policy: run_id is the run's age (ms, hex) and this the age of the newest run
    the absorb takes in, so a sliced absorb can resume from the log alone."""
    curve_range: tuple[int, int] | None = None
    """Written under a curve key: the lowest and highest curve value of the file's rows."""


def data_file_name(
    level: int,
    fingerprint: str,
    run_id: str,
    horizon_ms: int | None = None,
    curve_range: tuple[int, int] | None = None,
) -> str:
    """`part-L01-k3f9a1c07-r<run>[-h<horizon>][-c<low>-<high>]-<uuid>.parquet`: level, key, run and curve range
    survive log checkpoints."""
    level_text = "-1" if level == LEVEL_CONSTANT else f"{min(level, MAX_LEVEL):02d}"
    horizon = "" if horizon_ms is None else f"h{horizon_ms:012x}-"
    curve = "" if curve_range is None else f"c{curve_range[0]:010x}-{curve_range[1]:010x}-"
    return f"part-L{level_text}-k{fingerprint}-r{run_id}-{horizon}{curve}{uuid.uuid4().hex}.parquet"


def parse_data_file_name(path: str) -> WrittenFileName | None:
    """Level, fingerprint and run of a file recluster wrote; None for any other file (level 0)."""
    match = _FILE_NAME.search(path) if "part-L" in path else None  # the test is far cheaper than the pattern
    if match is None:
        return None
    horizon = None if match["horizon"] is None else int(match["horizon"], 16)
    curve = None if match["curve_low"] is None else (int(match["curve_low"], 16), int(match["curve_high"], 16))
    return WrittenFileName(int(match["level"]), match["fingerprint"], match["run"], horizon, curve)


def file_age(block: Block) -> tuple[int, int | None]:
    """(age in ms, absorb horizon or None) of one file, from its name and its add action: the age of a file the
    `absorb` policy wrote is its run id, of any other file its modificationTime."""
    written = parse_data_file_name(block.path)
    if written is not None and written.horizon_ms is not None:
        return int(written.run_id, 16), written.horizon_ms
    return block.modified_ms, None


def age_run_id(age_ms: int) -> str:
    """The run id of an `absorb` run: its age in milliseconds as 12 hex digits (sorts by age)."""
    return f"{age_ms:012x}"


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


@dataclass(frozen=True, slots=True)
class WrittenFile:
    """A data file a merge wrote into the table location, with the Delta stats to commit it with."""

    path: str
    rows: int
    bytes: int
    partition: Partition
    stats: Mapping[str, Any]
    level: int
