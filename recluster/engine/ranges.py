"""Range bounds of curve keys before a merge writes: sampled once, stored with the table, resampled on drift."""

from __future__ import annotations

import logging

from recluster.core.keys import bounds_drifted
from recluster.delta.log_writer import set_table_properties
from recluster.delta.ranges import sample_range_bounds, store_range_bounds
from recluster.delta.snapshot import TableSnapshot
from recluster.settings import RANGES_PROPERTY

log = logging.getLogger(__name__)


def prepare_range_bounds(snapshot: TableSnapshot) -> bool:
    """For a curve key without bounds, or whose data drifted past them (`keys.bounds_drifted`): sample bounds
    from the live files, store them with the table and name them in `recluster.curveRanges` (one metadata
    commit). True when it committed: reload the snapshot (every file is then unclustered on the new curve)."""
    key = snapshot.key
    if not key.on_curve or not snapshot.blocks or not bounds_drifted(list(snapshot.blocks), key):
        return False
    bounds = sample_range_bounds(snapshot.uri, snapshot.storage_options, snapshot.blocks, key)
    if key.bounds is not None and bounds.id == key.bounds.id:
        return False
    store_range_bounds(snapshot.uri, snapshot.storage_options, bounds)
    version = set_table_properties(snapshot.uri, {RANGES_PROPERTY: bounds.id}, snapshot.storage_options)
    reason = "drifted" if key.bounds is not None else "none"
    log.info("recluster table=%s reason=range_bounds_%s bounds=%s version=%d", snapshot.uri, reason, bounds, version)
    return True
