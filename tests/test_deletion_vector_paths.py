"""A deletion vector is matched to its file whatever form the paths take, or the table fails: never dropped.

Delta Spark logs a partition directory such as `p=a b` percent-encoded (`p=a%20b/...`), delta-rs's file list may
give it in another form; a vector matched by the exact string alone would be lost for such files, bringing its
deleted rows back in a rewrite (the row check before a commit counts from the same list, so it cannot see it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from recluster.core.deletion_vectors import DeletionVector, match_deletion_vectors
from recluster.core.errors import TableError
from recluster.delta.replay import replay_log
from tests.helpers import run_main
from tests.referee import Referee
from tests.table_shapes import rows_digest

PARTITIONS = ("a b", "x%y", "ü=1", "c/d", "plain")


def _vector(cardinality: int) -> DeletionVector:
    return DeletionVector.from_log(
        {
            "storageType": "i",
            "pathOrInlineDv": "wi5b=000010000siXQKl0rr91",
            "sizeInBytes": 10,
            "cardinality": cardinality,
        }
    )


def test_vectors_match_their_files_exactly_or_once_decoded() -> None:
    paths = ["p=a%2520b/f1.parquet", "p=x%25y/f2.parquet", "f3.parquet"]
    vectors = {"p=a%20b/f1.parquet": _vector(1), "p=x%25y/f2.parquet": _vector(2), "f3.parquet": _vector(3)}
    matched = match_deletion_vectors(paths, vectors)
    assert {at: v.cardinality for at, v in matched.items()} == {0: 1, 1: 2, 2: 3}


def test_a_vector_that_matches_no_file_or_two_is_an_error_never_dropped() -> None:
    with pytest.raises(TableError, match="matches no single live file"):
        match_deletion_vectors(["f1.parquet"], {"gone.parquet": _vector(1)})
    with pytest.raises(TableError, match="matches no single live file"):  # two files decode alike: ambiguous
        match_deletion_vectors(["d%20/f.parquet", "d%2520/f.parquet"], {"d%25%32%30/f.parquet": _vector(1)})


@given(st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=8, unique=True), st.data())
def test_every_vector_of_a_listed_file_is_matched_to_that_file(names: list[str], data: Any) -> None:
    from urllib.parse import quote

    paths = [f"p={quote(n, safe='')}/part-{i}.parquet" for i, n in enumerate(names)]
    chosen = data.draw(st.sets(st.integers(0, len(paths) - 1)))
    encode = data.draw(st.booleans())
    vectors = {(quote(paths[i], safe="/=") if encode else paths[i]): _vector(i + 1) for i in chosen}
    matched = match_deletion_vectors(paths, vectors)
    assert {at: v.cardinality for at, v in matched.items()} == {i: i + 1 for i in chosen}


@pytest.mark.spark
def test_a_final_keeps_the_deletions_of_percent_encoded_partition_files(
    referee: Referee, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    location = tmp_path / "t"
    target = f"delta.`{location}`"
    referee.sql(
        f"CREATE TABLE {target} (a BIGINT, b BIGINT, p STRING) USING delta PARTITIONED BY (p) "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    values = ", ".join(f"'{v}'" for v in PARTITIONS)
    for batch in range(3):
        referee.sql(
            f"INSERT INTO {target} SELECT id * 7919 % 100000, id, element_at(array({values}), "
            f"CAST(id % {len(PARTITIONS)} AS INT) + 1) FROM range({batch * 1000}, {(batch + 1) * 1000}, 1, 2)"
        )
    referee.sql(f"DELETE FROM {target} WHERE a % 7 = 0")
    vectors = replay_log(str(location), None, referee_version(referee, target)).deletion_vectors
    encoded = [path for path in vectors if "%" in path]
    assert encoded, f"no deletion vector on a percent-encoded partition path: {sorted(vectors)}"
    expected = rows_digest(referee.read(location))

    code, out, err = run_main(
        capsys, "run", location, "--final", "--cluster-by", "a", "--set", "clustering.target_rows=300"
    )
    assert code == 0, err
    assert "files_removed=0" not in out
    after = referee.read(location)
    assert rows_digest(after) == expected
    assert referee.sql(f"SELECT count(*) AS n FROM {target} WHERE a % 7 = 0")[0]["n"] == 0
    assert pa.compute.sum(after.column("a")).as_py() == referee.sql(f"SELECT sum(a) AS s FROM {target}")[0]["s"]


def referee_version(referee: Referee, target: str) -> int:
    return int(referee.sql(f"DESCRIBE HISTORY {target} LIMIT 1")[0]["version"])
