"""Scenario 6: every command with bad input: one clear line on stderr, a non-zero exit, no traceback, and every
table untouched (same version, same files on disk)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from recluster.delta.log_writer import set_table_properties
from recluster.settings import CLUSTER_BY_PROPERTY
from tests.helpers import Run, run_cli
from tests.reliability.checks import assert_intact


def make_tables(root: Path) -> dict[str, Path]:
    good, mapped, frozen = root / "good", root / "mapped", root / "frozen"
    for path in (good, frozen):
        for batch in range(3):
            write_deltalake(
                str(path), pa.table({"k": pa.array([3, 1, 2], pa.int64()), "p": [batch] * 3}), mode="append"
            )
        set_table_properties(path, {CLUSTER_BY_PROPERTY: "k"})
    write_deltalake(
        str(mapped),
        pa.table({"k": pa.array([1, 2], pa.int64()), "p": [1, 1]}),
        partition_by=["p"],
        configuration={"delta.columnMapping.mode": "name"},
    )
    blocker = root / "blocker"
    blocker.write_text("a file, not a directory")
    (root / "types.yaml").write_text("clustering:\n  target_rows: lots\n", encoding="utf-8")
    (root / "tables.yaml").write_text("tables: /data/events\n", encoding="utf-8")
    (root / "list.yaml").write_text("- clustering\n", encoding="utf-8")
    (root / "unknown.yaml").write_text("clustering:\n  depth: 3\n", encoding="utf-8")
    return {"good": good, "mapped": mapped, "frozen": frozen, "blocker": blocker, "root": root}


def cases(t: dict[str, Path]) -> dict[str, tuple[list[str], str]]:
    """name -> (arguments, a fragment the error line must contain)."""
    good, mapped, frozen, root = str(t["good"]), str(t["mapped"]), str(t["frozen"]), t["root"]
    missing = str(root / "missing")
    blocked = str(t["blocker"] / "inside")
    return {
        "no-command": ([], "required: COMMAND"),
        "unknown-command": (["optimise", good], "invalid choice"),
        "info-no-table": (["info"], "required: TABLE_URI"),
        "info-missing-table": (["info", missing], "is not a Delta table"),
        "info-unknown-key": (["info", good, "--cluster-by", "nope"], "unknown key column 'nope'"),
        "info-unknown-partition": (["info", good, "--partition", "nope=1"], "unknown partition column 'nope'"),
        "info-column-mapping": (["info", mapped, "--cluster-by", "k"], "column mapping mode 'name' on a partitioned"),
        "info-yaml-wrong-type": (["info", good, "--config", str(root / "types.yaml")], "clustering.target_rows"),
        "info-yaml-tables-not-list": (["info", good, "--config", str(root / "tables.yaml")], "tables"),
        "info-yaml-top-level-list": (["info", good, "--config", str(root / "list.yaml")], "list.yaml"),
        "info-yaml-unknown-field": (["info", good, "--config", str(root / "unknown.yaml")], "clustering.depth"),
        "run-limit-not-a-number": (["run", good, "--limit", "x"], "invalid int value: 'x'"),
        "run-limit-zero": (["run", good, "--limit", "0"], "--limit must be a positive"),
        "run-where-syntax": (["run", good, "--where", "k >>> 3"], "syntax error"),
        "run-where-unknown-column": (["run", good, "--where", "nope = 3"], "nope"),
        "run-set-negative": (["run", good, "--set", "clustering.target_rows=-5"], "clustering.target_rows"),
        "run-set-unknown-section": (["run", good, "--set", "clusterin.target_rows=5"], "clusterin"),
        "run-missing-table": (["run", missing, "--final"], "is not a Delta table"),
        "run-column-mapping": (["run", mapped, "--final", "--cluster-by", "k"], "column mapping"),
        "run-unwritable-table": (["run", frozen, "--final"], "is not writable"),
        "sql-empty": (["sql", ""], "syntax error"),
        "sql-unsupported": (["sql", "DROP TABLE x"], "syntax error"),
        "sql-truncated": (["sql", "ALTER TABLE"], "syntax error"),
        "sql-limit-text": (["sql", f"ALTER TABLE '{good}' RECLUSTER LIMIT many"], "syntax error"),
        "sql-missing-table": (["sql", f"ALTER TABLE delta.`{missing}` RECLUSTER"], "is not a Delta table"),
        "sql-unknown-key": (["sql", f"ALTER TABLE '{good}' CLUSTER BY (nope)"], "unknown key column 'nope'"),
        "sql-unknown-where-column": (["sql", f"ALTER TABLE '{good}' RECLUSTER WHERE nope > 1"], "nope"),
        "sql-column-mapping": (["sql", f"ALTER TABLE '{mapped}' RECLUSTER FINAL"], "column mapping"),
        "sql-unwritable-cluster-by": (["sql", f"ALTER TABLE '{frozen}' CLUSTER BY (p)"], "cannot set table properties"),
        "watch-no-tables": (["watch"], "no tables to watch"),
        "watch-bad-trigger": (["watch", "--table", good, "--trigger-seconds", "soon"], "invalid float value"),
        "watch-bad-starting-version": (
            ["watch", "--table", good, "--starting-version", "yesterday"],
            "starting_version",
        ),
        "watch-bad-source": (["watch", "--table", good, "--source", "files"], "invalid choice"),
        "watch-unwritable-checkpoint": (["watch", "--table", good, "--checkpoint", blocked], "not writable"),
        "publish-no-table": (["publish-commits"], "--table"),
        "metrics-no-subcommand": (["metrics"], "required: COMMAND"),
        "clean-missing-table": (["clean", missing], "is not a Delta table"),
        "clean-negative-age": (["clean", good, "--safety-age-hours", "-1"], "must not be negative"),
        "clean-age-not-a-number": (["clean", good, "--safety-age-hours", "old"], "invalid float value"),
        "metrics-schema-extra-argument": (["metrics-schema", "--bogus"], "unrecognized arguments"),
        "demo-unwritable-path": (["demo", "--path", blocked, "--seconds", "1"], "cannot write the demo table"),
        "demo-bad-rows": (["demo", "--rows", "0", "--seconds", "1", "--path", str(root / "demo")], "--rows"),
    }


def fingerprint(path: Path) -> tuple[int, tuple[tuple[str, int, int], ...]]:
    """A table's version and every file under it (name, size, mtime): untouched means equal."""
    files = []
    for directory, _, names in os.walk(path):
        for name in names:
            stat = os.stat(os.path.join(directory, name))
            files.append((os.path.relpath(os.path.join(directory, name), path), stat.st_size, stat.st_mtime_ns))
    return DeltaTable(str(path)).version(), tuple(sorted(files))


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    made = make_tables(tmp_path_factory.mktemp("bad-input"))
    frozen = made["frozen"]
    # an unwritable location, even for root: the directory is immutable (chattr +i)
    subprocess.run(["chattr", "+i", str(frozen), str(frozen / "_delta_log")], check=True)
    try:
        yield made
    finally:
        subprocess.run(["chattr", "-i", str(frozen), str(frozen / "_delta_log")], check=True)


@pytest.fixture(scope="module")
def runs(tables: dict[str, Path]) -> dict[str, tuple[Run, str]]:
    todo = cases(tables)
    names = ("good", "mapped", "frozen")
    before = {name: fingerprint(tables[name]) for name in names}
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = dict(zip(todo, pool.map(lambda args: run_cli(*args), (args for args, _ in todo.values())), strict=True))
    after = {name: fingerprint(tables[name]) for name in names}
    assert after == before, "a table was changed by bad input"
    return {name: (done[name], todo[name][1]) for name in todo}


CASES = list(cases(dict.fromkeys(("good", "mapped", "frozen", "blocker", "root"), Path("."))))


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_clear_line(runs, case):
    result, fragment = runs[case]
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("recluster: error: "), lines[0]
    assert fragment in lines[0], lines[0]


def test_tables_untouched_by_bad_input(runs, tables):
    assert runs  # the fixture compared every table before and after all the runs
    for name in ("good", "frozen"):
        rows = [pa.table({"k": pa.array([3, 1, 2], pa.int64()), "p": [batch] * 3}) for batch in range(3)]
        assert_intact(tables[name], pa.concat_tables(rows))
