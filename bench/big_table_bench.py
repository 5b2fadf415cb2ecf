"""`info` and planning on big tables of every shape against the delta-rs floor (issues 23 and 32).

`python -m bench.big_table_bench [--quick]`: tables of 200,000 and 1,000,000 files (quick: 20,000 and 100,000).

Each table's log is written by delta-rs transactions of add actions with stats only (planning never reads data
files), then checkpointed. The shapes:
  appends:  one transaction stamped as appends of 1,000 files with random overlapping int64 key ranges (so the
            default `absorb` policy sees one run per append);
  one commit: the same files stamped as one commit (a backfill): one run of overlapping files;
  kept:     as recluster keeps a table: one absorb-written run of disjoint files whose names carry level, key, run
            and horizon, and 20 waiting appends;
  foreign optimize: a table after another engine's OPTIMIZE (ZORDER): random files, then one dataChange=false
            commit removing them all and adding disjoint files with foreign names, then 20 appends;
  partitioned: one commit over 100 values of a partition column;
  hilbert:  one commit on a two-column key (a, b): the files' (a, b) boxes are random.
Measurements, each in a fresh interpreter, three times interleaved (the least of each reported: the machine is
shared and noisy), reporting seconds and peak RSS above the RSS after imports (VmHWM: Rust
and numpy memory included):
  floor:  delta-rs opens the table and lists its add actions (`get_add_actions(flatten=True)`), what any planner
          must do;
  info:   `recluster info` (engine.api.table_info);
  plan:   `recluster run --dry-run` (engine.rounds.recluster_table, dry run: snapshot, then one round's selection
          by the default policy);
  levels: `recluster run --dry-run --policy levels`.
Goals: info, plan and levels <= 2x the floor in time and <= 1.2x in memory on every shape at both sizes, and growth
from the smaller appends table to the larger linear within 10% (seconds per file at the larger / smaller <= 1.1).
Writes bench/results/big-table[-quick]-<date>.json.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.transaction import AddAction, RemoveAction

from bench.common import log, measured_in_subprocess, process_peak_rss_mb, publish, quick_cli
from docgen.figures import ratio_row
from recluster.core.blocks import age_run_id, data_file_name
from recluster.core.keys import key_fingerprint
from recluster.delta.log_writer import set_table_properties
from recluster.settings import CLUSTER_BY_PROPERTY

APPEND_FILES = 1_000
KEPT_APPENDS = 20
"""Appends waiting on the kept and foreign-optimize tables (the rest of their files are one run)."""
PARTITIONS = 100
KEY_SPACE = 10**12
WHATS = ("floor", "info", "plan", "levels")
REPEATS = 3
"""Each measurement is taken this many times, interleaved; the least seconds and peak memory are reported."""


def measure(path: str, what: str) -> dict[str, Any]:
    """In this (fresh) process: seconds and peak RSS of `what` on the table."""
    import pyarrow as pa
    from deltalake import DeltaTable

    from recluster.engine.api import table_info
    from recluster.engine.rounds import recluster_table, snapshot_loader
    from recluster.settings import Settings

    settings = Settings()
    before = process_peak_rss_mb()
    started = time.perf_counter()
    if what == "floor":
        files = pa.table(DeltaTable(path).get_add_actions(flatten=True)).num_rows
        detail: dict[str, Any] = {}
    elif what == "info":
        result = table_info(path, settings=settings)
        files = result.info.table.total_block_count
        detail = {"average_depth": result.info.table.average_depth, "levels": len(result.info.levels)}
    else:
        run = recluster_table(
            path,
            snapshot_loader(path, settings, None),
            settings=settings,
            spark_factory=lambda: None,
            dry_run=True,
            policy="levels" if what == "levels" else None,
        )
        files = run.before.table.total_block_count
        tasks = run.plans[-1].tasks if run.plans else ()
        detail = {"tasks": len(tasks), "task_files": sum(len(t.files) for t in tasks)}
    seconds = time.perf_counter() - started
    peak = process_peak_rss_mb()
    return {
        "files": files,
        "seconds": seconds,
        "peak_rss_above_imports_mb": peak - before,
        "peak_rss_mb": peak,
        **detail,
    }


def stats(low: int, high: int, low_b: int | None = None, high_b: int | None = None) -> str:
    """A file's stats: 1,000 records, key range [low, high] (and [low_b, high_b] on a second key column)."""
    minimum, maximum, nulls = {"k": low}, {"k": high}, {"k": 0}
    if low_b is not None and high_b is not None:
        minimum, maximum, nulls = {"a": low, "b": low_b}, {"a": high, "b": high_b}, {"a": 0, "b": 0}
    return json.dumps({"numRecords": 1_000, "minValues": minimum, "maxValues": maximum, "nullCount": nulls})


