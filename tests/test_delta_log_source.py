"""The Delta-log source's batches (triggers/delta_log.py): a batch's commits packed into a few read tasks, every
commit read once and in order, whatever the tables' backlogs (hypothesis against the ranges themselves)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake
from hypothesis import given
from hypothesis import strategies as st

from triggers.delta_log import CommitRange, CommitRanges, DeltaLogStreamReader, commit_partitions


@given(
    backlogs=st.lists(st.integers(min_value=1, max_value=200), max_size=60),
    per_partition=st.integers(min_value=1, max_value=100),
)
def test_commit_ranges_are_packed_in_order_without_splitting_one(backlogs: list[int], per_partition: int) -> None:
    ranges = [CommitRange(f"t{index}", 5, 4 + backlog, ()) for index, backlog in enumerate(backlogs)]
    partitions = commit_partitions(ranges, per_partition)
    assert [part for partition in partitions for part in partition.ranges] == ranges  # each once, in order
    sizes = [[r.last - r.first + 1 for r in partition.ranges] for partition in partitions]
    assert all(sum(size[:-1]) < per_partition for size in sizes)  # a partition closes once it is full
    assert all(sum(size) >= per_partition for size in sizes[:-1])  # and not before
    assert len(partitions) <= max(1, -(-sum(backlogs) // per_partition))


def test_a_batch_over_many_tables_is_a_few_tasks_that_read_every_commit(tmp_path: Path) -> None:
    tables = [str(tmp_path / f"t{index}") for index in range(70)]
    for index, uri in enumerate(tables):
        for value in range(1 + index % 3):
            write_deltalake(uri, pa.table({"k": pa.array([value], pa.int64())}), mode="append")
    reader = DeltaLogStreamReader({"tables": json.dumps(tables)})
    start = {"tables": dict.fromkeys(tables, -1)}
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    partitions = reader.partitions(start, end)
    assert len(partitions) == 3 and all(isinstance(p, CommitRanges) for p in partitions)  # 139 commits, 64 a task
    rows = [row for partition in partitions for row in reader.read(partition)]
    backlogs = {uri: 1 + index % 3 for index, uri in enumerate(tables)}
    assert [(row[0], row[1]) for row in rows] == [
        (uri, version) for uri in sorted(tables) for version in range(backlogs[uri])
    ]
