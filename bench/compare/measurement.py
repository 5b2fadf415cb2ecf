"""What the comparison measures of one strategy on one workload, append by append: depth (recluster's
`clustering_info`) after every append and before each maintenance, bytes and rows written by maintenance (write
amplification), maintenance time and peak memory; at the end, the files 200 seeded range queries scan against a
perfectly sorted layout (scan ratio) and a check that the table holds exactly the appended rows.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from bench.common import live_files, log
from bench.compare.memory import MemoryProbe
from bench.compare.strategies import Context, Strategy
from bench.compare.workloads import Params
from recluster.core.metrics import clustering_info
from recluster.engine.api import read_snapshot
from recluster.settings import CLUSTER_BY_PROPERTY, Settings
from tests.file_stats import add_actions
from tests.fingerprints import row_fingerprint
from tests.workload_data import Workload, append

# ---- table helpers -------------------------------------------------------------------------------------------


def live_sizes(path: Path) -> dict[str, int]:
    """{file: bytes} over the live files."""
    return {file: size for file, size, _ in live_files(path)}


def live_rows(path: Path) -> dict[str, int]:
    """{file: rows} over the live files."""
    return {file: rows for file, _, rows in live_files(path)}


def first_key_numbers(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """First-key values as int64 (timestamps as microseconds)."""
    if pa.types.is_timestamp(column.type):
        column = pc.cast(column, pa.timestamp("us", tz=column.type.tz)).cast(pa.int64())
    return np.array(column.to_numpy(zero_copy_only=False), dtype=np.int64)  # a writable copy


def file_ranges(path: Path, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mins, maxes, rows) of the first key column per live file, from the Delta log's stats.

    A file without stats gets the whole int64 range (it is always scanned). Timestamp maxes are widened by
    999 us: Delta keeps millisecond stats, so a max stat can be below the real max (docs/concepts.md).
    """
    actions = add_actions(path)
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


# ---- one (workload, strategy) --------------------------------------------------------------------------------


def depth(path: Path, settings: Settings, key: Sequence[str]) -> tuple[float, int, int]:
    """(average_depth, p99_depth, files) by recluster's own metrics (docs/concepts.md#depth-and-levels)."""
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
        append(path, batch, workload.key)
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
            step_rows = sum(r for p, r in live_rows(path).items() if p not in files)
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
                "tasks": sum(r.totals.tasks for r in recluster),
                "files_removed": sum(r.totals.files_removed for r in recluster),
                "files_added": sum(r.totals.files_added for r in recluster),
                "conflicts": sum(r.totals.conflicts for r in recluster),
                "failures": sum(r.totals.failures for r in recluster),
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
    jvm_pid = getattr(getattr(getattr(spark, "sparkContext", None), "_gateway", None), "proc", None)
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