def random_adds(
    rng: np.random.Generator,
    count: int,
    stamp: Callable[[int], int],
    prefix: str = "part",
    partitions: int = 0,
    two_columns: bool = False,
) -> list[AddAction]:
    """`count` files with random overlapping ranges; file i stamped `stamp(i)`, in partition i % `partitions`."""
    lows, spans = rng.integers(0, KEY_SPACE, count).tolist(), rng.integers(1, 10**10, count).tolist()
    lows_b, spans_b = rng.integers(0, KEY_SPACE, count).tolist(), rng.integers(1, 10**10, count).tolist()
    adds = []
    for i in range(count):
        value = {"p": str(i % partitions)} if partitions else {}
        second = (lows_b[i], lows_b[i] + spans_b[i]) if two_columns else (None, None)
        name = f"p={i % partitions}/{prefix}-{i:07d}.parquet" if partitions else f"{prefix}-{i:07d}.parquet"
        adds.append(AddAction(name, 20_000, value, stamp(i), True, stats(lows[i], lows[i] + spans[i], *second)))
    return adds


def disjoint_adds(rng: np.random.Generator, count: int, stamp: int, name: Callable[[int], str]) -> list[AddAction]:
    """`count` files of one run: disjoint sorted ranges, all stamped `stamp`, named `name(i)`."""
    edges = np.sort(rng.choice(KEY_SPACE, count + 1, replace=False)).tolist()
    return [AddAction(name(i), 20_000, {}, stamp, False, stats(edges[i], edges[i + 1] - 1)) for i in range(count)]


