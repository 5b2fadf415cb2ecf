"""A normal run is quiet and tidy: no Spark/log4j chatter on stderr, nothing written into the current directory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from tests.helpers import run_cli

JVM_NOTICE = "WARNING: Using incubator modules: jdk.incubator.vector"
"""Printed by the JVM launcher itself for the module Spark 4 adds; no logging configuration reaches it."""


def test_final_run_prints_no_log4j_lines_and_writes_nothing_into_the_working_directory(tmp_path: Path) -> None:
    table, cwd = tmp_path / "t", tmp_path / "cwd"
    cwd.mkdir()
    rng = np.random.default_rng(2)
    for _ in range(3):
        write_deltalake(str(table), pa.table({"k": rng.integers(0, 1_000, 300)}), mode="append")
    result = run_cli("run", table, "--cluster-by", "k", "--final", cwd=cwd, timeout=300)
    assert result.returncode == 0, result.stderr
    noise = [line for line in result.stderr.splitlines() if line.strip() and line.strip() != JVM_NOTICE]
    assert not noise, "stderr of a normal run: " + "\n".join(noise)
    assert "average_depth 3.000 -> 1.000" in result.stdout
    assert list(cwd.iterdir()) == []
    assert len(DeltaTable(str(table)).file_uris()) == 1
