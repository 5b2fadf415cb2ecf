"""What one listing of `_delta_log/` says (recluster/delta/log_listing.py): its commits by the protocol's file names,
its newest complete checkpoint, and whether a log cleanup could delete anything; on a local table and the same
names as a property against a brute-force oracle."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from hypothesis import given
from hypothesis import strategies as st

from recluster.delta.log_listing import LogListing, list_log

UUID = "3a0d65cd-4056-49b8-937b-95f9e3ee90e5"


def test_commits_checkpoints_and_what_a_cleanup_could_delete() -> None:
    listing = LogListing(
        (
            "00000000000000000003.json",
            "00000000000000000004.json",
            "00000000000000000004.checkpoint.parquet",
            f"00000000000000000005.checkpoint.{UUID}.json",  # a v2 checkpoint: no commit
            "00000000000000000006.json",
            "00000000000000000006.checkpoint.0000000001.0000000002.parquet",  # one part of two: incomplete
            "00000000000000000006.crc",
            "_last_checkpoint",
            ".00000000000000000007.json.tmp",
        )
    )
    assert listing.commits == [3, 4, 6]
    assert (
        listing.newest_checkpoint() == 5 and listing.newest_checkpoint(4) == 4 and listing.newest_checkpoint(3) is None
    )
    assert listing.any_before(4) and not listing.any_before(3)
    assert LogListing(()).commits == [] and LogListing(()).newest_checkpoint() is None


@given(
    st.lists(
        st.tuples(st.integers(0, 30), st.sampled_from(["json", "checkpoint.parquet", "crc"])), max_size=20, unique=True
    )
)
def test_listing_against_a_brute_force_reading_of_the_names(files: list[tuple[int, str]]) -> None:
    names = tuple(f"{version:020d}.{kind}" for version, kind in files)
    listing = LogListing(names)
    assert listing.commits == sorted(v for v, kind in files if kind == "json")
    checkpoints = [v for v, kind in files if kind == "checkpoint.parquet"]
    assert listing.newest_checkpoint() == (max(checkpoints) if checkpoints else None)
    for version in range(32):
        assert listing.any_before(version) == any(v < version for v, _ in files)


def test_a_local_tables_log_listed(tmp_path: Path) -> None:
    for value in range(3):
        write_deltalake(tmp_path / "t", pa.table({"k": [value]}), mode="append")
    DeltaTable(str(tmp_path / "t")).create_checkpoint()
    listing = list_log(str(tmp_path / "t"), None)
    assert listing.commits == [0, 1, 2] and listing.newest_checkpoint() == 2 and listing.any_before(2)
    assert list_log(str(tmp_path / "nothing"), None) == LogListing(())
