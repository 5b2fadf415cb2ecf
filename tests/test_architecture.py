"""The layout is the architecture (docs/architecture.md): a pure core, one-way imports, no cycles, small modules."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("recluster", "jobs", "triggers")

LAYERS = {
    "recluster.core": 0,
    "recluster.settings": 0,
    "recluster.settings_input": 0,
    "recluster.settings_discovery": 0,
    "recluster.settings_job": 0,
    "recluster.settings_optimizing": 0,
    "recluster.delta": 1,
    "recluster.merge": 2,
    "recluster.spark": 2,
    "recluster.engine": 3,
    "triggers": 3,
    "recluster.cli": 4,
    "jobs": 4,
}
"""cli/jobs -> engine (and triggers, which adapt sources to the log's CommitEntry) -> merge, spark -> delta -> core.
A module may import its own layer and those below it, never one above."""

IMPURE = (
    "pyspark",
    "py4j",
    "deltalake",
    "pyarrow.fs",
    "pyarrow.parquet",
    "pyarrow.dataset",
    "kafka",
    "obstore",
    "duckdb",
    "http.client",
    "http.server",
    "urllib.request",
)
"""What recluster/core may never load, directly or through what it imports: Spark, delta-rs, file and network I/O."""

MAX_LINES = 400


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def imports_of(path: Path) -> set[str]:
    """Every project module `path` imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        found.update(n for n in names if n.split(".")[0] in PACKAGES)
    return found


def layer(module: str) -> int:
    matches = [
        (len(prefix), rank) for prefix, rank in LAYERS.items() if module == prefix or module.startswith(prefix + ".")
    ]
    assert matches, f"{module} belongs to no layer: add its package to LAYERS"
    return max(matches)[1]


def test_core_loads_no_spark_delta_or_io() -> None:
    core = sorted(m for m in modules() if m.startswith("recluster.core"))
    assert len(core) >= 8
    script = (
        "import importlib, sys\n"
        f"for name in {core!r}: importlib.import_module(name)\n"
        f"print(sorted(m for m in sys.modules if any(m == b or m.startswith(b + '.') for b in {IMPURE!r})))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]", f"recluster/core loaded {loaded.stdout.strip()}"


def test_imports_point_down_the_layers() -> None:
    upward = [
        f"{source} -> {target}"
        for source, path in modules().items()
        for target in sorted(imports_of(path))
        if layer(target) > layer(source)
    ]
    assert not upward, "upward imports: " + "; ".join(upward)


def test_no_import_cycles() -> None:
    known = modules()
    graph = {source: {t for t in imports_of(path) if t in known and t != source} for source, path in known.items()}
    cycles = []
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycles.append(" -> ".join([*trail[trail.index(target) :], target]))
            elif target not in state:
                visit(target, [*trail, target])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles: " + "; ".join(cycles)


def test_modules_stay_under_400_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): length
        for package in (*PACKAGES, "bench")
        for path in (ROOT / package).rglob("*.py")
        if (length := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def top_packages_imported(path: Path) -> set[str]:
    """The top-level package of every import in `path`, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            found.add((node.module or "").split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
    return found


def test_no_test_or_doc_generator_imports_bench() -> None:
    """bench/ may import test-support modules (tests/workload_data.py, tests/spark_cluster.py, tests/referee) and
    docgen/; never the other way round (docs/performance.md#how-the-figures-are-made)."""
    offenders = sorted(
        str(path.relative_to(ROOT))
        for package in ("tests", "docgen")
        for path in (ROOT / package).rglob("*.py")
        if "bench" in top_packages_imported(path)
    )
    assert not offenders, f"these import bench: {offenders}"


def test_no_test_module_imports_another() -> None:
    """What tests share is in tests/helpers.py (helpers) and tests/conftest.py (fixtures), never in a test_*
    module (docs/getting-started.md#the-quick-inner-loop): a test module may be deselected, moved or deleted alone."""
    offenders = sorted(
        f"{path.relative_to(ROOT)} imports {module}"
        for path in (ROOT / "tests").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom | ast.Import)
        for module in ([node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names])
        if module.rsplit(".", 1)[-1].startswith("test_")
    )
    assert not offenders, offenders
