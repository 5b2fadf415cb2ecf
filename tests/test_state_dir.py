"""One-off commands write nothing into the working directory: the job's state (checkpoint, optimizing history)
defaults to $XDG_STATE_HOME/recluster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from recluster.delta.log_writer import set_table_properties
from recluster.settings import CLUSTER_BY_PROPERTY, Settings


def test_optimize_keeps_its_history_in_the_state_directory(tmp_path: Path) -> None:
    table, cwd, state = tmp_path / "t", tmp_path / "cwd", tmp_path / "state"
    cwd.mkdir()
    rng = np.random.default_rng(4)
    for _ in range(4):
        write_deltalake(str(table), pa.table({"k": rng.integers(0, 1_000, 50)}), mode="append")
    set_table_properties(table, {CLUSTER_BY_PROPERTY: "k"})
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RECLUSTER_")}
    env["XDG_STATE_HOME"] = str(state)
    result = subprocess.run(
        [sys.executable, "-m", "recluster.cli", "optimize", str(table), "--type", "minor", "--json"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert list(cwd.iterdir()) == []
    assert DeltaTable(str(state / "recluster" / "checkpoint" / "history")).version() >= 0  # the history went here
    assert len(DeltaTable(str(table)).file_uris()) == 1


def test_default_state_directory(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("XDG_STATE_HOME", "/srv/state")
    assert Settings().stream.checkpoint_location == "/srv/state/recluster/checkpoint"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", "/home/someone")
    assert Settings().stream.checkpoint_location == "/home/someone/.local/state/recluster/checkpoint"
