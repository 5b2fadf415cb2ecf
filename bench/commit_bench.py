"""What writing our own commits costs: `python -m bench.commit_bench [--quick]`.

1. One rewrite commit (remove 50 files, add 5) with recluster's log writer (check every commit since the read
   version, create the next version's JSON only if absent) against delta-rs `create_write_transaction` with the same
   actions, alternating on copies of one 1,000-file table.
2. Loading a snapshot of a table with deletion vectors (recluster replays the log for their descriptors, from a
   checkpoint) against delta-rs alone opening the table and listing its files.
Ratios are recluster / delta-rs, best of the alternating runs.
"""

from __future__ import annotations

import importlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import AddAction, RemoveAction

from bench.common import log, machine, markdown_table, quick_cli, write_results
from recluster.core.blocks import WrittenFile
from recluster.core.keys import ClusterKey, KeyColumn, KeyType
from recluster.delta.commit import RewriteCommit, commit_rewrite
from recluster.delta.snapshot import load_snapshot

KEY = ClusterKey((KeyColumn("k", KeyType.INTEGER),))
REMOVED, ADDED = 50, 5
table_shapes = importlib.import_module("tests.table_shapes")
"""The test suite's deletion-vector writer, imported by name: mypy then checks bench without following the import
into tests/ (whose optional duckdb extension ships no type information)."""


def build(path: Path, files: int) -> None:
    """`files` appends of 100 rows; a checkpoint at the end."""
    for index in range(files):
        write_deltalake(str(path), pa.table({"k": list(range(index, index + 100))}), mode="append")
    DeltaTable(str(path)).create_checkpoint()


def rewrite_actions(path: Path) -> tuple[Any, list[WrittenFile]]:
    snapshot = load_snapshot(DeltaTable(str(path)), KEY, uri=str(path))
    removed = snapshot.blocks[:REMOVED]
    stats = {"numRecords": 100, "minValues": {"k": 0}, "maxValues": {"k": 99}, "nullCount": {"k": 0}}
    added = [WrittenFile(f"bench-{i}.parquet", 100, removed[i].bytes, (), stats, 1) for i in range(ADDED)]
    return snapshot, added


def ours(path: Path) -> float:
    snapshot, added = rewrite_actions(path)
    started = time.perf_counter()
    commit_rewrite(RewriteCommit(str(path), snapshot.version, snapshot.blocks[:REMOVED], tuple(added), "bench"), {})
    return time.perf_counter() - started


def delta_rs(path: Path) -> float:
    snapshot, added = rewrite_actions(path)
    started = time.perf_counter()
    table = DeltaTable(str(path))
    actions: list[AddAction | RemoveAction] = [
        RemoveAction(b.path, False, 1, b.bytes, {}) for b in snapshot.blocks[:REMOVED]
    ]
    actions += [AddAction(f.path, f.bytes, {}, 1, False, json.dumps(f.stats)) for f in added]
    table.create_write_transaction(actions, mode="append", schema=table.schema())
    return time.perf_counter() - started


def snapshot_ours(path: Path, vectors: bool = True) -> float:
    started = time.perf_counter()
    blocks = load_snapshot(DeltaTable(str(path)), KEY, uri=str(path)).blocks
    assert any(b.has_deletion_vector for b in blocks) is vectors
    return time.perf_counter() - started


def snapshot_delta_rs(path: Path) -> float:
    started = time.perf_counter()
    pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))
    return time.perf_counter() - started


def alternate(runs: int, first: Callable[[], float], second: Callable[[], float]) -> tuple[float, float]:
    a, b = [], []
    for _ in range(runs):
        a.append(first())
        b.append(second())
    return min(a), min(b)


def main(quick: bool = False) -> dict[str, Any]:
    files, runs = (300, 3) if quick else (1_000, 5)
    with tempfile.TemporaryDirectory(prefix="recluster-commit-bench-") as scratch:
        source = Path(scratch) / "source"
        log(f"commit bench: building a {files}-file table")
        build(source, files)
        copies = iter(range(10_000))

        def fresh() -> Path:
            target = Path(scratch) / f"copy{next(copies)}"
            shutil.copytree(source, target)
            return target

        commit_ours, commit_theirs = alternate(runs, lambda: ours(fresh()), lambda: delta_rs(fresh()))
        with_vectors = fresh()
        table_shapes.set_protocol_features(str(with_vectors), ["deletionVectors"], ["deletionVectors"])
        for path in sorted(
            a["path"] for a in pa.table(DeltaTable(str(with_vectors)).get_add_actions(True)).to_pylist()
        )[: files // 2]:
            table_shapes.add_deletion_vector(str(with_vectors), path, [1, 2, 3], inline=True)
        DeltaTable(str(with_vectors)).create_checkpoint()
        plain = fresh()
        replay, no_replay = alternate(runs, lambda: snapshot_ours(with_vectors), lambda: snapshot_ours(plain, False))
        load_ours, load_theirs = alternate(
            runs, lambda: snapshot_ours(with_vectors), lambda: snapshot_delta_rs(with_vectors)
        )
    rows = [
        {
            "measure": f"rewrite commit ({REMOVED} removes + {ADDED} adds, {files}-file table), s",
            "recluster": commit_ours,
            "baseline": commit_theirs,
            "ratio": commit_ours / commit_theirs,
            "goal": "<= 1.5",
        },
        {
            "measure": f"snapshot with deletion vectors ({files // 2} of {files} files), s",
            "recluster": load_ours,
            "baseline": load_theirs,
            "ratio": load_ours / load_theirs,
            "goal": "",
        },
        {
            "measure": "the same snapshot vs one without deletion vectors (no log replay), s",
            "recluster": replay,
            "baseline": no_replay,
            "ratio": replay / no_replay,
            "goal": "",
        },
    ]
    print("\n### commit: recluster's own log writer vs delta-rs\n")
    print(markdown_table(("measure", "recluster", "delta-rs", "ratio", "goal"), [list(r.values()) for r in rows]))
    result = {"quick": quick, "files": files, "runs": runs, "machine": machine(), "summary": rows}
    print(f"wrote {write_results('commit-quick' if quick else 'commit', result)}")
    return result


if __name__ == "__main__":
    quick_cli("python -m bench.commit_bench", main, description=__doc__.splitlines()[0])
    sys.exit(0)
