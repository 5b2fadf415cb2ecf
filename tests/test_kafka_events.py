"""Which commits a Kafka-driven job reads from the events it receives (recluster/engine/job_tables.py): every job
sharing tables receives every event, and reads the commits of the tables it serves only (docs/kafka.md). No JVM, no
broker: the events are the rows the commit-event source gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from recluster.core.discovery import Level, PropertyLayer
from recluster.engine.handler import ReclusterHandler
from recluster.engine.job_tables import JobTables
from recluster.settings import Settings, TableSettings
from recluster.settings_discovery import DiscoverySettings, StorageRoot
from tests.helpers import Batch, append_random, job_settings


def event(table: Path, version: int) -> dict[str, Any]:
    return {"table": str(table), "version": version, "error": None, "kafka_partition": 0, "kafka_offset": version}


def announced(tables: JobTables, *paths: Path) -> set[tuple[str, int]]:
    """(table, version) of the commits read for events announcing versions 0 and 1 of each of `paths`."""
    read = tables.commits_for_events([event(path, version) for path in paths for version in (0, 1)])
    return {(commit.table, commit.version) for commit in read.commits}


def test_a_job_reads_the_commits_of_the_tables_it_serves_only(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "lake" / "ours", tmp_path / "lake" / "theirs"
    for path in (ours, theirs):
        for seed in range(2):
            write_deltalake(str(path), pa.table({"k": np.random.default_rng(seed).integers(0, 99, 10)}), mode="append")
    both = {(str(path), version) for path in (ours, theirs) for version in (0, 1)}

    assert announced(JobTables(Settings(), []), ours, theirs) == both  # nothing configured: every table named
    listed = JobTables(Settings(), [TableSettings(uri=str(ours))])
    assert announced(listed, ours, theirs) == {(str(ours), 0), (str(ours), 1)}

    discovering = Settings(discovery=DiscoverySettings(roots=[StorageRoot(uri=str(tmp_path / "lake"))]))
    sharing = JobTables(discovering, [])
    assert announced(sharing, ours, theirs) == set()  # found, but owned by no one yet (or by another job)
    sharing.add_found(TableSettings(uri=str(ours)), (PropertyLayer.of(Level.ROOT, str(tmp_path / "lake"), {}),))
    assert announced(sharing, ours, theirs) == {(str(ours), 0), (str(ours), 1)}
    named = sharing.commits_for_events([event(ours, 0), event(theirs, 0)])
    assert named.unserved == {str(theirs)}  # asked of discovery: read first if this job claimed it
    sharing.remove_found(str(ours))  # let go: taken over by another job
    assert announced(sharing, ours, theirs) == set()


def test_a_table_whose_announced_commit_cannot_be_read_fails_alone_and_comes_back(tmp_path: Path) -> None:
    """The commits events announce are read several tables at once; one that cannot be read fails that table (its
    error shown, its state dropped) while the batch decides the others, and its next event takes it up again."""
    broken, fine = tmp_path / "broken", tmp_path / "fine"
    rng = np.random.default_rng(44)
    for table in (broken, fine):
        append_random(table, rng, 0)
    listed = job_settings(tmp_path / "checkpoint", [broken, fine])
    settings = listed.model_copy(update={"stream": listed.stream.model_copy(update={"source": "kafka"})})
    handler = ReclusterHandler(settings, settings.tables, spark=None)
    for table in (broken, fine):
        handler.tracked[str(table)] = handler.tables.track(str(table), None)
        append_random(table, rng, 1)
    versions = {table: DeltaTable(str(table)).version() for table in (broken, fine)}
    commit = broken / "_delta_log" / f"{versions[broken]:020d}.json"
    aside = commit.rename(tmp_path / "aside.json")
    commit.mkdir()  # a commit file that cannot be read (not a missing one: that is a gap in the log)

    handler(Batch([event(broken, versions[broken]), event(fine, versions[fine])]), 1)
    assert handler.status[str(fine)].version == versions[fine] and handler.status[str(fine)].error is None
    assert handler.status[str(broken)].error is not None and str(broken) not in handler.tracked

    commit.rmdir()
    aside.rename(commit)
    append_random(broken, rng, 2)
    handler(Batch([event(broken, versions[broken] + 1)]), 2)
    assert handler.status[str(broken)].version == versions[broken] + 1
    assert handler.status[str(broken)].error is None
