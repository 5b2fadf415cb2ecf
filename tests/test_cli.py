"""The `recluster` command line, run as a real subprocess on Delta tables written under tmp_path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from recluster.settings import CLUSTER_BY_PROPERTY
from recluster.table import set_table_properties

METRIC_KEYS = {
    "total_block_count",
    "constant_block_count",
    "unclustered_block_count",
    "total_rows",
    "total_bytes",
    "average_overlaps",
    "average_depth",
    "p95_depth",
    "p99_depth",
    "block_depth_histogram",
}


def _start(args: tuple[str | Path, ...]) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RECLUSTER_")}
    env["COLUMNS"] = "200"
    return subprocess.Popen(
        [sys.executable, "-m", "recluster.cli", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _finish(process: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    try:
        stdout, stderr = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return _finish(_start(args))


def run_together(*commands: tuple[str | Path, ...]) -> list[subprocess.CompletedProcess[str]]:
    """Several CLI runs at once (each one is mostly interpreter start-up)."""
    processes = [_start(args) for args in commands]
    return [_finish(p) for p in processes]


def run_json(*args: str | Path) -> dict[str, Any]:
    result = run(*args, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)  # the whole of stdout is exactly one JSON object
    assert isinstance(data, dict)
    return data


def assert_clean_error(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("recluster: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert result.stdout == ""
    return lines[0]


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cli")
    # Partitioned, key in the table property: x has two overlapping files, y one.
    parts = root / "parts"
    for p, keys in (("x", [0, 100]), ("x", [50, 150]), ("y", [0, 10, 100])):
        write_deltalake(
            str(parts),
            pa.table({"p": [p] * len(keys), "k": pa.array(keys, pa.int64()), "v": [1.5] * len(keys)}),
            mode="append",
            partition_by=["p"],
        )
    set_table_properties(DeltaTable(str(parts)), {CLUSTER_BY_PROPERTY: "k"})
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
    plain = root / "plain"
    plain.mkdir()
    (plain / "data.csv").write_text("k\n1\n")
    return {"parts": parts, "nested": nested, "plain": plain, "root": root}


def test_info_json(tables: dict[str, Path]) -> None:
    data = run_json("info", tables["parts"])
    assert set(data) == METRIC_KEYS | {"levels"}
    assert set(data["levels"]) == {"0"}
    assert set(data["levels"]["0"]) == METRIC_KEYS
    assert data["levels"]["0"] == {k: v for k, v in data.items() if k != "levels"}
    assert (data["total_block_count"], data["total_rows"], data["unclustered_block_count"]) == (3, 7, 0)
    # partitions never overlap: x's two files have depth 2, y's one file depth 1 (no rounding in JSON)
    assert data["average_depth"] == 5 / 3
    assert data["average_overlaps"] == 2 / 3
    assert (data["p95_depth"], data["p99_depth"]) == (2, 2)
    assert data["block_depth_histogram"] == {"00001": 1, "00002": 2}
    on_disk = sum(f.stat().st_size for f in tables["parts"].rglob("*.parquet"))
    assert data["total_bytes"] == on_disk


def test_info_human(tables: dict[str, Path]) -> None:
    result = run("info", tables["parts"])
    assert result.returncode == 0, result.stderr
    assert "depth histogram" in result.stdout
    assert "level 0" in result.stdout
    assert "key (k)" in result.stdout
    assert "00002" in result.stdout
    assert result.stderr == ""


def test_info_partition_and_cluster_by(tables: dict[str, Path]) -> None:
    x = run_json("info", tables["parts"], "--partition", "p=x")
    assert (x["total_block_count"], x["total_rows"], x["average_depth"]) == (2, 4, 2.0)
    y = run_json("info", tables["parts"], "--partition", "p=y", "--cluster-by", "v")
    assert (y["total_block_count"], y["constant_block_count"], y["average_depth"]) == (1, 1, 1.0)


def test_info_with_config_file_and_set(tables: dict[str, Path]) -> None:
    config = tables["root"] / "ok.yaml"
    config.write_text(f"tables:\n  - uri: {tables['nested']}\n    cluster_by: k\n", encoding="utf-8")
    data = run_json("info", tables["nested"], "--config", config, "--set", "clustering.depth_ratio=0.5")
    assert (data["total_block_count"], data["total_rows"]) == (1, 2)


@pytest.mark.parametrize(
    ("case", "fragments"),
    [
        ("not-a-table", ["is not a Delta table"]),
        ("missing-dir", ["is not a Delta table"]),
        ("unknown-key", ["unknown key column 'nope'"]),
        ("nested-struct", ["key column 'st' has nested type"]),
        ("nested-list", ["key column 'l' has nested type"]),
        ("nested-map", ["key column 'm' has nested type"]),
        ("no-key", ["has no cluster key"]),
        ("partition-key", ["'p' is a partition column"]),
        ("unknown-partition", ["unknown partition column 'q'"]),
        ("malformed-partition", ["--partition 'px'"]),
        ("bad-set", ["clustering.depth_ratio", "'abc'"]),
        ("malformed-set", ["section.field=value"]),
        ("malformed-yaml", ["malformed YAML", "line 2"]),
        ("missing-config", ["cannot read config file", "nope.yaml"]),
    ],
)
def test_bad_input_is_one_line(tables: dict[str, Path], case: str, fragments: list[str]) -> None:
    parts, nested, root = tables["parts"], tables["nested"], tables["root"]
    bad_yaml = root / "bad.yaml"
    bad_yaml.write_text("clustering:\n  depth_ratio: [0.2\n  target_rows: 5: 6\n", encoding="utf-8")
    args: dict[str, list[str | Path]] = {
        "not-a-table": ["info", tables["plain"], "--cluster-by", "k"],
        "missing-dir": ["info", root / "missing", "--cluster-by", "k"],
        "unknown-key": ["info", parts, "--cluster-by", "nope"],
        "nested-struct": ["info", nested, "--cluster-by", "st"],
        "nested-list": ["info", nested, "--cluster-by", "l"],
        "nested-map": ["info", nested, "--cluster-by", "m"],
        "no-key": ["info", nested],
        "partition-key": ["info", parts, "--cluster-by", "p"],
        "unknown-partition": ["info", parts, "--partition", "q=1"],
        "malformed-partition": ["info", parts, "--partition", "px"],
        "bad-set": ["info", parts, "--set", "clustering.depth_ratio=abc"],
        "malformed-set": ["info", parts, "--set", "clustering.depth_ratio"],
        "malformed-yaml": ["info", parts, "--config", bad_yaml],
        "missing-config": ["info", parts, "--config", root / "nope.yaml"],
    }
    plain, as_json = run_together((*args[case],), (*args[case], "--json"))
    assert_clean_error(plain, *fragments)
    assert_clean_error(as_json, *fragments)  # --json changes nothing for errors


def test_demo(tmp_path: Path) -> None:
    location = tmp_path / "demo"
    result = run("demo", "--path", location, "--batches", "3", "--rows", "100", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["total_block_count"], data["total_rows"], data["unclustered_block_count"]) == (3, 300, 0)
    assert set(data["levels"]) == {"0"}
    # random keys over the whole domain: every append overlaps every other
    assert data["average_depth"] == 3.0
    assert DeltaTable(str(location)).metadata().configuration[CLUSTER_BY_PROPERTY]
    # the demo table can be measured again by `info` with the key from its table property
    assert run_json("info", location) == data
