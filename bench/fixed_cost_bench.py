"""Fixed costs: small work in about a second (issue 18). Run from the project root: `python -m bench.fixed_cost_bench`.

- Cold CLI `recluster optimize --type minor` on a table of 60 tiny files (1,000 rows, about 48 KB each), wall time
  of the whole command in a fresh process, against delta-rs `optimize.compact()` in a fresh Python process.
- Cold CLI `recluster info` on a 1,000-file table, against delta-rs opening the same table and reading its add
  actions in a fresh Python process.
- Per-append round: a clustered table of 20 x 5 MB gets 5 MB appends; after each, one incremental round in a warm
  process (snapshot read, planning, the merge in the process, the commit: what the job does per commit), against the
  append itself (`write_deltalake` of the same 5 MB). The slowest of `APPENDS` (rounds that merge and rounds that
  find nothing to do).
Each cold command runs `REPEATS` times alternating with its baseline; the best of each is kept. Every rewrite is
checked to keep the rows (count + order-independent hash). Writes bench/results/fixed-cost-<date>.json.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from deltalake import DeltaTable

from bench.common import log, publish, quick_cli, random_batch
from tests.fingerprints import row_fingerprint
from tests.workload_data import append

REPEATS = 3
APPENDS = 5
APPEND_ROWS = 110_000
"""About 5 MB of Parquet in bench's row shape (int64 key, float, 20 letters, int)."""


def cold(command: list[str], env_dir: Path) -> float:
    """Wall seconds of a command in a fresh process (state kept out of the working directory)."""
    started = time.perf_counter()
    subprocess.run(
        command,
        check=True,
        capture_output=True,
        cwd=env_dir,
        env={**os.environ, "XDG_STATE_HOME": str(env_dir / "state")},
    )
    return time.perf_counter() - started


def table_of(path: Path, files: int, rows: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(files):
        append(path, random_batch(rng, rows))


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def recluster_cli(*args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "recluster"), *args]  # the console script, as users run it


def minor_optimize(scratch: Path, files: int) -> dict[str, Any]:
    source = scratch / "tiny"
    table_of(source, files, 1_000, seed=1)
    expected = row_fingerprint(DeltaTable(str(source)).to_pyarrow_table())
    ours: list[float] = []
    theirs: list[float] = []
    for attempt in range(REPEATS):
        for side, times in (("recluster", ours), ("delta-rs", theirs)):
            copy = scratch / f"tiny-{side}-{attempt}"
            shutil.copytree(source, copy)
            if side == "recluster":
                times.append(cold(recluster_cli("optimize", str(copy), "--type", "minor", "--json"), scratch))
            else:
                code = f"from deltalake import DeltaTable; DeltaTable({str(copy)!r}).optimize.compact()"
                times.append(cold(python(code), scratch))
            after = DeltaTable(str(copy))
            assert row_fingerprint(after.to_pyarrow_table()) == expected, f"{side} changed the rows"
            assert len(after.file_uris()) < files, f"{side} did not compact"
            shutil.rmtree(copy)
    log(f"minor optimize on {files} tiny files: recluster {min(ours):.2f} s, delta-rs compact {min(theirs):.2f} s")
    return {"files": files, "recluster_seconds": ours, "delta_rs_seconds": theirs}


def info(scratch: Path, files: int) -> dict[str, Any]:
    path = scratch / "wide"
    table_of(path, files, 200, seed=2)
    ours: list[float] = []
    theirs: list[float] = []
    code = f"from deltalake import DeltaTable; DeltaTable({str(path)!r}).get_add_actions(flatten=True)"
    for _ in range(REPEATS):
        ours.append(cold(recluster_cli("info", str(path), "--json"), scratch))
        theirs.append(cold(python(code), scratch))
    log(f"info on {files} files: recluster {min(ours):.2f} s, delta-rs open + add actions {min(theirs):.2f} s")
    return {"files": files, "recluster_seconds": ours, "delta_rs_seconds": theirs}


def no_spark() -> Any:
    raise AssertionError("a per-append round started Spark")


def per_append_round(scratch: Path) -> dict[str, Any]:
    """Warm process: the job's per-commit work on a clustered table after a 5 MB append."""
    from recluster.engine.rounds import recluster_table, snapshot_loader
    from recluster.settings import Settings

    path = scratch / "stream"
    settings = Settings()
    table_of(path, 20, APPEND_ROWS, seed=3)
    recluster_table(
        str(path), snapshot_loader(str(path), settings, None), settings=settings, spark_factory=no_spark, final=True
    )
    rng = np.random.default_rng(4)
    rounds: list[float] = []
    appends: list[float] = []
    sizes: list[int] = []
    tasks: list[int] = []
    for _ in range(APPENDS):
        batch = random_batch(rng, APPEND_ROWS)
        started = time.perf_counter()
        append(path, batch)
        appends.append(time.perf_counter() - started)
        sizes.append(int(DeltaTable(str(path)).get_add_actions(flatten=True).column("size_bytes").to_pylist()[-1]))
        expected = row_fingerprint(DeltaTable(str(path)).to_pyarrow_table())
        started = time.perf_counter()
        loader = snapshot_loader(str(path), settings, None)
        result = recluster_table(str(path), loader, settings=settings, spark_factory=no_spark)
        rounds.append(time.perf_counter() - started)
        tasks.append(result.totals.tasks)
        assert row_fingerprint(DeltaTable(str(path)).to_pyarrow_table()) == expected, "a round changed the rows"
    log(f"per-append round: median {np.median(rounds):.2f} s (append {np.median(appends):.2f} s), tasks {tasks}")
    return {"round_seconds": rounds, "append_seconds": appends, "append_bytes": sizes, "tasks": tasks}


def main(quick: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="recluster-fixed-cost-") as scratch:
        work = Path(scratch)
        minor = minor_optimize(work, 60)
        listing = info(work, 200 if quick else 1_000)
        stream = per_append_round(work)
    rows = [
        [
            "cold CLI optimize --type minor, 60 tiny files, s (vs delta-rs compact)",
            min(minor["recluster_seconds"]),
            min(minor["delta_rs_seconds"]),
            min(minor["recluster_seconds"]) / min(minor["delta_rs_seconds"]),
            "<= 3 s",
        ],
        [
            f"cold CLI info, {listing['files']:,} files, s (vs delta-rs open + add actions)",
            min(listing["recluster_seconds"]),
            min(listing["delta_rs_seconds"]),
            min(listing["recluster_seconds"]) / min(listing["delta_rs_seconds"]),
            "<= 1 s",
        ],
        [
            "per-append round after a 5 MB append, slowest of the rounds, s (vs the slowest append)",
            max(stream["round_seconds"]),
            max(stream["append_seconds"]),
            max(stream["round_seconds"]) / max(stream["append_seconds"]),
            "<= 0.5 s",
        ],
    ]
    result = {
        "quick": quick,
        "minor_optimize": minor,
        "info": listing,
        "per_append_round": stream,
    }
    return publish("fixed-cost", "fixed costs", quick, rows, result)


if __name__ == "__main__":
    quick_cli("python -m bench.fixed_cost_bench", main, description=__doc__.splitlines()[0] if __doc__ else None)
