"""Scenario 2: `recluster watch` killed with SIGKILL at seeded points of a merge, restarted on the same checkpoint.

Kill points: while the merge reads and sorts (a seeded delay after it starts), while it writes (its first output
appears), between write and commit, right after the commit. After every kill the table holds exactly the
appended rows and every file it references exists; at the end `recluster clean` deletes exactly the outputs no
version references.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from tests.helpers import (
    append_random,
    kill_tree,
    main_json,
    recluster_commits,
    seen_version,
    start_watch,
    stop_watches,
    unexpected_tracebacks,
    wait_for,
)
from tests.reliability.checks import COUNTS, assert_intact, scaled, soak
from tests.reliability.processes import our_files_on_disk, start_phased_watch

pytestmark = [pytest.mark.slow, pytest.mark.needs_services]  # recluster watch subprocesses with local Spark

PHASES = ("read_sort", "write", "before_commit", "after_commit")
SEED = 20261122


def _markers(directory: Path, phase: str) -> int:
    return sum(1 for name in os.listdir(directory) if name.startswith(f"{phase}-"))


def referenced_by_any_version(table: Path) -> set[str]:
    """The oracle for orphan cleanup: every file some retained version of the table references."""
    latest = DeltaTable(str(table))
    referenced: set[str] = set()
    for version in range(latest.version() + 1):
        at = DeltaTable(str(table), version=version)
        missing = [u for u in at.file_uris() if not os.path.exists(u)]
        assert not missing, f"version {version} references missing files {missing[:3]}"
        referenced.update(str(Path(u).relative_to(table)) for u in at.file_uris())
    return referenced


def test_kill_9_at_seeded_points_then_restart_and_clean(tmp_path, capsys):
    table, checkpoint, markers, log = tmp_path / "events", tmp_path / "checkpoint", tmp_path / "m", tmp_path / "log"
    markers.mkdir()
    rng = np.random.default_rng(SEED)
    chooser = random.Random(SEED)
    if soak():
        plan = [chooser.choice(PHASES) for _ in range(40)]
    else:  # CI: one kill during the Spark job (read, sort or write), one before and one right after a commit
        plan = chooser.sample([chooser.choice(PHASES[:2]), *PHASES[2:]], 3)
    appended: list[pa.Table] = []

    def append() -> int:
        appended.append(append_random(table, rng, len(appended), rows=3_000, high=10**6))
        return DeltaTable(str(table)).version()

    append()
    for phase in plan:
        for _ in range(2):  # work for this life of the job
            append()
        for name in os.listdir(markers):  # each life of the job marks afresh
            os.remove(markers / name)
        pause = phase if phase in ("before_commit", "after_commit") else ""
        process = start_phased_watch(table, checkpoint, log, markers, pause)
        try:
            if phase == "read_sort":
                wait_for(lambda: _markers(markers, "merge") > 0, "a merge to start", process)
                # the kill lands a seeded moment later, somewhere in reading, sorting or writing: nothing to wait for
                time.sleep(chooser.uniform(0.0, 1.5))
            elif phase == "write":
                on_disk = our_files_on_disk(table)
                wait_for(lambda on_disk=on_disk: our_files_on_disk(table) - on_disk, "a merge output on disk", process)
            else:
                wait_for(lambda phase=phase: _markers(markers, phase) > 0, f"the {phase} point", process)
        finally:
            kill_tree(process)
        COUNTS.kills += 1
        assert_intact(table, pa.concat_tables(appended))

    # Scenario 3 in the last life: the restarted job and a second instance (its own checkpoint, from the
    # earliest version) serve the same table at once while a writer appends; both stop gracefully.
    committed = recluster_commits(table)
    logs = [log, tmp_path / "second.log"]
    processes = [start_watch([table], checkpoint, logs[0]), start_watch([table], tmp_path / "checkpoint2", logs[1])]
    try:
        for _ in range(scaled(3, 20)):
            version = append()
            for process, output in zip(processes, logs, strict=True):  # the writer goes on once both have seen it
                wait_for(
                    lambda output=output, version=version: seen_version(output) >= version,
                    f"both instances to see version {version}",
                    process,
                )
        for process, output in zip(processes, logs, strict=True):
            wait_for(lambda output=output: "recluster table=" in output.read_text(), "both instances at work", process)
        wait_for(lambda: recluster_commits(table) > committed, "a commit after the restarts", processes[0])
    finally:
        stop_watches(list(zip(processes, logs, strict=True)))
    for output in logs:
        assert not unexpected_tracebacks(output.read_text(), after="watching 1 table"), output.read_text()[-3000:]
    expected = pa.concat_tables(appended)
    assert_intact(table, expected)

    # Orphan cleanup removes exactly the outputs no retained version references.
    orphans = our_files_on_disk(table) - referenced_by_any_version(table)
    for path in our_files_on_disk(table):
        os.utime(table / path, (1, 1))  # past the safety age
    cleaned = main_json(capsys, "clean", table, "--safety-age-hours", "1")
    assert {o["path"] for o in cleaned["orphans"]} == orphans
    assert our_files_on_disk(table) == our_files_on_disk(table) & referenced_by_any_version(table)
    assert not (our_files_on_disk(table) & orphans)
    print(f"kills={len(plan)} phases={plan} orphans cleaned={len(orphans)}")
    assert_intact(table, expected)
