"""The job with discovery (docs/discovery.md): tables found under storage roots taken up with what they inherit,
new ones picked up within the interval, gone ones let go without errors, a bad root one line while the others go on."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from recluster.settings import Settings
from recluster.settings_discovery import DiscoverySettings, StorageRoot
from tests.helpers import append_random, job_settings, row_multiset, running_job, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def random_rows(rng: np.random.Generator, batch: int) -> pa.Table:
    keys = rng.integers(0, 10**9, 2_000)
    return pa.table({"k": pa.array(keys, pa.int64()), "batch": pa.array([batch] * len(keys), pa.int64())})


def discovering(tmp_path: Path, *roots: StorageRoot) -> Settings:
    settings = job_settings(tmp_path / "checkpoint", [])
    return settings.model_copy(update={"discovery": DiscoverySettings(interval_seconds=1.0, roots=list(roots))})


def settings_of(handler: Any, uri: Path) -> dict[str, tuple[str, str]]:
    return {s.key: (s.value, s.origin) for s in handler.status[str(uri)].settings}


def test_tables_under_a_root_are_found_inherit_its_key_and_come_and_go(tmp_path: Path, spark: Any) -> None:
    lake = tmp_path / "lake"
    own_key, inherited_key = lake / "own", lake / "sales" / "inherited"
    rng = np.random.default_rng(44)
    appended = {own_key: [append_random(own_key, rng, 0)], inherited_key: [random_rows(rng, 0)]}
    write_deltalake(str(inherited_key), appended[inherited_key][0])  # no recluster.clusterBy of its own
    root = StorageRoot(uri=str(lake), properties={"recluster.clusterBy": "k", "recluster.policy": "levels"})
    with running_job(spark, discovering(tmp_path, root, StorageRoot(uri=str(tmp_path / "missing")))) as (
        query,
        handler,
    ):
        wait_for(lambda: {str(own_key), str(inherited_key)} <= set(handler.status), "both tables taken up")
        assert settings_of(handler, inherited_key) == {
            "recluster.clusterBy": ("k", f"root {lake}"),
            "recluster.policy": ("levels", f"root {lake}"),
        }
        assert settings_of(handler, own_key)["recluster.clusterBy"] == ("k", "table")
        missing = str(tmp_path / "missing")
        assert handler.discovery.errors == {missing: f"storage root {missing} does not exist"}
        for batch in range(1, 8):
            for path in appended:
                data = random_rows(rng, batch)
                write_deltalake(str(path), data, mode="append")
                appended[path].append(data)
            query.processAllAvailable()
        wait_for(lambda: handler.status[str(inherited_key)].tasks > 0, "merges on the table with the inherited key")
        assert handler.status[str(inherited_key)].policy == "levels"

        later = lake / "later"
        append_random(later, rng, 0)
        wait_for(lambda: str(later) in handler.status, "a table created later taken up within the interval")
        shutil.rmtree(own_key)
        wait_for(lambda: str(own_key) not in handler.status, "a dropped table let go")
        assert all(status.error is None for status in handler.status.values())
    for path, batches in appended.items():
        if path.exists():
            assert row_multiset(DeltaTable(str(path)).to_pyarrow_table()) == row_multiset(pa.concat_tables(batches))
