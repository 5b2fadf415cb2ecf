"""Which blocks to merge (DESIGN §5). Pure: blocks and bounds in, an immutable plan out, no I/O.

One entry point for every policy: `plan` holds the values, `levels` and `absorb` one module each. Adding a policy:
a module here, a `Policy` member, a branch in `select_merge_tasks`.
"""

from __future__ import annotations

from collections.abc import Sequence

from recluster.core.blocks import LEVEL_CONSTANT, Block, Partition
from recluster.core.selection.absorb import absorb_tasks, decide_absorb, effective_beta, recover_runs
from recluster.core.selection.levels import levels_tasks
from recluster.core.selection.plan import (
    MergeTask,
    Policy,
    Reason,
    ReclusterPlan,
    SelectionBounds,
    Skipped,
    WatermarkDecision,
    chunk_blocks,
    output_level,
    partitions_of,
)


def select_merge_tasks(
    table: str, read_version: int, blocks: Sequence[Block], bounds: SelectionBounds, *, final: bool = False
) -> ReclusterPlan:
    """Plan one round over a snapshot's blocks with `bounds.policy` (see the module docstring)."""
    tasks: list[MergeTask] = []
    skipped: list[Skipped] = []
    live, older = _live_blocks(blocks, bounds, final)
    if older:
        skipped.append(Skipped(Reason.OLDER_KEY, older, "not sorted by the current key; run FINAL"))
    absorb = bounds.policy is Policy.ABSORB and not final
    oversized = 0
    betas: list[float] = []
    watermarks: list[tuple[Partition, WatermarkDecision]] = []
    for partition, members in sorted(partitions_of(live).items(), key=lambda item: str(item[0])):
        unclustered = [b for b in members if not b.clustered]
        oversized += sum(b.bytes > bounds.max_task_bytes for b in unclustered)
        for group in chunk_blocks(unclustered, bounds):
            level = max(b.level for b in group)
            tasks.append(MergeTask(partition, level, output_level(level), tuple(group), Reason.UNCLUSTERED, 0))
        clustered = [b for b in members if b.clustered]
        budget = bounds.max_tasks - len(tasks)
        if len(clustered) < 2 or budget < 1:
            continue
        if absorb:
            beta = effective_beta(clustered, bounds)
            betas.append(beta)
            found, decision = absorb_tasks(partition, clustered, bounds, beta, budget)
            over = 0
            if decision is not None:
                watermarks.append((partition, decision))
        else:
            found, over = levels_tasks(partition, clustered, bounds, final, budget)
        tasks.extend(found)
        oversized += over
    if oversized:
        skipped.append(Skipped(Reason.OVER_SIZE_BOUND, oversized, "deep ranges whose files exceed the task bounds"))
    if absorb and not tasks and betas:
        skipped.append(Skipped(Reason.ABSORB_BELOW_RATIO, 0, "no run reaches the absorb ratio"))
    return ReclusterPlan(
        table,
        read_version,
        final,
        tuple(tasks[: bounds.max_tasks]),
        tuple(skipped),
        policy=Policy.ABSORB if absorb else Policy.LEVELS,
        beta=min(betas) if betas else (bounds.beta if absorb else None),
        watermarks=tuple(watermarks),
    )


def _live_blocks(blocks: Sequence[Block], bounds: SelectionBounds, final: bool) -> tuple[list[Block], int]:
    """The blocks a round may merge, and how many it leaves because they are sorted by an older key (FINAL
    takes those too)."""
    live = [b for b in blocks if b.level != LEVEL_CONSTANT]
    if final:
        return live, 0
    current = [b for b in live if b.key_fingerprint in (None, bounds.key_fingerprint)]
    return current, len(live) - len(current)


def time_like_decisions(
    blocks: Sequence[Block], bounds: SelectionBounds
) -> tuple[tuple[Partition, WatermarkDecision], ...]:
    """The watermark decision of each time-like partition, as an `absorb` round takes it, without building the
    round's tasks (what `info` shows: on a big table slicing the absorb would cost more than deciding it). Only
    `absorb` makes them: none under `levels`."""
    if bounds.policy is not Policy.ABSORB:
        return ()
    live, _ = _live_blocks(blocks, bounds, final=False)
    decisions = []
    for partition, members in sorted(partitions_of(live).items(), key=lambda item: str(item[0])):
        clustered = [b for b in members if b.clustered]
        if len(clustered) >= 2:
            _, decision = decide_absorb(recover_runs(clustered), effective_beta(clustered, bounds), bounds.target_rows)
            if decision is not None:
                decisions.append((partition, decision))
    return tuple(decisions)
