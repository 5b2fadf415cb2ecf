"""What each strategy does to a table after an append: recluster rounds (levels, absorb, FINAL), delta-rs
compact and z_order, a full Spark sort rewrite, or nothing.

A maintenance call returns the bytes it wrote when it knows them (recluster), else None: the caller then counts the
sizes of the files that appeared.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from recluster.delta.snapshot import arrow_schema
from recluster.engine.rounds import ReclusterResult, recluster_table, snapshot_loader
from recluster.settings import PRESET_BETAS, Settings


@dataclass
class Context:
    spark: Any
    settings: Settings
    key: tuple[str, ...]
    bytes_per_row: float = 1.0
    loaders: dict[str, Callable[[], Any]] = field(default_factory=dict)
    results: list[ReclusterResult] = field(default_factory=list)

    @property
    def target_bytes(self) -> int:
        return max(1, int(self.settings.clustering.target_rows * self.bytes_per_row))

    def loader(self, path: Path) -> Callable[[], Any]:
        if str(path) not in self.loaders:
            self.loaders[str(path)] = snapshot_loader(str(path), self.settings, None)
        return self.loaders[str(path)]


def compact(ctx: Context, path: Path) -> int | None:
    DeltaTable(str(path)).optimize.compact(target_size=ctx.target_bytes)
    return None


def z_order(ctx: Context, path: Path) -> int | None:
    DeltaTable(str(path)).optimize.z_order(list(ctx.key), target_size=ctx.target_bytes)
    return None


def spark_sort(ctx: Context, path: Path) -> int | None:
    table = DeltaTable(str(path))
    schema = arrow_schema(table)
    rows = sum(pa.table(table.get_add_actions(flatten=True))["num_records"].to_pylist())
    partitions = max(1, math.ceil(rows / ctx.settings.clustering.target_rows))
    frame = (
        ctx.spark.read.parquet(*table.file_uris())
        .repartitionByRange(partitions, *ctx.key)
        .sortWithinPartitions(*ctx.key)
    )
    # One record batch: delta-rs writes the batches of a multi-batch input concurrently, interleaving them
    # across its output files (a sorted 3-batch input came out as 3 files each spanning the whole key range).
    data = frame.toArrow().select(schema.names).cast(schema).combine_chunks()
    write_deltalake(str(path), data, mode="overwrite", target_file_size=ctx.target_bytes)
    return None


def recluster_round(
    final: bool, policy: str = "levels", beta: float | None = None
) -> Callable[[Context, Path], int | None]:
    def run(ctx: Context, path: Path) -> int | None:
        result = recluster_table(
            str(path),
            ctx.loader(path),
            settings=ctx.settings,
            spark_factory=lambda: ctx.spark,
            final=final,
            policy=policy,
            beta=beta,
        )
        ctx.results.append(result)
        return result.totals.bytes_written

    return run


@dataclass(frozen=True)
class Strategy:
    name: str
    description: str
    periodic: bool
    """True: every k appends; False: after every append (or never, when maintain is None)."""
    maintain: Callable[[Context, Path], int | None] | None


STRATEGIES = (
    Strategy("none", "no maintenance", False, None),
    Strategy("compact", "delta-rs optimize.compact() every k", True, compact),
    Strategy("z_order", "delta-rs optimize.z_order(key) every k", True, z_order),
    Strategy("spark_sort", "full Spark range-partition + sort rewrite every k", True, spark_sort),
    Strategy(
        "recluster_incr",
        "one recluster round (final=False, policy levels) after every append",
        False,
        recluster_round(False),
    ),
    Strategy("recluster_final", "recluster FINAL every k", True, recluster_round(True)),
    Strategy(
        "absorb",
        "one recluster round, policy absorb at the default beta, after every append",
        False,
        recluster_round(False, "absorb"),
    ),
    Strategy(
        "absorb_quality",
        f"absorb with preset quality (beta {PRESET_BETAS['quality']:g}) after every append",
        False,
        recluster_round(False, "absorb", PRESET_BETAS["quality"]),
    ),
    Strategy(
        "absorb_economy",
        f"absorb with preset economy (beta {PRESET_BETAS['economy']:g}) after every append",
        False,
        recluster_round(False, "absorb", PRESET_BETAS["economy"]),
    ),
)
ANCHOR_STRATEGIES = ("none", "compact", "z_order", "spark_sort", "recluster_incr", "recluster_final", "absorb")
"""The anchor comparison's default set (the presets run in the issue-11 suite)."""
RECLUSTER = "recluster_incr"
