"""Benchmark of the clustering metrics (docs/concepts.md): full computation at scale and the incremental state.

Run from the project root:

    python -m bench.metrics_bench [--blocks 1000000] [--string-blocks 200000] [--level-blocks 100000]

Measures
  (a) `clustering_info` over 1,000,000 int64-key blocks (goal < 3 s; building the blocks is timed apart)
      and over 200,000 variable-width string-key blocks (the Arrow ranking path);
  (b) `ClusteringState.apply(100 added, 100 removed)` + `level_metrics(level)` on one 100,000-block
      level (goal < 10 ms, issue 23; it was 100 ms), median of 5 repetitions;
  (c) a full `clustering_metrics` recompute of the same level, median of 5, as the baseline of (b):
      the incremental figure is also reported as a ratio of it.
Prints a markdown table and writes JSON to bench/results/metrics-<YYYY-MM-DD>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from recluster.core.blocks import Block
from recluster.core.key_encoding import encode_key
from recluster.core.keys import KeyColumn, KeyType
from recluster.core.metrics import ClusteringState, clustering_info, clustering_metrics
from recluster.core.ranks import rank_keys

INT_KEY = (KeyColumn("k", KeyType.INTEGER),)
STRING_KEY = (KeyColumn("s", KeyType.STRING),)
DOMAIN = 1 << 40
RESULTS = Path(__file__).resolve().parent / "results"


def int_blocks(count: int, rng: np.random.Generator, prefix: str = "b", level: int = 0) -> list[Block]:
    """Random int64 ranges; widths spread over four orders of magnitude so depths vary."""
    lows = rng.integers(0, DOMAIN, size=count, dtype=np.int64)
    widths = (DOMAIN / count * 10.0 ** rng.uniform(-1, 3, size=count)).astype(np.int64)
    highs = np.minimum(lows + widths, DOMAIN)
    rows = rng.integers(1_000, 1_000_000, size=count)
    return [
        Block(
            path=f"{prefix}{i}",
            rows=int(r),
            bytes=int(r) * 16,
            min_key=encode_key((lo,), INT_KEY),
            max_key=encode_key((hi,), INT_KEY),
            min_values=(lo,),
            max_values=(hi,),
            level=level,
        )
        for i, (lo, hi, r) in enumerate(zip(lows.tolist(), highs.tolist(), rows.tolist(), strict=True))
    ]


def _word(rng: np.random.Generator, alphabet: np.ndarray, length: int) -> str:
    return "".join(alphabet[rng.integers(0, len(alphabet), size=length)].tolist())


def string_blocks(count: int, rng: np.random.Generator) -> list[Block]:
    """Random string ranges of 1-24 characters (variable-width keys)."""
    alphabet = np.array(list("abcdefghijklmnopqrstuvwxyz0123456789"))
    blocks = []
    for i in range(count):
        a = _word(rng, alphabet, int(rng.integers(1, 25)))
        b = _word(rng, alphabet, int(rng.integers(1, 25)))
        lo, hi = min(a, b), max(a, b)
        blocks.append(
            Block(
                path=f"s{i}",
                rows=1_000,
                bytes=16_000,
                min_key=encode_key((lo,), STRING_KEY),
                max_key=encode_key((hi,), STRING_KEY),
                min_values=(lo,),
                max_values=(hi,),
            )
        )
    return blocks


CPU_SECONDS: list[float] = []
"""CPU time of each `timed` call, in order (wall time alone is noisy on a shared machine)."""


T = TypeVar("T")


def timed(action: Callable[[], T]) -> tuple[float, T]:
    started, cpu_started = time.perf_counter(), time.process_time()
    result = action()
    CPU_SECONDS.append(time.process_time() - cpu_started)
    return time.perf_counter() - started, result


def median_of(repeat: int, action: Callable[[int], Any]) -> tuple[float, list[float]]:
    samples = [timed(functools.partial(action, i))[0] for i in range(repeat)]
    CPU_SECONDS.append(statistics.median(CPU_SECONDS[-repeat:]))
    return statistics.median(samples), samples


Record = Callable[..., None]


def build_and_measure_info(
    label: str, build: Callable[[], list[Block]], record: Record, goal: float | None = None, p99: bool = False
) -> list[Block]:
    """Time building the blocks, then `clustering_info` over them (recording its average, and p99, depth)."""
    build_seconds, blocks = timed(build)
    record(f"build {label}", build_seconds)
    info_seconds, info = timed(lambda: clustering_info(blocks))
    depths: dict[str, float] = {"average_depth": info.table.average_depth}
    if p99:
        depths["p99_depth"] = info.table.p99_depth
    record(f"clustering_info, {label}", info_seconds, goal, **depths)
    return blocks


def measure_int_blocks(blocks: int, rng: np.random.Generator, record: Record) -> None:
    label = f"{blocks:,} int64-key blocks"
    big = build_and_measure_info(label, lambda: int_blocks(blocks, rng), record, 3.0, p99=True)
    one_seconds, _ = timed(lambda: clustering_metrics(big))
    record(f"clustering_metrics, {label}", one_seconds)


def measure_string_blocks(string_count: int, rng: np.random.Generator, record: Record) -> None:
    # The first Arrow sort of a process initialises its compute kernels (about 0.5 s): timed apart.
    warm_seconds, _ = timed(lambda: rank_keys([encode_key((w,), STRING_KEY) for w in ("b", "aa", "c")]))
    record("first Arrow-path rank_keys of the process (warm-up)", warm_seconds)
    build_and_measure_info(f"{string_count:,} string-key blocks", lambda: string_blocks(string_count, rng), record)


def run(blocks: int, string_count: int, level_blocks: int, changes: int, repeat: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    measures: list[dict[str, Any]] = []

    def record(name: str, seconds: float, goal: float | None = None, cpu: float | None = None, **extra: Any) -> None:
        cpu = CPU_SECONDS[-1] if cpu is None else cpu
        entry: dict[str, Any] = {"measure": name, "seconds": seconds, "cpu_seconds": cpu, "goal_seconds": goal}
        if goal is not None:
            entry["met"] = seconds < goal
        entry.update(extra)
        measures.append(entry)
        print(f"  {name}: {seconds:.4f} s (cpu {cpu:.4f} s)", file=sys.stderr)

    # (a) full computation at scale (each in its own function, so its blocks are freed on return)
    measure_int_blocks(blocks, rng, record)
    measure_string_blocks(string_count, rng, record)

    # (b) incremental: one level of `level_blocks`, `changes` added + `changes` removed per commit
    level = int_blocks(level_blocks, rng, prefix="L")
    state = ClusteringState(level)
    state.level_metrics(0)  # warm: the state holds the metrics of the commit before
    batches = [int_blocks(changes, rng, prefix=f"new{r}-") for r in range(repeat)]
    live = [b.path for b in level]
    removals = [live[r * changes : (r + 1) * changes] for r in range(repeat)]

    def commit(r: int) -> None:
        state.apply(added=batches[r], removed=removals[r])
        state.level_metrics(0)

    incremental, incremental_samples = median_of(repeat, commit)
    incremental_cpu = CPU_SECONDS[-1]
    assert len(state.level_blocks(0)) == level_blocks

    # (c) baseline: full recompute of the same level
    current = state.level_blocks(0)
    full, full_samples = median_of(repeat, lambda _: clustering_metrics(current))
    assert state.level_metrics(0) == clustering_metrics(current), "incremental state != full recompute"

    record(
        f"apply({changes} added, {changes} removed) + level_metrics, {level_blocks:,}-block level",
        incremental,
        0.01,
        cpu=incremental_cpu,
        ratio=incremental / full,
        samples=incremental_samples,
    )
    record(
        f"full clustering_metrics recompute, {level_blocks:,}-block level",
        full,
        ratio=1.0,
        samples=full_samples,
    )
    return {
        "date": dt.date.today().isoformat(),
        "parameters": {
            "blocks": blocks,
            "string_blocks": string_count,
            "level_blocks": level_blocks,
            "changes": changes,
            "repeat": repeat,
            "seed": seed,
        },
        "machine": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        },
        "measures": measures,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = ["| measure | seconds | goal | ratio | cpu seconds |", "|---|---:|---:|---:|---:|"]
    for m in result["measures"]:
        goal = "" if m["goal_seconds"] is None else f"< {m['goal_seconds']:g} s ({'met' if m['met'] else 'MISSED'})"
        ratio = f"{m['ratio']:.3f}" if "ratio" in m else ""
        lines.append(f"| {m['measure']} | {m['seconds']:.4f} | {goal} | {ratio} | {m['cpu_seconds']:.4f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--blocks", type=int, default=1_000_000)
    parser.add_argument("--string-blocks", type=int, default=200_000)
    parser.add_argument("--level-blocks", type=int, default=100_000)
    parser.add_argument("--changes", type=int, default=100, help="blocks added and removed per commit")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=20240611)
    parser.add_argument("--out", type=Path, help="JSON file (default bench/results/metrics-<date>.json)")
    args = parser.parse_args(argv)
    result = run(args.blocks, args.string_blocks, args.level_blocks, args.changes, args.repeat, args.seed)
    print(markdown(result))
    out = args.out or RESULTS / f"metrics-{result['date']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
