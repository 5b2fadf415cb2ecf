"""Small tables (docs/concepts.md#small-tables) on a real table through `recluster run`: a table whose files fit in
one target file is compacted once `small_tables.compact_files` of them gather, never reclustered before (the
selection itself against a brute-force oracle: tests/test_selection.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from recluster.core.selection.plan import Reason
from recluster.settings import ClusteringSettings, Settings, SmallTableSettings
from tests.helpers import row_multiset, run_rounds


def test_small_table_is_compacted_at_the_threshold_not_before(tmp_path: Path) -> None:
    """Appends of 200 rows: no merge while fewer than 4 files, then one compaction into one file with every row;
    the same table with the rule off is merged at its second append (what the fleet trial saw)."""
    rng = np.random.default_rng(7)
    batches = [pa.table({"k": pa.array(rng.integers(0, 10**9, 200), pa.int64())}) for _ in range(4)]
    settings = Settings(
        clustering=ClusteringSettings(target_rows=10_000), small_tables=SmallTableSettings(compact_files=4)
    )
    rule_off = settings.model_copy(update={"small_tables": SmallTableSettings(compact_files=0)})
    small, other = tmp_path / "small", tmp_path / "other"
    for uri in (small, other):
        write_deltalake(str(uri), batches[0])
        write_deltalake(str(uri), batches[1], mode="append")
    assert run_rounds(other, None, rule_off, ["k"]).plans[0].tasks, "without the rule the second append merges"
    for count, batch in enumerate(batches[2:], start=3):
        result = run_rounds(small, None, settings, ["k"])
        assert not result.plans[0].tasks, f"{count - 1} files: nothing before the threshold"
        write_deltalake(str(small), batch, mode="append")
    result = run_rounds(small, None, settings, ["k"])
    assert [t.reason for t in result.plans[0].tasks] == [Reason.SMALL_TABLE_COMPACTION]
    table = DeltaTable(str(small))
    assert len(table.file_uris()) == 1
    assert row_multiset(table.to_pyarrow_table()) == row_multiset(pa.concat_tables(batches))
