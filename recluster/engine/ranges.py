"""Range bounds of curve keys before a merge writes: sampled once, stored with the table, resampled on drift;
never a metaData commit (docs/guarantees.md#no-metadata-commits-of-our-own)."""

from __future__ import annotations

import logging

from recluster.core.key_bounds import bounds_drifted
from recluster.delta.ranges import current_range_bounds, publish_range_bounds, sample_range_bounds
from recluster.delta.snapshot import TableSnapshot
from recluster.settings import RANGES_PROPERTY

log = logging.getLogger(__name__)


def prepare_range_bounds(snapshot: TableSnapshot) -> bool:
    """Make a curve key's range bounds current before its merges: True when the snapshot's are not (another
    process published newer ones, or this call did), so reload it (every file is unclustered on a new curve; the
    key fingerprint in file names says so). New bounds are sampled from the live files for a key without any, or
    whose data drifted past them (`key_bounds.bounds_drifted`), and published under `_recluster/`."""
    key = snapshot.key
    if not key.on_curve or not snapshot.blocks:
        return False
    options = snapshot.storage_options
    current = current_range_bounds(snapshot.uri, options, key.names, snapshot.properties.get(RANGES_PROPERTY))
    if current.bounds != key.bounds:
        log.info("recluster table=%s reason=range_bounds_newer bounds=%s", snapshot.uri, current)
        return True
    if not bounds_drifted(list(snapshot.blocks), key):
        return False
    bounds = sample_range_bounds(snapshot.uri, options, snapshot.blocks, key)
    if key.bounds is not None and bounds.id == key.bounds.id:
        return False
    published = publish_range_bounds(snapshot.uri, options, bounds, current, snapshot.version)
    reason = "range_bounds_" + ("drifted" if key.bounds is not None else "none")
    if not published:
        reason = "range_bounds_published_by_another"
    log.info("recluster table=%s reason=%s bounds=%s sequence=%d", snapshot.uri, reason, bounds, current.sequence + 1)
    return True
