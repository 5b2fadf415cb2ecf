"""Small tables (docs/concepts.md#small-tables): a partition whose files fit in one target file has no key ranges
worth separating (any query reads its one file), so it is not reclustered at every append. Its files wait until
`small_table_files` of them gather, then one task compacts them into one sorted file: Delta's auto compaction
waits for 50 small files the same way. FINAL rounds are not affected. Pure.
"""

from __future__ import annotations

from recluster.core.block_table import BlockTable
from recluster.core.blocks import Partition
from recluster.core.ranks import IntArray
from recluster.core.selection.plan import MergeTask, Reason, SelectionBounds, bounded, output_level


def fits_one_file(files: BlockTable, members: IntArray, bounds: SelectionBounds) -> bool:
    """Whether these files' rows and bytes fit in one target file (never when the rule is off or a bound unset)."""
    if bounds.small_table_files < 1 or bounds.target_rows is None or bounds.target_bytes is None:
        return False
    return files.total_rows(members) <= bounds.target_rows and files.total_bytes(members) <= bounds.target_bytes


def small_table_task(
    partition: Partition, files: BlockTable, members: IntArray, bounds: SelectionBounds
) -> MergeTask | None:
    """The compaction of a small partition's files once `small_table_files` of them (two at least) gathered,
    within the task bounds; None while fewer wait."""
    if len(members) < max(bounds.small_table_files, 2):
        return None
    chosen = bounded(files.take(members), bounds)
    if len(chosen) < 2:
        return None
    level = max(b.level for b in chosen)
    return MergeTask(partition, level, output_level(level), tuple(chosen), Reason.SMALL_TABLE_COMPACTION, 0)
