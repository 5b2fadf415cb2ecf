"""recluster against its anchors, side by side in one run (issue 5).

Run from the project root: `python -m bench.compare [--quick]` (also part of `python -m bench`).

Workloads (seeded numpy, streaming appends; full mode 60 x 50,000 rows, quick 30 x 10,000):
  (a) uniform   - uniformly random int64 keys;
  (b) time      - microsecond timestamps increasing with the batch index (one hour per batch), 5% late rows
                  drawn uniformly from the past;
  (c) two-col   - key (a int in [0, 1000), b 10-letter string);
  (d) zipf      - numpy zipf(a=1.3) keys clipped to 1,000,000.
Each batch also carries a float and a 20-character string payload.

Strategies, each on its own copy of the table receiving the identical sequence of appends (write_deltalake
append; `recluster.clusterBy` set after the first append); k = 10 (quick 5):
  none            no maintenance;
  compact         delta-rs `optimize.compact()` every k appends;
  z_order         delta-rs `optimize.z_order(key)` every k appends;
  spark_sort      a full Spark sort rewrite every k appends: the live files -> repartitionByRange(ceil(rows /
                  target_rows)) -> sortWithinPartitions(key) -> toArrow -> write_deltalake overwrite (the
                  "OPTIMIZE ZORDER"-like full rewrite; bytes written = sizes of the new files);
  recluster_incr  one `recluster_table(..., final=False)` round after every append (the streaming job's decision
                  logic: same selection, merge and commit);
  recluster_final `recluster_table(..., final=True)` every k appends.
The delta-rs strategies and the Spark rewrite get a file-size target of target_rows x the appended bytes per row,
so every strategy aims at the same file size as recluster (delta-rs' default 100 MB would make one file).

Figures per (workload, strategy): average/p99 depth (recluster's `clustering_info`) after every append, and
just before each maintenance for the every-k strategies; the time-averaged average depth (mean over appends of
the depth queries see after that append's maintenance); files scanned by 200 seeded range queries over 1% of
the first key column's domain, as a ratio to a perfectly sorted layout of equal-row files with the same file
count (built from the actual keys: quantile boundaries); write amplification (bytes written by maintenance /
bytes appended); maintenance seconds; peak memory during maintenance (driver Python VmHWM over RSS at start,
Spark JVM VmHWM, and the sampled RSS of the Spark Python workers; peaks reset through /proc/<pid>/clear_refs).
Every final table is checked to hold exactly the appended rows (count + order-independent hash).

Merge throughput, metrics timings and streaming latency are not re-run: they are read from the latest
bench/results/{merge,metrics,stream}-*.json.

Prints markdown tables and writes JSON to bench/results/compare[-quick]-<YYYY-MM-DD>.json (per-append series
included); `python -m bench.compare --report FILE` prints the tables of a stored result again without running.
Runtime on 2 cores: --quick ~3-4 min, full ~12-13 min.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from bench.merge_bench import RESULTS, SPARK_SETTINGS, log, machine, markdown_table, start_spark, write_results
from recluster.core.metrics import clustering_info
from recluster.delta.commit import set_table_properties
from recluster.delta.snapshot import arrow_schema
from recluster.engine.api import read_snapshot
from recluster.engine.rounds import ReclusterResult, recluster_table, snapshot_loader
from recluster.settings import CLUSTER_BY_PROPERTY, PRESET_BETAS, ClusteringSettings, Settings

MB = 1_000_000
STRING_WIDTH = 20
SEED = 20240605


@dataclass(frozen=True)
class Params:
    batches: int
    rows: int
    every: int
    target_rows: int
    queries: int = 200
    query_fraction: float = 0.01


FULL = Params(batches=60, rows=50_000, every=10, target_rows=1_000_000)
QUICK = Params(batches=30, rows=10_000, every=5, target_rows=100_000)
"""Quick keeps full mode's table/target ratio (3 target files at the end) and maintenance count (6 every-k runs);
appends are 10% of a target file instead of 5%. With target_rows=200,000 the whole 200,000-row quick table would
fit in one target file: every every-k strategy would end as one file and all scan ratios would be trivially 1."""


# ---- workloads -----------------------------------------------------------------------------------------------


def letters(rng: np.random.Generator, rows: int, width: int) -> pa.Array:
    chars = rng.integers(ord("a"), ord("z") + 1, size=rows * width, dtype=np.uint8)
    offsets = np.arange(0, (rows + 1) * width, width, dtype=np.int32)
    return pa.StringArray.from_buffers(rows, pa.py_buffer(offsets.tobytes()), pa.py_buffer(chars.tobytes()))


def payload(rng: np.random.Generator, rows: int) -> dict[str, pa.Array]:
    return {"v": pa.array(rng.random(rows)), "s": letters(rng, rows, STRING_WIDTH)}


def uniform_batch(rng: np.random.Generator, index: int, rows: int) -> pa.Table:
    return pa.table({"k": pa.array(rng.integers(-(1 << 62), 1 << 62, size=rows, dtype=np.int64)), **payload(rng, rows)})


T0 = int(dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp() * 1_000_000)
HOUR = 3_600_000_000
LATE_SHARE = 0.05


def time_batch(rng: np.random.Generator, index: int, rows: int) -> pa.Table:
    """95% of the rows in this batch's hour, 5% late rows uniformly from [T0, start of this hour)."""
    start = T0 + index * HOUR
    ts = rng.integers(start, start + HOUR, size=rows, dtype=np.int64)
    late = rng.random(rows) < LATE_SHARE
    if index > 0:
        ts[late] = rng.integers(T0, start, size=int(late.sum()), dtype=np.int64)
    return pa.table({"ts": pa.array(ts, pa.timestamp("us", tz="UTC")), **payload(rng, rows)})


def two_column_batch(rng: np.random.Generator, index: int, rows: int) -> pa.Table:
    return pa.table(
        {
            "a": pa.array(rng.integers(0, 1_000, size=rows, dtype=np.int64)),
            "b": letters(rng, rows, 10),
            **payload(rng, rows),
        }
    )


ZIPF_A = 1.3
ZIPF_CLIP = 1_000_000


