"""The registry of benchmarks (bench/registry.py) against bench/ itself, through `python -m bench` (no test imports
bench; no JVM): every bench/*_bench.py and bench/compare is registered, every registered module exists, and the table
of benchmarks in docs/performance.md is the one the registry makes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


def test_every_benchmark_module_is_registered_and_every_registered_module_exists() -> None:
    listed = bench("--list")
    assert listed.returncode == 0, listed.stderr
    modules = set(re.findall(r"`python -m (bench[\w.]*)", listed.stdout))
    on_disk = {f"bench.{path.stem}" for path in (ROOT / "bench").glob("*_bench.py")} | {"bench.compare"}
    assert modules == on_disk, f"registered only: {modules - on_disk}; not registered: {on_disk - modules}"
    for module in modules:
        relative = Path(*module.split("."))
        assert (ROOT / relative.with_suffix(".py")).exists() or (ROOT / relative / "__main__.py").exists(), module


def test_the_registry_check_and_the_docs_table_pass() -> None:
    checked = bench("--check-docs")
    assert checked.returncode == 0, checked.stderr


def test_an_unknown_benchmark_name_fails_and_runs_nothing() -> None:
    run = bench("no-such-benchmark")
    assert run.returncode == 2 and "unknown benchmarks: no-such-benchmark" in run.stderr, run.stderr