def build_table(path: Path, files: int, shape: str, seed: int = 7) -> None:
    """A table of `files` files of the given shape (see the module's docstring)."""
    two_columns, partitions = shape == "hilbert", PARTITIONS if shape == "partitioned" else 0
    columns = {"a": pa.int64(), "b": pa.int64()} if two_columns else {"k": pa.int64()}
    schema = {**columns, "v": pa.float64(), **({"p": pa.string()} if partitions else {})}
    empty = pa.table({name: pa.array([], kind) for name, kind in schema.items()})
    write_deltalake(str(path), empty, partition_by=["p"] if partitions else None)
    set_table_properties(path, {CLUSTER_BY_PROPERTY: ",".join(columns)})
    rng = np.random.default_rng(seed)
    now = int(time.time() * 1000)
    one_run = files - KEPT_APPENDS * APPEND_FILES
    appended = random_adds(rng, KEPT_APPENDS * APPEND_FILES, lambda i: now + i // APPEND_FILES, prefix="append")
    commits: list[list[AddAction | RemoveAction]]
    if shape == "appends":
        commits = [[*random_adds(rng, files, lambda i: now + i // APPEND_FILES)]]
    elif shape == "kept":
        fingerprint, age = key_fingerprint(["k"]), now - 10_000_000
        run = disjoint_adds(rng, one_run, age, lambda _: data_file_name(1, fingerprint, age_run_id(age), age + 5))
        commits = [[*run, *appended]]
    elif shape == "foreign optimize":
        before = random_adds(rng, one_run, lambda _: now - 20_000_000)
        optimized = disjoint_adds(rng, one_run, now - 10_000_000, lambda _: f"part-{uuid.uuid4()}-c000.zstd.parquet")
        removes = [RemoveAction(a.path, False, now - 10_000_000, a.size) for a in before]
        commits = [[*before], [*removes, *optimized], [*appended]]
    else:  # one commit, partitioned, hilbert: a backfill
        commits = [[*random_adds(rng, files, lambda _: now, partitions=partitions, two_columns=two_columns)]]
    for actions in commits:
        table = DeltaTable(str(path))
        table.create_write_transaction(
            actions, mode="append", schema=table.schema(), commit_properties=CommitProperties()
        )
    DeltaTable(str(path)).create_checkpoint()


SHAPES = ("appends", "one commit", "kept", "foreign optimize", "partitioned", "hilbert")


def measure_table(root: Path, files: int, shape: str, repeats: int) -> dict[str, Any]:
    path = root / f"{shape.replace(' ', '-')}-{files}"
    log(f"big table: building {files:,} files, {shape}")
    started = time.perf_counter()
    build_table(path, files, shape)
    measured: dict[str, Any] = {"files": files, "shape": shape, "build_seconds": time.perf_counter() - started}
    runs: dict[str, list[dict[str, Any]]] = {what: [] for what in WHATS}
    for attempt in range(repeats):  # interleaved: a busy moment of the machine does not fall on one side only
        for what in WHATS:
            log(f"big table: {what} on {files:,} files, {shape} ({attempt + 1}/{repeats})")
            runs[what].append(measured_in_subprocess("bench.big_table_bench", path, what))
            assert runs[what][-1]["files"] == files, runs[what][-1]
    for what, taken in runs.items():  # the least of each: what the work costs without the machine's noise
        measured[what] = {
            **min(taken, key=lambda run: run["seconds"]),
            "peak_rss_above_imports_mb": min(run["peak_rss_above_imports_mb"] for run in taken),
            "all_seconds": [run["seconds"] for run in taken],
        }
    shutil.rmtree(path)
    return measured


def main(quick: bool = False) -> dict[str, Any]:
    sizes = (20_000, 100_000) if quick else (200_000, 1_000_000)
    with tempfile.TemporaryDirectory(prefix="recluster-big-table-") as root:
        tables = [measure_table(Path(root), files, shape, REPEATS) for shape in SHAPES for files in sizes]
    rows: list[list[Any]] = []
    for table in tables:
        floor = table["floor"]
        for what in WHATS[1:]:
            ours = table[what]
            files = f"{table['files']:,} files, {table['shape']}"
            rows.append(ratio_row(f"{what}, {files}, seconds (vs floor)", ours["seconds"], floor["seconds"], "<= 2x"))
            rows.append(
                ratio_row(
                    f"{what}, {files}, peak RSS above imports, MB (vs floor)",
                    ours["peak_rss_above_imports_mb"],
                    floor["peak_rss_above_imports_mb"],
                    "<= 1.2x",
                )
            )
    small, large = (t for t in tables if t["shape"] == "appends")
    scale = large["files"] / small["files"]
    for what in WHATS:
        growth = large[what]["seconds"] / small[what]["seconds"] / scale
        goal = "<= 1.1" if what != "floor" else ""
        rows.append(
            [
                f"{what}: seconds per file at {large['files']:,} / at {small['files']:,} files, appends",
                growth,
                1.0,
                growth,
                goal,
            ]
        )
    result: dict[str, Any] = {"quick": quick, "append_files": APPEND_FILES, "partitions": PARTITIONS, "tables": tables}
    return publish("big-table", "info and planning on big tables vs the delta-rs floor", quick, rows, result)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--measure":
        print(json.dumps(measure(sys.argv[3], sys.argv[2])))
    else:
        quick_cli("python -m bench.big_table_bench", main, description=__doc__.splitlines()[0] if __doc__ else None)
