"""The benchmarks, from their registry (bench/registry.py): `python -m bench --list | --all | NAME... [--quick]`.

Layout: every benchmark is a module `bench/<name>_bench.py` (and the package bench/compare/), registered in
bench/registry.py with what it compares, its results file and the files the docs cite; the helpers several of them
use are bench/common.py. Data that the tests share with the benchmarks (seeded workloads, the standalone cluster,
the Delta Spark referee) lives under tests/ and bench imports it from there; no test imports bench. What turns a
results file into docs text is docgen/ (`python -m docgen.readme_figures`), which imports nothing from bench.

Each named benchmark runs as `python -m <module> [--quick]` in its own interpreter (a fresh JVM each), prints its
markdown table and writes `bench/results/<name>[-quick]-<date>.json`; a combined table of their summary rows follows.
A benchmark that cannot run (Delta Spark or Kafka's jars missing, an error) fails with its own message; the others
still run and the command exits 1 naming each failure. `--all` writes the combined table and the seconds of each
to bench/results/all[-quick]-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
from typing import Any

from bench.benchmarks_table import benchmarks_table, write_docs
from bench.common import log, markdown_table, write_results
from bench.registry import BENCHMARKS, BY_NAME, Benchmark, registry_problems
from docgen.figures import RESULTS, ROOT, Json

HEADERS = ("benchmark", "measure", "recluster", "baseline", "ratio", "goal")


def metrics_rows(result: Json) -> list[list[Any]]:
    """Rows of the metrics benchmark's own result format (measures with seconds, goal and ratio)."""
    rows = []
    for measure in result.get("measures", []):
        goal = measure.get("goal_seconds")
        if goal is None and "ratio" not in measure:
            continue
        goal_text = "" if goal is None else f"< {goal:g} s ({'met' if measure.get('met') else 'MISSED'})"
        ratio = measure.get("ratio")
        baseline = measure["seconds"] / ratio if ratio else ""  # the metrics bench reports ratio = seconds / baseline
        rows.append(["metrics", f"{measure['measure']}, s", measure["seconds"], baseline, ratio or "", goal_text])
    return rows


def summary_rows(benchmark: Benchmark, quick: bool) -> list[list[Any]]:
    """The summary rows of the results file the run just wrote (today's)."""
    name = f"{benchmark.results_name(quick)}-{dt.date.today().isoformat()}.json"
    if not (RESULTS / name).exists():
        raise RuntimeError(f"{benchmark.name} exited 0 but wrote no bench/results/{name}")
    result: Json = json.loads((RESULTS / name).read_text(encoding="utf-8"))
    if "measures" in result:
        return metrics_rows(result)
    summary = result.get("summary")
    if not isinstance(summary, list):
        return [[benchmark.name, f"(its summary has its own format: bench/results/{name})", "", "", "", ""]]
    return [[benchmark.name, *row.values()] for row in summary]


def run(benchmarks: list[Benchmark], quick: bool) -> int:
    timings: dict[str, float] = {}
    rows: list[list[Any]] = []
    failures: list[str] = []
    started = time.perf_counter()
    for benchmark in benchmarks:
        command = [sys.executable, *benchmark.command(quick)]
        log(f"{benchmark.name}: {' '.join(command[1:])}")
        mark = time.perf_counter()
        completed = subprocess.run(command, cwd=ROOT, check=False)
        timings[benchmark.name] = time.perf_counter() - mark
        if completed.returncode != 0:
            failures.append(f"{benchmark.name}: `python {' '.join(command[1:])}` exited {completed.returncode}")
            continue
        rows += summary_rows(benchmark, quick)
    total = time.perf_counter() - started
    print("\n## benchmarks" + (" (--quick)" if quick else "") + "\n")
    print(markdown_table(HEADERS, rows))
    print("\nseconds: " + ", ".join(f"{name} {s:.0f}" for name, s in timings.items()) + f", total {total:.0f}")
    if len(benchmarks) == len(BENCHMARKS):
        result = {
            "quick": quick,
            "date": dt.date.today().isoformat(),
            "seconds": {**timings, "total": total},
            "failed": failures,
            "summary": [dict(zip(HEADERS, row, strict=True)) for row in rows],
        }
        print(f"wrote {write_results('all-quick' if quick else 'all', result)}")
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (names from --list)")
    parser.add_argument("--all", action="store_true", help="run every registered benchmark")
    parser.add_argument("--quick", action="store_true", help="small sizes (benchmarks with one size run as they are)")
    parser.add_argument("--list", action="store_true", help="print the table of benchmarks")
    parser.add_argument("--check", action="store_true", help="exit 1 when the registry and bench/ disagree")
    parser.add_argument("--write-docs", action="store_true", help="write the table into docs/performance.md")
    parser.add_argument("--check-docs", action="store_true", help="exit 1 when docs/performance.md's table is stale")
    args = parser.parse_args(argv)
    if args.list:
        print(benchmarks_table())
        return 0
    if args.check or args.check_docs:
        problems = registry_problems()
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else write_docs(check=True) if args.check_docs else 0
    if args.write_docs:
        return write_docs(check=False)
    unknown = [name for name in args.names if name not in BY_NAME]
    if unknown or not (args.all or args.names) or (args.all and args.names):
        parser.error(
            (f"unknown benchmarks: {', '.join(unknown)}; " if unknown else "")
            + "name benchmarks or give --all (not both); --list shows them"
        )
    return run(list(BENCHMARKS) if args.all else [BY_NAME[name] for name in args.names], args.quick)


if __name__ == "__main__":
    sys.exit(main())