def zipf_batch(rng: np.random.Generator, index: int, rows: int) -> pa.Table:
    keys = np.minimum(rng.zipf(ZIPF_A, size=rows), ZIPF_CLIP).astype(np.int64)
    return pa.table({"z": pa.array(keys), **payload(rng, rows)})


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    key: tuple[str, ...]
    make: Callable[[np.random.Generator, int, int], pa.Table]


WORKLOADS = (
    Workload("a_uniform", "(a) uniform random int64 keys", ("k",), uniform_batch),
    Workload("b_time", "(b) mostly-ordered timestamps, 5% late rows", ("ts",), time_batch),
    Workload("c_two_col", "(c) two-column key (int in [0,1000), string)", ("a", "b"), two_column_batch),
    Workload("d_zipf", f"(d) zipf(a={ZIPF_A}) keys clipped to {ZIPF_CLIP:,}", ("z",), zipf_batch),
)


# ---- memory --------------------------------------------------------------------------------------------------


def status_kb(pid: int, name: str) -> int | None:
    """A `kB` field (VmRSS, VmHWM) of /proc/<pid>/status; None when the process or field is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(name + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def reset_peak(pid: int) -> bool:
    """Reset VmHWM to the current RSS (Linux: `echo 5 > /proc/<pid>/clear_refs`)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


class MemoryProbe:
    """Peak memory during maintenance calls, in MB, accumulated (max) over every call of one strategy.

    driver: VmHWM of this Python process minus its RSS when the call started (delta-rs runs in-process, and
            collected Arrow data lands here); jvm: VmHWM of the Spark driver JVM (absolute: its heap, once grown,
            stays resident); workers: the largest sampled sum of RSS over the JVM's descendant processes (the
            Python workers running mapInArrow), sampled every 0.1 s. Without clear_refs, sampled RSS is used.
    """

    def __init__(self, jvm_pid: int | None) -> None:
        self.jvm_pid = jvm_pid
        self.driver_mb = self.jvm_mb = self.workers_mb = 0.0
        self.method = "VmHWM (reset via clear_refs)"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sampled = {"driver": 0, "jvm": 0, "workers": 0}
        self._driver_start = 0

    def _sample(self) -> None:
        while True:
            self._sampled["driver"] = max(self._sampled["driver"], status_kb(os.getpid(), "VmRSS") or 0)
            if self.jvm_pid:
                self._sampled["jvm"] = max(self._sampled["jvm"], status_kb(self.jvm_pid, "VmRSS") or 0)
                workers = sum(status_kb(pid, "VmRSS") or 0 for pid in descendants(self.jvm_pid))
                self._sampled["workers"] = max(self._sampled["workers"], workers)
            if self._stop.wait(0.1):
                return

    def __enter__(self) -> MemoryProbe:
        self._driver_reset = reset_peak(os.getpid())
        self._jvm_reset = bool(self.jvm_pid) and reset_peak(self.jvm_pid or 0)
        self._driver_start = status_kb(os.getpid(), "VmRSS") or 0
        self._sampled = {"driver": 0, "jvm": 0, "workers": 0}
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        driver = status_kb(os.getpid(), "VmHWM") if self._driver_reset else None
        jvm = status_kb(self.jvm_pid, "VmHWM") if self._jvm_reset and self.jvm_pid else None
        if driver is None or (self.jvm_pid and jvm is None):
            self.method = "sampled VmRSS every 0.1 s (clear_refs unavailable)"
        driver_peak = max(driver or 0, self._sampled["driver"])
        self.driver_mb = max(self.driver_mb, (driver_peak - self._driver_start) * 1024 / MB)
        self.jvm_mb = max(self.jvm_mb, max(jvm or 0, self._sampled["jvm"]) * 1024 / MB)
        self.workers_mb = max(self.workers_mb, self._sampled["workers"] * 1024 / MB)


# ---- table helpers -------------------------------------------------------------------------------------------


def live_sizes(path: Path) -> dict[str, int]:
    return live_column(path, "size_bytes")


def live_column(path: Path, column: str) -> dict[str, int]:
    """{file: value} of one add-action column (size_bytes, num_records) over the live files."""
    actions = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))
    return dict(zip(actions["path"].to_pylist(), actions[column].to_pylist(), strict=True))


def row_fingerprint(table: pa.Table) -> tuple[int, str]:
    """Count plus an order-independent hash of all rows (64-bit row hashes, sorted, then SHA-256).

    A vectorized stand-in for tests.helpers.row_multiset (which hashes row by row in Python: minutes on millions
    of rows); quick mode checks with both.
    """
    frame = table.select(sorted(table.column_names)).to_pandas()
    hashes = np.sort(pd.util.hash_pandas_object(frame, index=False).to_numpy())
    return table.num_rows, hashlib.sha256(hashes.tobytes()).hexdigest()


