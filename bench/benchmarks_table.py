"""The table of benchmarks (bench/registry.py) as `python -m bench --list` prints it and as docs/performance.md holds
it between `<!-- benchmarks:table -->` and `<!-- /benchmarks:table -->` (`python -m bench --write-docs`, checked by
`--check-docs` in `./dev docs`)."""

from __future__ import annotations

import difflib
import re
import sys

from bench.registry import BENCHMARKS, Benchmark
from docgen.figures import ROOT, Results, num, table

PAGE = ROOT / "docs" / "performance.md"
BLOCK = re.compile(r"(<!-- benchmarks:table -->\n).*?(<!-- /benchmarks:table -->)", re.DOTALL)


def run_time(results: Results, benchmark: Benchmark, quick: bool) -> str:
    """`<seconds> s (<file>)` from the newest results file of that mode, the registry's note, or why there is no
    figure (a results file without `seconds`: the benchmark did not record its run time)."""
    if quick and not benchmark.quick:
        return "one size"
    if benchmark.run_time:
        return benchmark.run_time
    file = results.newest_name(benchmark.results_name(quick))
    if file is None:
        return "no results file"
    seconds = results.get(benchmark.results_name(quick))[1].get("seconds")
    if isinstance(seconds, dict):  # a run of several parts records each and their total
        seconds = seconds.get("total")
    if not isinstance(seconds, int | float):
        return "not recorded"
    return f"{num(seconds)} s (`{file}`)"


def rows(results: Results) -> list[list[str]]:
    return [
        [
            f"`{b.name}`",
            f"`python -m {b.module}{''.join(' ' + a for a in b.args)}`",
            b.compares + (f"; needs {b.needs}" if b.needs else ""),
            f"`{b.results}{'[-quick]' if b.quick else ''}-<date>.json`",
            run_time(results, b, quick=True),
            run_time(results, b, quick=False),
            ", ".join(f"`{f}`" for f in b.cited) or "none",
        ]
        for b in BENCHMARKS
    ]


def benchmarks_table(results: Results | None = None) -> str:
    headers = ("benchmark", "command", "recluster against", "writes", "quick run", "full run", "the docs cite")
    return table(headers, rows(results or Results()), "lllllll")


def render(text: str) -> str:
    if not BLOCK.search(text):
        raise ValueError(f"{PAGE} has no <!-- benchmarks:table --> block")
    return BLOCK.sub(lambda m: m[1] + benchmarks_table() + "\n" + m[2], text, count=1)


def write_docs(check: bool) -> int:
    """Rewrite the block in docs/performance.md; with `check`, print the difference and return 1 instead."""
    current = PAGE.read_text(encoding="utf-8")
    wanted = render(current)
    if wanted == current:
        return 0
    if check:
        diff = difflib.unified_diff(current.splitlines(), wanted.splitlines(), str(PAGE), "generated", lineterm="")
        print("\n".join(diff), file=sys.stderr)
        print("docs/performance.md's table of benchmarks is stale: run `python -m bench --write-docs`", file=sys.stderr)
        return 1
    PAGE.write_text(wanted, encoding="utf-8")
    return 0
