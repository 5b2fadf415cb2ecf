"""The `recluster` command line, run as real subprocesses on Delta tables written under tmp_path.

Each run is mostly interpreter start-up, so all the runs of this module start together from one
module-scoped fixture (a few at a time) and each test then checks the run(s) it is about.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from recluster.delta.log_writer import set_table_properties
from recluster.engine.demo import DEMO_KEY, append_demo_batch
from recluster.settings import CLUSTER_BY_PROPERTY
from tests.helpers import METRIC_KEYS, Run, run_cli


def make_tables(root: Path) -> dict[str, Path]:
    # Partitioned, key in the table property: x has two overlapping files, y one.
    parts = root / "parts"
    for p, keys in (("x", [0, 100]), ("x", [50, 150]), ("y", [0, 10, 100])):
        write_deltalake(
            str(parts),
            pa.table({"p": [p] * len(keys), "k": pa.array(keys, pa.int64()), "v": [1.5] * len(keys)}),
            mode="append",
            partition_by=["p"],
        )
    set_table_properties(parts, {CLUSTER_BY_PROPERTY: "k"})
    # No key property; nested columns.
    nested = root / "nested"
    write_deltalake(
        str(nested),
        pa.table(
            {
                "k": pa.array([1, 2], pa.int64()),
                "st": pa.array([{"x": 1}, {"x": 2}]),
                "l": pa.array([[1], [2, 3]]),
                "m": pa.array([[("a", 1)], [("b", 2)]], pa.map_(pa.string(), pa.int64())),
            }
        ),
        mode="append",
    )
    # What `recluster demo` appends (random keys, key in the table property), without its Spark job.
    demo = root / "demo" / "events"
    rng = np.random.default_rng(7)
    for batch in range(3):
        append_demo_batch(demo, rng, 100, batch)
    plain = root / "plain"
    plain.mkdir()
    (plain / "data.csv").write_text("k\n1\n")
    (root / "ok.yaml").write_text(f"tables:\n  - uri: {nested}\n    cluster_by: k\n", encoding="utf-8")
    (root / "bad.yaml").write_text("clustering:\n  depth_ratio: 0.2\n   target_rows: [5\n", encoding="utf-8")
    return {"parts": parts, "nested": nested, "demo": demo, "plain": plain, "root": root}


def commands(t: dict[str, Path]) -> dict[str, list[str | Path]]:
    parts, nested, root = t["parts"], t["nested"], t["root"]
    return {
        # successes
        "json": ["info", parts, "--json"],
        "human": ["info", parts],
        "partition-x": ["info", parts, "--partition", "p=x", "--cluster-by", "v", "--json"],
        "config-and-set": [
            "info",
            nested,
            "--config",
            root / "ok.yaml",
            "--set",
            "clustering.depth_ratio=0.5",
            "--json",
        ],
        "demo-table": ["info", t["demo"], "--json"],
        # bad input
        "not-a-table": ["info", t["plain"], "--cluster-by", "k", "--json"],
        "unknown-key": ["info", parts, "--cluster-by", "nope"],
        "nested-struct": ["info", nested, "--cluster-by", "st"],
        "no-key": ["info", nested],
        "malformed-partition": ["info", parts, "--partition", "px"],
        "bad-set": ["info", parts, "--set", "clustering.depth_ratio=abc"],
        "malformed-yaml": ["info", parts, "--config", root / "bad.yaml"],
        "missing-config": ["info", parts, "--config", root / "nope.yaml", "--json"],
    }


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_tables(tmp_path_factory.mktemp("cli"))


@pytest.fixture(scope="module")
def runs(tables: dict[str, Path]) -> dict[str, Run]:
    todo = commands(tables)
    wide = {"COLUMNS": "200"}  # no human-readable line wraps
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(todo, pool.map(lambda args: run_cli(*args, env=wide), todo.values()), strict=True))


def output_json(result: Run) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)  # the whole of stdout is exactly one JSON object
    assert isinstance(data, dict)
    return data


def test_info_json(runs: dict[str, Run], tables: dict[str, Path]) -> None:
    data = output_json(runs["json"])
    assert set(data) == {*METRIC_KEYS, "levels", "column_scan", "time_like"}
    # partition x's second file moves the largest key forward with a lag of 50: a time-like layout (issue 20); the
    # watermark trails the largest key (150) by the lag and 1/64 of it more, rounded down
    (decision,) = data["time_like"]
    assert decision["partition"] == "p=x" and decision["lag"] == "50" and decision["watermark"] == "99"
    assert set(data["levels"]) == {"0"}
    assert set(data["levels"]["0"]) == set(METRIC_KEYS)
    assert data["levels"]["0"] == {k: v for k, v in data.items() if k not in ("levels", "column_scan", "time_like")}
    assert set(data["column_scan"]) == {"k"} and 0 < data["column_scan"]["k"] <= 1
    assert (data["total_block_count"], data["total_rows"], data["unclustered_block_count"]) == (3, 7, 0)
    # partitions never overlap: x's two files have depth 2, y's one file depth 1 (no rounding in JSON)
    assert data["average_depth"] == 5 / 3
    assert data["average_overlaps"] == 2 / 3
    assert (data["p95_depth"], data["p99_depth"]) == (2, 2)
    assert data["block_depth_histogram"] == {"00001": 1, "00002": 2}
    assert data["constant_block_count"] == 0
    on_disk = sum(f.stat().st_size for f in tables["parts"].rglob("*.parquet"))
    assert data["total_bytes"] == on_disk
    assert runs["json"].stderr == ""


def test_info_human(runs: dict[str, Run]) -> None:
    result = runs["human"]
    assert result.returncode == 0, result.stderr
    assert "depth histogram" in result.stdout
    assert "level 0" in result.stdout
    assert "key (k)" in result.stdout
    assert "00002" in result.stdout
    assert result.stderr == ""


def test_info_partition_and_cluster_by(runs: dict[str, Run]) -> None:
    x = output_json(runs["partition-x"])
    # --cluster-by v beats the table property (k): v is 1.5 in every row, so x's two files are constant
    # and overlap each other (on k they would overlap too, but would not be constant)
    assert (x["total_block_count"], x["total_rows"], x["constant_block_count"]) == (2, 4, 2)
    assert x["average_depth"] == 2.0


def test_info_key_from_config_file_with_set(runs: dict[str, Run]) -> None:
    data = output_json(runs["config-and-set"])
    assert (data["total_block_count"], data["total_rows"], data["average_depth"]) == (1, 2, 1.0)


def test_info_on_demo_table(runs: dict[str, Run], tables: dict[str, Path]) -> None:
    # `recluster demo` now runs the streaming job (Spark) for --seconds; here only its table is checked.
    assert DeltaTable(str(tables["demo"])).metadata().configuration[CLUSTER_BY_PROPERTY] == DEMO_KEY
    data = output_json(runs["demo-table"])
    assert (data["total_block_count"], data["total_rows"], data["unclustered_block_count"]) == (3, 300, 0)
    assert data["average_depth"] == 3.0  # random keys over the whole domain: every append overlaps all


@pytest.mark.parametrize(
    ("case", "fragments"),
    [
        ("not-a-table", ["is not a Delta table"]),
        ("unknown-key", ["unknown key column 'nope'"]),
        ("nested-struct", ["key column 'st' has nested type"]),
        ("no-key", ["has no cluster key", "--cluster-by"]),
        ("malformed-partition", ["--partition 'px'", "column=value"]),
        ("bad-set", ["invalid setting clustering.depth_ratio", "'abc'"]),
        ("malformed-yaml", ["malformed YAML", "bad.yaml", "line 3"]),
        ("missing-config", ["cannot read config file", "nope.yaml"]),
    ],
)
def test_bad_input_is_one_line(runs: dict[str, Run], case: str, fragments: list[str]) -> None:
    result = runs[case]
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("recluster: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert result.stdout == ""


def test_demo_refuses_to_write_into_an_existing_table(tables: dict[str, Path], tmp_path: Path) -> None:
    """`demo --table URI` writes a new table; an existing one is refused before anything is written or started."""
    version = DeltaTable(str(tables["demo"])).version()
    result = run_cli("demo", "--table", tables["demo"], "--path", tmp_path / "demo-run", "--seconds", "1")
    assert result.returncode == 2 and "is already a Delta table" in result.stderr, result.stderr
    assert DeltaTable(str(tables["demo"])).version() == version
    assert not (tmp_path / "demo-run").exists()
