"""Which maintenance steps may run on a table, from its Delta features (docs/guarantees.md#maintenance).

Each step (vacuum, checkpoint, log cleanup) runs only on tables whose features it was checked with against Delta
Spark (tests/test_maintenance_delta_spark.py); on any other table it is refused with one line naming the reason and
the features, and the other steps still run. A refusal is never a failure: the table is left as it was.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class MaintenanceStep(StrEnum):
    VACUUM = "vacuum"
    CHECKPOINT = "checkpoint"
    LOG_CLEANUP = "log_cleanup"


class RefusalReason(StrEnum):
    """Why a maintenance step was not run on a table."""

    UNCHECKED_FEATURE = "unchecked_feature"
    """The table has a feature this step was never checked with against Delta Spark: the step might drop what
    the feature keeps in the log, or delete files it references (the Delta protocol's vacuumProtocolCheck asks
    exactly this of a vacuum)."""
    CHECKPOINT_PROTECTION = "checkpoint_protection"
    """Writer feature checkpointProtection (Delta Spark's DROP FEATURE): no commit or checkpoint before
    `delta.requireCheckpointProtectionBeforeVersion` may be cleaned up unless all of them go at once, and delta-rs's
    log cleanup ignores the property (it deletes up to the newest checkpoint inside the retention, wherever it is)."""


CHECKED_FEATURES = frozenset(
    {
        # reader and writer features of the seven Delta Spark interop tables (tests/delta_spark_tables.py)
        "deletionVectors",
        "v2Checkpoint",
        "columnMapping",
        "typeWidening",
        "inCommitTimestamp",
        "changeDataFeed",
        "appendOnly",
        "invariants",
        "checkConstraints",
        "generatedColumns",
        "identityColumns",
        "domainMetadata",
        "rowTracking",
        "clustering",
        # and the rest recluster rewrites (recluster/delta/snapshot.py), on one more table
        "timestampNtz",
        "vacuumProtocolCheck",
        "allowColumnDefaults",
    }
)
"""Features every step was checked with. A legacy protocol (no feature lists: writer version 6 or less, reader 2 or
less) implies only features among these."""

STEP_FEATURES = {
    MaintenanceStep.VACUUM: CHECKED_FEATURES | {"checkpointProtection"},
    MaintenanceStep.CHECKPOINT: CHECKED_FEATURES | {"checkpointProtection"},
    MaintenanceStep.LOG_CLEANUP: CHECKED_FEATURES,
}
"""Per step, the features it was checked with (a table that dropped deletion vectors with Delta Spark carries
checkpointProtection: vacuum and checkpoints were checked on it)."""

KNOWN_WRONG = {MaintenanceStep.LOG_CLEANUP: {"checkpointProtection": RefusalReason.CHECKPOINT_PROTECTION}}
"""Per step, features it is known to handle wrongly, with the reason it is refused for."""


@dataclass(frozen=True, slots=True)
class StepRefusal:
    step: MaintenanceStep
    reason: RefusalReason
    features: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.step} refused: {self.reason} ({', '.join(self.features)})"

    def to_dict(self) -> dict[str, object]:
        return {"step": str(self.step), "reason": str(self.reason), "features": list(self.features)}


def step_refusals(features: Iterable[str]) -> tuple[StepRefusal, ...]:
    """The steps a table with these reader and writer features must not get, each with its reason."""
    present = frozenset(features)
    refusals = []
    for step in MaintenanceStep:
        wrong = KNOWN_WRONG.get(step, {})
        known = sorted(present & wrong.keys())
        unchecked = sorted(present - STEP_FEATURES[step] - wrong.keys())
        if known:
            refusals.append(StepRefusal(step, wrong[known[0]], tuple(known)))
        elif unchecked:
            refusals.append(StepRefusal(step, RefusalReason.UNCHECKED_FEATURE, tuple(unchecked)))
    return tuple(refusals)