def first_key_numbers(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """First-key values as int64 (timestamps as microseconds)."""
    if pa.types.is_timestamp(column.type):
        column = pc.cast(column, pa.timestamp("us", tz=column.type.tz)).cast(pa.int64())
    return np.array(column.to_numpy(zero_copy_only=False), dtype=np.int64)  # a writable copy


def file_ranges(path: Path, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mins, maxes, rows) of the first key column per live file, from the Delta log's stats.

    A file without stats gets the whole int64 range (it is always scanned). Timestamp maxes are widened by
    999 us: Delta keeps millisecond stats, so a max stat can be below the real max (DESIGN §3).
    """
    actions = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))
    rows = np.asarray(actions["num_records"].to_numpy(zero_copy_only=False), dtype=np.int64)
    low, high = actions[f"min.{name}"], actions[f"max.{name}"]
    widen = 999 if pa.types.is_timestamp(low.type) else 0
    lo_null = np.asarray(low.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    hi_null = np.asarray(high.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    lows = first_key_numbers(pc.fill_null(low, pa.scalar(0, pa.int64()).cast(low.type)))
    highs = first_key_numbers(pc.fill_null(high, pa.scalar(0, pa.int64()).cast(high.type)))
    lows[lo_null] = np.iinfo(np.int64).min
    highs[hi_null] = np.iinfo(np.int64).max
    highs = np.where(hi_null, highs, highs + widen)
    return lows, highs, rows


@dataclass(frozen=True)
class Queries:
    low: np.ndarray
    high: np.ndarray
    sorted_keys: np.ndarray
    domain: tuple[int, int]

    @classmethod
    def build(cls, keys: np.ndarray, count: int, fraction: float, seed: int) -> Queries:
        ordered = np.sort(keys)
        lo, hi = int(ordered[0]), int(ordered[-1])
        width = (hi - lo) * fraction
        rng = np.random.default_rng(seed)
        starts = lo + rng.random(count) * ((hi - lo) - width)
        low = np.floor(starts).astype(np.int64)
        high = np.ceil(starts + width).astype(np.int64)
        return cls(low, high, ordered, (lo, hi))

    def scanned(self, mins: np.ndarray, maxes: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Files and rows whose [min, max] intersects each query."""
        hit = (mins[None, :] <= self.high[:, None]) & (maxes[None, :] >= self.low[:, None])
        return hit.sum(axis=1), (hit * rows[None, :]).sum(axis=1)

    def optimum(self, files: int) -> np.ndarray:
        """Files scanned per query by a perfectly sorted layout of `files` equal-row files of the actual keys."""
        n = len(self.sorted_keys)
        files = max(1, min(files, n))
        bounds = (np.arange(files + 1) * n) // files
        mins = self.sorted_keys[bounds[:-1]]
        maxes = self.sorted_keys[bounds[1:] - 1]
        return self.scanned(mins, maxes, np.ones(files, dtype=np.int64))[0]


# ---- strategies ----------------------------------------------------------------------------------------------


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
        return result.bytes_written

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


# ---- one (workload, strategy) --------------------------------------------------------------------------------


def depth(path: Path, settings: Settings, key: Sequence[str]) -> tuple[float, int, int]:
    """(average_depth, p99_depth, files) by recluster's own metrics (DESIGN §4)."""
    info = clustering_info(read_snapshot(str(path), settings=settings, cluster_by=list(key)).blocks)
    return info.table.average_depth, info.table.p99_depth, info.table.total_block_count


def run_strategy(
    strategy: Strategy,
    workload: Workload,
    batches: Sequence[pa.Table],
    path: Path,
    ctx: Context,
    params: Params,
    jvm_pid: int | None,
) -> dict[str, Any]:
    probe = MemoryProbe(jvm_pid)
    series: list[dict[str, Any]] = []
    appended = written = appended_rows = rows_written = 0
    seconds = 0.0
    ctx.results = []
    started = time.perf_counter()
    for index, batch in enumerate(batches):
        before = live_sizes(path) if index else {}
        write_deltalake(str(path), batch, mode="append")
        if index == 0:
            set_table_properties(path, {CLUSTER_BY_PROPERTY: ",".join(workload.key)})
        files = live_sizes(path)
        step_appended = sum(size for p, size in files.items() if p not in before)
        appended += step_appended
        appended_rows += batch.num_rows
        ctx.bytes_per_row = appended / appended_rows
        average, p99, count = depth(path, ctx.settings, workload.key)
        step: dict[str, Any] = {"append": index + 1, "bytes_appended": step_appended}
        due = strategy.maintain is not None and (not strategy.periodic or (index + 1) % params.every == 0)
        step_written, step_seconds = 0, 0.0
        if due:
            assert strategy.maintain is not None
            step.update(pre_average_depth=average, pre_p99_depth=p99, pre_files=count)
            with probe:
                mark = time.perf_counter()
                reported = strategy.maintain(ctx, path)
                step_seconds = time.perf_counter() - mark
            after = live_sizes(path)
            step_written = reported if reported is not None else sum(s for p, s in after.items() if p not in files)
            step_rows = sum(r for p, r in live_column(path, "num_records").items() if p not in files)
            average, p99, count = depth(path, ctx.settings, workload.key)
        else:
            step_rows = 0
        written += step_written
        rows_written += step_rows
        seconds += step_seconds
        step.update(
            average_depth=average,
            p99_depth=p99,
            files=count,
            maintained=due,
            bytes_written=step_written,
            maintenance_seconds=step_seconds,
            write_amplification=written / appended,
            rows_written=step_rows,
        )
        series.append(step)
    wall = time.perf_counter() - started

    # rows out == rows in
    table = DeltaTable(str(path))
    data = table.to_pyarrow_table().select(batches[0].schema.names).cast(batches[0].schema)
    rows_fingerprint = row_fingerprint(data)
    properties = dict(table.metadata().configuration)

    mins, maxes, rows = file_ranges(path, workload.key[0])
    averages = [s["average_depth"] for s in series]
    pre = [s["pre_average_depth"] for s in series if "pre_average_depth" in s]
    pre_p99 = [s["pre_p99_depth"] for s in series if "pre_p99_depth" in s]
    recluster = ctx.results
    return {
        "strategy": strategy.name,
        "description": strategy.description,
        "final_average_depth": averages[-1],
        "final_p99_depth": series[-1]["p99_depth"],
        "final_files": series[-1]["files"],
        "time_averaged_average_depth": float(np.mean(averages)),
        "second_half_average_depth": float(np.mean(averages[len(averages) // 2 :])),
        "max_average_depth": float(max(averages)),
        "pre_maintenance_average_depth_mean": float(np.mean(pre)) if pre else None,
        "pre_maintenance_average_depth_last": pre[-1] if pre else None,
        "pre_maintenance_p99_depth_last": pre_p99[-1] if pre_p99 else None,
        "bytes_appended": appended,
        "bytes_written": written,
        "write_amplification": written / appended,
        "rows_appended": appended_rows,
        "rows_written": rows_written,
        "row_write_amplification": rows_written / appended_rows,
        "write_amplification_at_half": series[len(series) // 2 - 1]["write_amplification"],
        "maintenance_seconds": seconds,
        "maintenance_calls": sum(1 for s in series if s["maintained"]),
        "wall_seconds": wall,
        "peak_memory_mb": {"driver_delta": probe.driver_mb, "jvm": probe.jvm_mb, "spark_workers": probe.workers_mb},
        "memory_method": probe.method,
        "rows": data.num_rows,
        "row_fingerprint": rows_fingerprint,
        "cluster_by_property": properties.get(CLUSTER_BY_PROPERTY),
        "file_mins": mins,
        "file_maxes": maxes,
        "file_rows": rows,
        "recluster": (
            {
                "rounds": sum(r.rounds for r in recluster),
                "tasks": sum(r.tasks for r in recluster),
                "files_removed": sum(r.files_removed for r in recluster),
                "files_added": sum(r.files_added for r in recluster),
                "conflicts": sum(r.conflicts for r in recluster),
                "failures": sum(r.failures for r in recluster),
                "stop_reasons": sorted({r.stop_reason for r in recluster}),
                "final_levels": {str(level): m.total_block_count for level, m in recluster[-1].after.levels.items()},
            }
            if recluster
            else None
        ),
        "series": series,
    }


def run_workload(
    workload: Workload,
    seed: int,
    params: Params,
    strategies: Sequence[Strategy],
    spark: Any,
    settings: Settings,
    work: Path,
    exact_check: bool,
) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    batches = [workload.make(rng, index, params.rows) for index in range(params.batches)]
    everything = pa.concat_tables(batches)
    expected = row_fingerprint(everything)
    exact_expected = None
    if exact_check:
        from tests.helpers import row_multiset

        exact_expected = row_multiset(everything)
    queries = Queries.build(
        first_key_numbers(everything.column(workload.key[0])), params.queries, params.query_fraction, seed + 1
    )
    jvm_pid = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    jvm_pid = getattr(jvm_pid, "pid", None)
    results: dict[str, Any] = {}
    for strategy in strategies:
        path = work / workload.name / strategy.name
        ctx = Context(spark=spark, settings=settings, key=workload.key)
        result = run_strategy(strategy, workload, batches, path, ctx, params, jvm_pid)
        files, rows = queries.scanned(result.pop("file_mins"), result.pop("file_maxes"), result.pop("file_rows"))
        optimum = queries.optimum(result["final_files"])
        result["scan"] = {
            "queries": params.queries,
            "query_fraction": params.query_fraction,
            "mean_files_scanned": float(files.mean()),
            "mean_optimum_files": float(optimum.mean()),
            "ratio_to_optimum": float(files.mean() / optimum.mean()),
            "mean_rows_scanned_share": float(rows.mean() / everything.num_rows),
        }
        ok = result["row_fingerprint"] == expected
        if exact_check:
            from tests.helpers import row_multiset

            table = DeltaTable(str(path)).to_pyarrow_table().select(everything.column_names).cast(everything.schema)
            ok = ok and row_multiset(table) == exact_expected
        result["rows_verified"] = ok
        assert ok, f"{workload.name}/{strategy.name}: rows differ from the appended rows"
        assert result["rows"] == everything.num_rows
        if result["recluster"]:
            assert result["recluster"]["failures"] == 0, f"{workload.name}/{strategy.name}: failed merges"
        results[strategy.name] = result
        log(
            f"compare {workload.name}/{strategy.name}: depth {result['final_average_depth']:.2f} "
            f"(time-avg {result['time_averaged_average_depth']:.2f}), scan x{result['scan']['ratio_to_optimum']:.2f}, "
            f"WA {result['write_amplification']:.2f}, maint {result['maintenance_seconds']:.1f} s, "
            f"wall {result['wall_seconds']:.1f} s"
        )
        shutil.rmtree(path, ignore_errors=True)
    return {
        "description": workload.description,
        "key": list(workload.key),
        "rows": everything.num_rows,
        "first_key_domain": list(queries.domain),
        "strategies": results,
    }


# ---- references (existing benchmarks' latest JSON) ------------------------------------------------------------


def latest(name: str) -> tuple[Path | None, dict[str, Any] | None]:
    """Newest bench/results/<name>[-quick]-<date>.json; on the same date a full run wins over --quick."""
    pattern = re.compile(rf"^{name}(-quick)?-(\d{{4}}-\d{{2}}-\d{{2}})\.json$")
    found = []
    for path in RESULTS.glob(f"{name}-*.json"):
        match = pattern.match(path.name)
        if match:
            found.append((match[2], match[1] is None, path))
    if not found:
        return None, None
    path = max(found)[2]
    return path, json.loads(path.read_text(encoding="utf-8"))


def references() -> dict[str, Any]:
    refs: dict[str, Any] = {}
    path, merge = latest("merge")
    if merge:
        t = merge["throughput"]
        refs["merge_throughput"] = {
            "source": path.name if path else None,
            "recluster_mb_per_s": t["recluster_mb_per_s"],
            "raw_spark_mb_per_s": t["raw_mb_per_s"],
            "ratio": t["ratio_recluster_to_raw"],
            "input_mb": t["input_bytes"] / MB,
            "rows": t["rows"],
        }
    path, metrics = latest("metrics")
    if metrics:
        measures = metrics.get("measures", [])
        info = next(
            (m for m in measures if m["measure"].startswith("clustering_info") and "int64" in m["measure"]), None
        )
        incremental = next((m for m in measures if m["measure"].startswith("apply(")), None)
        refs["metrics"] = {
            "source": path.name if path else None,
            "clustering_info": info and {"measure": info["measure"], "seconds": info["seconds"], "goal": 3.0},
            "incremental_update": incremental
            and {"measure": incremental["measure"], "seconds": incremental["seconds"], "goal": 0.1},
        }
    path, stream = latest("stream")
    if stream:
        s = stream["stream"]
        refs["stream_latency"] = {
            "source": path.name if path else None,
            "p50_seconds": s["latency_median_seconds"],
            "p95_seconds": s["latency_p95_seconds"],
            "trigger_seconds": s["trigger_interval_seconds"],
            "appends": s["appends_timed"],
            "goal": 2.0,
        }
    return refs


# ---- goals, competitor wins, tables ----------------------------------------------------------------------------


def met(ok: bool) -> str:
    return "met" if ok else "missed"


def goals(workloads: dict[str, Any], refs: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    a = workloads.get("a_uniform", {}).get("strategies", {}).get(RECLUSTER)
    if a:
        depth_ok = a["final_average_depth"] <= 2 and a["second_half_average_depth"] <= 2
        ok = depth_ok and a["write_amplification"] <= 3
        out.append(
            {
                "goal": "recluster incremental on (a): average_depth <= 2 with WA <= 3",
                "value": f"final depth {a['final_average_depth']:.2f}, second-half mean "
                f"{a['second_half_average_depth']:.2f}, WA {a['write_amplification']:.2f}",
                "met": ok,
            }
        )
    ratios = {
        name: w["strategies"][RECLUSTER]["scan"]["ratio_to_optimum"]
        for name, w in workloads.items()
        if RECLUSTER in w["strategies"]
    }
    if ratios:
        out.append(
            {
                "goal": "recluster incremental: range scans <= 1.25x optimum (every workload)",
                "value": ", ".join(f"{name} {ratio:.2f}x" for name, ratio in ratios.items()),
                "met": all(r <= 1.25 for r in ratios.values()),
            }
        )
    merge = refs.get("merge_throughput")
    out.append(
        {
            "goal": "merge throughput >= 0.8x raw Spark sort+write",
            "value": f"{merge['ratio']:.3f}x ({merge['recluster_mb_per_s']:.1f} vs {merge['raw_spark_mb_per_s']:.1f} "
            f"MB/s, {merge['input_mb']:,.0f} MB, {merge['source']})"
            if merge
            else "no merge benchmark results found",
            "met": bool(merge and merge["ratio"] >= 0.8),
        }
    )
    return out


WIN_FIGURES: tuple[tuple[str, Callable[[dict[str, Any]], float]], ...] = (
    ("time-avg depth", lambda r: r["time_averaged_average_depth"]),
    ("final depth", lambda r: r["final_average_depth"]),
    ("scan ratio", lambda r: r["scan"]["ratio_to_optimum"]),
    ("rows scanned", lambda r: r["scan"]["mean_rows_scanned_share"]),
    ("WA", lambda r: r["write_amplification"]),
    ("maintenance s", lambda r: r["maintenance_seconds"]),
)


def _better(winner: dict[str, Any], loser: dict[str, Any]) -> list[str]:
    """Figures (lower is better) where `winner` beats `loser` by more than 5%."""
    return [
        f"{label} {value(winner):.3g} vs {value(loser):.3g}"
        for label, value in WIN_FIGURES
        if value(winner) < value(loser) * 0.95 - 1e-9
    ]


def _pairs(workloads: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """(workload, other strategy, ours, theirs) for every maintained strategy beside recluster incremental."""
    for name, workload in workloads.items():
        strategies = workload["strategies"]
        ours = strategies.get(RECLUSTER)
        if not ours:
            continue
        for other, theirs in strategies.items():
            if other not in (RECLUSTER, "none"):
                yield name, other, ours, theirs


def competitor_wins(workloads: dict[str, Any]) -> list[str]:
    """Where another strategy beats recluster incremental, figure by figure (`none` left out: it wins on cost
    trivially)."""
    return [
        f"{name}: {other} beats {RECLUSTER} on " + "; ".join(better) + f" (its WA after half the "
        f"appends {theirs['write_amplification_at_half']:.2f} -> end {theirs['write_amplification']:.2f})"
        for name, other, ours, theirs in _pairs(workloads)
        if (better := _better(theirs, ours))
    ]


def recluster_wins(workloads: dict[str, Any]) -> list[str]:
    """Where recluster incremental beats each other maintained strategy."""
    return [
        f"{name}: {RECLUSTER} beats {other} on " + "; ".join(better)
        for name, other, ours, theirs in _pairs(workloads)
        if (better := _better(ours, theirs))
    ]


HEADERS = (
    "workload",
    "strategy",
    "final avg depth",
    "p99",
    "time-avg depth",
    "depth before last maint.",
    "scan ratio",
    "rows scanned %",
    "WA",
    "maint. s",
    "peak MB driver+/JVM/workers",
    "files",
)


def table_rows(workloads: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for name, workload in workloads.items():
        for strategy, r in workload["strategies"].items():
            peak = r["peak_memory_mb"]
            pre = r["pre_maintenance_average_depth_last"]
            rows.append(
                [
                    name,
                    strategy,
                    r["final_average_depth"],
                    r["final_p99_depth"],
                    r["time_averaged_average_depth"],
                    "" if pre is None else f"{pre:.2f} (p99 {r['pre_maintenance_p99_depth_last']})",
                    r["scan"]["ratio_to_optimum"],
                    100 * r["scan"]["mean_rows_scanned_share"],
                    r["write_amplification"],
                    r["maintenance_seconds"],
                    "-"
                    if not r["maintenance_calls"]
                    else f"{peak['driver_delta']:.0f}/{peak['jvm']:.0f}/{peak['spark_workers']:.0f}",
                    r["final_files"],
                ]
            )
    return rows


SUMMARY_HEADERS = ("measure", "recluster", "baseline", "ratio", "goal")


def summary_rows(result: dict[str, Any]) -> list[list[Any]]:
    """Rows for `python -m bench`'s combined table: recluster incremental against the full Spark sort rewrite."""
    rows: list[list[Any]] = []
    for name, workload in result["workloads"].items():
        ours, base = workload["strategies"].get(RECLUSTER), workload["strategies"].get("spark_sort")
        if not ours or not base:
            continue
        rows.append(
            [
                f"{name}: time-avg depth, recluster_incr vs spark_sort every k",
                ours["time_averaged_average_depth"],
                base["time_averaged_average_depth"],
                ours["time_averaged_average_depth"] / base["time_averaged_average_depth"],
                f"<= 2 ({met(ours['time_averaged_average_depth'] <= 2)})" if name == "a_uniform" else "",
            ]
        )
        rows.append(
            [
                f"{name}: write amplification, recluster_incr vs spark_sort every k",
                ours["write_amplification"],
                base["write_amplification"],
                ours["write_amplification"] / base["write_amplification"] if base["write_amplification"] else "",
                f"<= 3 ({met(ours['write_amplification'] <= 3)})" if name == "a_uniform" else "",
            ]
        )
        rows.append(
            [
                f"{name}: range-scan files / optimum, recluster_incr vs spark_sort every k",
                ours["scan"]["ratio_to_optimum"],
                base["scan"]["ratio_to_optimum"],
                ours["scan"]["ratio_to_optimum"] / base["scan"]["ratio_to_optimum"],
                f"<= 1.25 ({met(ours['scan']['ratio_to_optimum'] <= 1.25)})",
            ]
        )
    return rows


def reference_lines(refs: dict[str, Any]) -> list[str]:
    lines = []
    if "merge_throughput" in refs:
        m = refs["merge_throughput"]
        lines.append(
            f"- merge throughput: recluster {m['recluster_mb_per_s']:.1f} MB/s vs raw Spark sort+write "
            f"{m['raw_spark_mb_per_s']:.1f} MB/s = {m['ratio']:.3f}x ({m['input_mb']:,.0f} MB; {m['source']})"
        )
    metrics = refs.get("metrics") or {}
    if metrics.get("clustering_info"):
        c = metrics["clustering_info"]
        lines.append(
            f"- {c['measure']}: {c['seconds']:.3f} s (goal < {c['goal']:g} s: {met(c['seconds'] < c['goal'])};"
            f" {metrics['source']})"
        )
    if metrics.get("incremental_update"):
        c = metrics["incremental_update"]
        lines.append(
            f"- per-commit incremental update, {c['measure']}: {c['seconds'] * 1000:.1f} ms "
            f"(goal < {c['goal'] * 1000:g} ms: {met(c['seconds'] < c['goal'])}; {metrics['source']})"
        )
    if "stream_latency" in refs:
        s = refs["stream_latency"]
        lines.append(
            f"- commit-to-decision latency: p50 {s['p50_seconds']:.2f} s, p95 {s['p95_seconds']:.2f} s over "
            f"{s['appends']} appends, trigger {s['trigger_seconds']:g} s (goal < {s['goal']:g} s: "
            f"{met(s['p95_seconds'] < s['goal'])}; {s['source']})"
        )
    return lines or ["- no results of the other benchmarks found in bench/results/"]


# ---- entry point ---------------------------------------------------------------------------------------------


def warm_up(spark: Any, work: Path, settings: Settings) -> float:
    """A tiny Spark rewrite and recluster FINAL, so the first measured strategy does not pay for a cold JVM."""
    started = time.perf_counter()
    rng = np.random.default_rng(1)
    path = work / "warmup"
    ctx = Context(spark=spark, settings=settings, key=("k",))
    for index in range(3):
        write_deltalake(str(path), uniform_batch(rng, index, 5_000), mode="append")
        if index == 0:
            set_table_properties(path, {CLUSTER_BY_PROPERTY: "k"})
    ctx.bytes_per_row = 40.0
    spark_sort(ctx, path)
    for index in range(3):
        write_deltalake(str(path), uniform_batch(rng, index, 5_000), mode="append")
    recluster_round(True)(ctx, path)
    shutil.rmtree(path, ignore_errors=True)
    return time.perf_counter() - started


def source_state() -> dict[str, Any]:
    """The commit the engine ran from and any uncommitted changes under recluster/ (results depend on them)."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False).stdout
        except OSError:
            return ""

    diff = git("diff", "HEAD", "--", "recluster")
    return {
        "commit": git("rev-parse", "HEAD").strip(),
        "uncommitted_engine_files": [
            line.strip() for line in git("status", "--porcelain", "--", "recluster").splitlines()
        ],
        "engine_diff_sha256": hashlib.sha256(diff.encode()).hexdigest() if diff else None,
    }


def result_header(benchmark: str, quick: bool, source: dict[str, Any]) -> dict[str, Any]:
    """What every result JSON starts with: which benchmark, mode, date, machine and engine source."""
    return {
        "benchmark": benchmark,
        "quick": quick,
        "date": dt.date.today().isoformat(),
        "machine": machine(),
        "source": source,
    }


def render(result: dict[str, Any], path: Path | str) -> None:
    """Print the tables of one result (also from a stored JSON: `--report FILE`)."""
    workloads, refs, source = result["workloads"], result["references"], result.get("source", {})
    p = result["parameters"]
    params = Params(p["batches"], p["rows_per_batch"], p["maintenance_every_k"], p["target_rows"], p["queries"])
    memory = next(
        (r["memory_method"] for w in workloads.values() for r in w["strategies"].values() if r["maintenance_calls"]),
        "",
    )
    print("\n### compare" + (" (--quick)" if result["quick"] else "") + "\n")
    print(
        f"{params.batches} appends x {params.rows:,} rows per workload; maintenance every k={params.every} appends; "
        f"target_rows={params.target_rows:,} (recluster, and the file-size target of every other strategy); "
        f"{params.queries} range queries over {params.query_fraction:.0%} of the first key column's domain.\n"
    )
    print(markdown_table(HEADERS, table_rows(workloads)))
    print(
        "\nfinal/p99/time-avg depth: recluster clustering_info (time-avg = mean over appends of the depth after that "
        "append's maintenance); depth before last maint. = right before the last maintenance (recluster_incr: "
        "right after the last append); scan ratio = files scanned / files a perfectly sorted equal-row layout "
        "with the same file count scans; rows scanned % = "
        "share of the table's rows in scanned files; WA = bytes written by maintenance / bytes appended; peak MB = "
        f"driver Python peak RSS over its RSS at the start of each maintenance call / Spark JVM peak RSS (absolute) / "
        f"Spark Python workers (sampled), measured as {memory}; the JVM keeps heap it grew for earlier strategies and "
        "idle reusable workers count, so only the driver column is comparable between strategies. Rows verified "
        "equal to the appended rows (count + order-independent hash) for every table."
    )
    print("\n#### goals\n")
    for goal in result["goals"]:
        print(f"- {goal['goal']}: {goal['value']} -> **{met(goal['met'])}**")
    print("\n#### where a competitor wins\n")
    for line in competitor_wins(workloads) or ["(nowhere)"]:
        print(f"- {line}")
    print(f"\n#### where {RECLUSTER} wins\n")
    for line in recluster_wins(workloads) or ["(nowhere)"]:
        print(f"- {line}")
    print("\n#### references (not re-run; latest results of the other benchmarks)\n")
    print("\n".join(reference_lines(refs)))
    if source.get("uncommitted_engine_files"):
        print(
            f"\nengine: commit {source['commit'][:12]} with uncommitted changes: {source['uncommitted_engine_files']}"
        )
    print(f"\ncompare: {result['seconds']:.0f} s; results in {path}")


def main(quick: bool = False, only: Sequence[str] = (), strategies: Sequence[str] = ()) -> dict[str, Any]:
    params = QUICK if quick else FULL
    settings = Settings(clustering=ClusteringSettings(target_rows=params.target_rows))
    chosen = [w for w in WORKLOADS if not only or any(w.name.startswith(o) for o in only)]
    runs = [s for s in STRATEGIES if s.name in (strategies or ANCHOR_STRATEGIES)]
    source = source_state()
    spark = start_spark()
    work = Path(tempfile.mkdtemp(prefix="recluster-compare-bench-"))
    started = time.perf_counter()
    try:
        warm = warm_up(spark, work, settings)
        log(f"compare: warm-up {warm:.1f} s; {params}")
        workloads = {}
        for number, workload in enumerate(WORKLOADS):
            if workload not in chosen:
                continue
            mark = time.perf_counter()
            workloads[workload.name] = run_workload(
                workload, SEED + 10 * number, params, runs, spark, settings, work, exact_check=quick
            )
            workloads[workload.name]["seconds"] = time.perf_counter() - mark
    finally:
        shutil.rmtree(work, ignore_errors=True)
    refs = references()
    result: dict[str, Any] = {
        **result_header("compare", quick, source),
        "spark": {"master": SPARK_SETTINGS.master, "shuffle_partitions": SPARK_SETTINGS.shuffle_partitions},
        "parameters": {
            "batches": params.batches,
            "rows_per_batch": params.rows,
            "maintenance_every_k": params.every,
            "target_rows": params.target_rows,
            "queries": params.queries,
            "query_fraction": params.query_fraction,
            "seed": SEED,
            "settings_clustering": settings.clustering.model_dump(),
        },
        "strategies": {s.name: s.description for s in runs},
        "warmup_seconds": warm,
        "workloads": workloads,
        "references": refs,
    }
    result["goals"] = goals(workloads, refs)
    result["competitor_wins"] = competitor_wins(workloads)
    result["recluster_wins"] = recluster_wins(workloads)
    result["seconds"] = time.perf_counter() - started
    result["summary"] = [dict(zip(SUMMARY_HEADERS, row, strict=True)) for row in summary_rows(result)]
    path = write_results("compare-quick" if quick else "compare", result)

    render(result, path)
    return result


# ---- issue 11: the absorb policy against levels and z_order -------------------------------------------------


@dataclass(frozen=True)
class SuiteCase:
    name: str
    workload: Workload
    params: Params
    strategies: tuple[str, ...]


ALL_ABSORB = ("z_order", "recluster_incr", "absorb", "absorb_quality", "absorb_economy")
LONG_RUN = ("z_order", "recluster_incr", "absorb")
UNIFORM, TIME = WORKLOADS[0], WORKLOADS[1]
ABSORB_SUITE = (
    SuiteCase("random_40", UNIFORM, Params(40, 50_000, 5, 1_000_000), ALL_ABSORB),
    SuiteCase("time_40", TIME, Params(40, 50_000, 5, 1_000_000), LONG_RUN),
    SuiteCase("random_400", UNIFORM, Params(400, 5_000, 5, 100_000), ("z_order", "absorb", "recluster_incr")),
    SuiteCase("time_400", TIME, Params(400, 5_000, 5, 100_000), ("z_order", "absorb")),
)
"""The issue's workloads: 40 appends at full size (2,000,000 rows, 1,000,000-row files) and 400 small appends
(5,000 rows, 100,000-row files: the same table/file ratio) of random int64 keys and of time-like keys with 5%
late rows; z_order every 5 appends, levels and absorb after every append."""
ABSORB_SUITE_QUICK = (
    SuiteCase("random_40", UNIFORM, Params(20, 5_000, 5, 50_000), LONG_RUN),
    SuiteCase("random_400", UNIFORM, Params(60, 1_000, 5, 20_000), LONG_RUN),
    SuiteCase("time_40", TIME, Params(20, 5_000, 5, 50_000), LONG_RUN),
    SuiteCase("time_400", TIME, Params(60, 1_000, 5, 20_000), LONG_RUN),
)
"""CI speed (about 3 minutes): fewer, smaller appends; only the absorb goals' shape is checked, not their values."""

ABSORB = "absorb"
LEVELS = "recluster_incr"


def absorb_goals(cases: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's acceptance goals, each with the measured values and by how much it is missed."""

    def get(case: str, strategy: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = cases.get(case, {}).get("strategies", {}).get(strategy)
        return result

    out: list[dict[str, Any]] = []
    for case, max_depth, max_wa in (("random_40", 2.0, 4.3), ("time_40", 1.5, 2.3), ("time_400", 1.3, 2.0)):
        r = get(case, ABSORB)
        if r:
            depth, wa = r["time_averaged_average_depth"], r["row_write_amplification"]
            out.append(
                {
                    "goal": f"{case}: absorb time-avg depth <= {max_depth:g} at row WA <= {max_wa:g}",
                    "value": f"depth {depth:.2f} (x{depth / max_depth:.2f} of goal), row WA {wa:.2f} "
                    f"(x{wa / max_wa:.2f} of goal)",
                    "met": depth <= max_depth and wa <= max_wa,
                }
            )
    ours, zorder = get("random_400", ABSORB), get("random_400", "z_order")
    if ours and zorder:
        wa, z_wa = ours["row_write_amplification"], zorder["row_write_amplification"]
        depth, z_depth = ours["time_averaged_average_depth"], zorder["time_averaged_average_depth"]
        out.append(
            {
                "goal": "random_400: absorb row WA <= 1/5 of z_order every 5, at no worse time-avg depth",
                "value": f"row WA {wa:.2f} vs z_order {z_wa:.2f} (ratio {wa / z_wa:.3f}); depth {depth:.2f} vs "
                f"{z_depth:.2f}",
                "met": wa <= z_wa / 5 and depth <= z_depth,
            }
        )
    for case in ("random_40", "random_400", "time_40", "time_400"):
        levels = get(case, LEVELS)
        variants = [(n, r) for n in ALL_ABSORB if n.startswith(ABSORB) and (r := get(case, n))]
        if not levels or not variants:
            continue
        cheaper = [
            (n, r) for n, r in variants if r["row_write_amplification"] <= levels["row_write_amplification"] * 1.05
        ]
        best = min(cheaper or variants, key=lambda item: item[1]["time_averaged_average_depth"])
        out.append(
            {
                "goal": f"{case}: absorb beats levels on depth at equal (or lower) row WA",
                "value": f"{best[0]} depth {best[1]['time_averaged_average_depth']:.2f} at row WA "
                f"{best[1]['row_write_amplification']:.2f} vs levels depth "
                f"{levels['time_averaged_average_depth']:.2f} at row WA {levels['row_write_amplification']:.2f}",
                "met": bool(cheaper) and best[1]["time_averaged_average_depth"] < levels["time_averaged_average_depth"],
            }
        )
    return out


ABSORB_HEADERS = (
    "workload",
    "strategy",
    "time-avg depth",
    "mean depth before maint.",
    "final depth",
    "row WA",
    "byte WA",
    "scan ratio",
    "maint. s",
    "files",
)


def absorb_rows(cases: dict[str, Any]) -> list[list[Any]]:
    return [
        [
            case,
            strategy,
            r["time_averaged_average_depth"],
            r["pre_maintenance_average_depth_mean"] or "",
            r["final_average_depth"],
            r["row_write_amplification"],
            r["write_amplification"],
            r["scan"]["ratio_to_optimum"],
            r["maintenance_seconds"],
            r["final_files"],
        ]
        for case, workload in cases.items()
        for strategy, r in workload["strategies"].items()
    ]


def render_absorb(result: dict[str, Any], path: Path | str) -> None:
    print("\n### absorb suite (issue 11)" + (" (--quick)" if result["quick"] else "") + "\n")
    for name, case in result["cases"].items():
        p = case["parameters"]
        print(
            f"- {name}: {case['description']}, {p['batches']} appends x {p['rows_per_batch']:,} rows, "
            f"target_rows {p['target_rows']:,}, z_order every {p['maintenance_every_k']}"
        )
    print()
    print(markdown_table(ABSORB_HEADERS, absorb_rows(result["cases"])))
    print(
        "\ntime-avg depth = mean over appends of average_depth after that append's maintenance (what queries see); "
        "mean depth before maint. = mean of average_depth right before each maintenance (absorb/levels: right "
        "after each append); row WA = rows written by maintenance / rows appended; byte WA likewise in bytes. "
        f"absorb runs at the default beta {result['default_beta']:g}; presets quality {PRESET_BETAS['quality']:g}, "
        f"economy {PRESET_BETAS['economy']:g}. Rows verified equal to the appended rows for every table."
    )
    print("\n#### goals\n")
    for goal in result["goals"]:
        print(f"- {goal['goal']}: {goal['value']} -> **{met(goal['met'])}**")
    print(f"\nabsorb suite: {result['seconds']:.0f} s; results in {path}")


def main_absorb(quick: bool = False, only: Sequence[str] = ()) -> dict[str, Any]:
    """The issue-11 suite: every case's strategies on identical appends, goals evaluated."""
    cases_run = [c for c in (ABSORB_SUITE_QUICK if quick else ABSORB_SUITE) if not only or c.name in only]
    source = source_state()
    spark = start_spark()
    work = Path(tempfile.mkdtemp(prefix="recluster-absorb-bench-"))
    started = time.perf_counter()
    by_name = {s.name: s for s in STRATEGIES}
    result: dict[str, Any] = {
        **result_header("absorb", quick, source),
        "default_beta": Settings().selection.resolved_beta,
        "presets": dict(PRESET_BETAS),
        "strategies": {s.name: s.description for s in STRATEGIES if s.name in ALL_ABSORB},
        "cases": {},
    }
    cases: dict[str, Any] = result["cases"]
    name = "absorb-quick" if quick else "absorb"
    try:
        warm_up(spark, work, Settings())
        for number, case in enumerate(cases_run):
            settings = Settings(clustering=ClusteringSettings(target_rows=case.params.target_rows))
            log(f"absorb suite: {case.name} {case.params}")
            for strategy in case.strategies:  # one at a time, the results written after each
                mark = time.perf_counter()
                outcome = run_workload(
                    case.workload,
                    SEED + 100 + number,
                    case.params,
                    [by_name[strategy]],
                    spark,
                    settings,
                    work,
                    exact_check=quick,
                )
                seconds = cases.get(case.name, {}).get("seconds", 0.0) + time.perf_counter() - mark
                strategies = {**cases.get(case.name, {}).get("strategies", {}), **outcome["strategies"]}
                cases[case.name] = {
                    **outcome,
                    "strategies": strategies,
                    "parameters": {
                        "batches": case.params.batches,
                        "rows_per_batch": case.params.rows,
                        "maintenance_every_k": case.params.every,
                        "target_rows": case.params.target_rows,
                    },
                    "seconds": seconds,
                }
                result["goals"] = absorb_goals(cases)
                result["seconds"] = time.perf_counter() - started
                write_results(name, result)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    path = write_results(name, result)
    render_absorb(result, path)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="30 x 10,000-row appends (target 100,000) instead of 60 x 50,000 (target 1,000,000)",
    )
    parser.add_argument("--only", nargs="*", default=(), help="workloads to run (name prefixes: a b c d)")
    parser.add_argument("--strategies", nargs="*", default=(), help="strategies to run (default: all)")
    parser.add_argument("--report", type=Path, help="print the tables of a stored result JSON; runs nothing")
    parser.add_argument(
        "--suite",
        choices=["anchors", "absorb"],
        default="anchors",
        help="anchors: every strategy on workloads a-d; absorb: issue 11's workloads (--only takes case names)",
    )
    args = parser.parse_args()
    if args.report:
        stored = json.loads(args.report.read_text(encoding="utf-8"))
        (render_absorb if stored.get("benchmark") == "absorb" else render)(stored, args.report)
    elif args.suite == "absorb":
        main_absorb(quick=args.quick, only=args.only)
    else:
        main(quick=args.quick, only=args.only, strategies=args.strategies)
