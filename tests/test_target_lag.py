"""Time-to-clustered targets (issue 45 item 3): the lag tracker against a brute-force oracle, the setting and its
errors, the scheduler's deadline order, and the job serving the tighter target first when its group can run only one
table at a time (no Spark: the handler is driven directly, merges run in the process)."""

from __future__ import annotations

import json
import math
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from recluster.core.optimizing import optimizing_config
from recluster.core.scheduling import Candidate, ProcessType, schedule
from recluster.core.selection.plan import Policy
from recluster.core.target_lag import LAG_WINDOW, LagTracker, lag_deadline, nearest_rank, replayed_lag
from recluster.delta.log import read_commits
from recluster.delta.log_writer import set_table_properties
from recluster.settings import Settings, SettingsError
from recluster.settings_job import HttpSettings
from recluster.settings_optimizing import OptimizerGroup, SelfOptimizingSettings
from tests.helpers import FAST, Rows, append_random, job_settings

# an operation: ("commit", version step, time step) or ("clustered", version back-off, now step)
OPERATIONS = st.lists(
    st.tuples(st.sampled_from(["commit", "clustered"]), st.integers(0, 3), st.floats(0, 100, allow_nan=False)),
    max_size=60,
)


@FAST
@given(OPERATIONS, st.integers(1, 8))
def test_the_tracker_equals_a_brute_force_oracle(operations: list[tuple[str, int, float]], window: int) -> None:
    tracker = LagTracker(window=window)
    commits: list[tuple[int, float]] = []  # every commit ever seen
    done: dict[int, float] = {}  # version -> its lag
    order: list[int] = []  # versions in the order their lags were recorded
    version, clock = 0, 0.0
    for kind, step, seconds in operations:
        clock += seconds
        if kind == "commit":
            version += step
            tracker.committed(version, clock)
            if not commits or version > commits[-1][0]:
                commits.append((version, clock))
        else:
            upto = version - step
            tracker.clustered(upto, clock)
            for seen, at in commits:
                if seen <= upto and seen not in done:
                    done[seen] = clock - at
                    order.append(seen)
    now = clock + 1.0
    pending = [now - at for seen, at in commits if seen not in done]
    kept = [done[v] for v in order][-window:] if order else []
    summary = tracker.summary(now, 10.0)
    values = sorted(kept + pending)
    expected_p95 = values[math.ceil(0.95 * len(values)) - 1] if values else None
    assert summary.p95_seconds == expected_p95
    assert summary.p50_seconds == (values[math.ceil(0.5 * len(values)) - 1] if values else None)
    assert summary.pending == len(pending) and summary.clustered == len(kept)
    assert summary.oldest_pending_seconds == (max(pending) if pending else None)
    assert summary.met == (None if expected_p95 is None else expected_p95 <= 10.0)
    oldest = min((at for seen, at in commits if seen not in done), default=None)
    assert lag_deadline(tracker, 10.0) == (None if oldest is None else oldest + 10.0)
    assert lag_deadline(tracker, None) is None


@FAST
@given(
    st.lists(st.tuples(st.booleans(), st.floats(0, 100, allow_nan=False)), max_size=40),
    st.booleans(),
    st.floats(0, 100, allow_nan=False),
)
def test_the_lag_replayed_from_the_log_equals_a_brute_force_oracle(
    log: list[tuple[bool, float]], within_target: bool, after: float
) -> None:
    """`recluster status`'s lag from a table's data commits (recluster's rewrites among them): each foreign commit's
    lag is the time to the first rewrite after it; with none, its age now, or 0 when the table is within target."""
    commits, clock = [], 0.0
    for version, (rewrite, step) in enumerate(log):
        clock += step
        commits.append((version, clock, rewrite))
    now = clock + after
    lags = []
    for version, at, rewrite in commits:
        if rewrite:
            continue
        later = [t for v, t, r in commits if r and v > version]
        lags.append(later[0] - at if later else 0.0 if within_target else now - at)
    summary = replayed_lag(commits, within_target, now, 30.0)
    assert len(lags) <= LAG_WINDOW
    values = sorted(lags)
    assert summary.p50_seconds == (values[math.ceil(0.5 * len(values)) - 1] if values else None)
    assert summary.p95_seconds == (values[math.ceil(0.95 * len(values)) - 1] if values else None)
    waiting = [
        now - at
        for v, at, r in commits
        if not r and not within_target and not any(r2 and v2 > v for v2, _, r2 in commits)
    ]
    assert summary.pending == len(waiting) and summary.oldest_pending_seconds == (max(waiting) if waiting else None)
    assert summary.target_seconds == 30.0


def test_nearest_rank_percentiles() -> None:
    assert nearest_rank([], 0.95) is None
    assert nearest_rank([3.0, 1.0, 2.0], 0.5) == 2.0
    assert nearest_rank(range(1, 101), 0.95) == 95
    assert nearest_rank([7.0], 0.95) == 7.0


def test_the_target_comes_from_config_or_the_table_property() -> None:
    defaults = SelfOptimizingSettings()
    assert optimizing_config({}, defaults).target_lag_seconds is None
    configured = SelfOptimizingSettings(target_lag_seconds=90)
    assert optimizing_config({}, configured).target_lag_seconds == 90.0
    prop = "self-optimizing.target-lag-seconds"
    assert optimizing_config({prop: "30.5"}, configured).target_lag_seconds == 30.5
    assert optimizing_config({prop: "none"}, configured).target_lag_seconds is None
    for bad, reason in [("soon", "expected float"), ("0", "greater than 0"), ("-5", "greater than 0")]:
        with pytest.raises(SettingsError, match=f"{prop}='{bad}': .*{reason}"):
            optimizing_config({prop: bad}, defaults)
    with pytest.raises(SettingsError, match="finite"):
        optimizing_config({prop: "inf"}, defaults)
    with pytest.raises(ValueError, match="target_lag_seconds"):
        Settings.model_validate({"self_optimizing": {"target_lag_seconds": -1}})


def test_tables_with_a_lag_deadline_run_first_earliest_first() -> None:
    groups = {"g": OptimizerGroup(max_concurrent_tasks=2)}

    def candidate(table: str, busy: float, deadline: float | None) -> Candidate:
        return Candidate(table, "g", 0.5, ProcessType.RECLUSTER, busy, None, deadline)

    # the quota policy alone would run idle, then light
    tables = [candidate("idle", 0, None), candidate("light", 10, 500.0), candidate("busy", 100, 200.0)]
    run, waiting = schedule(tables, groups, window_seconds=3600)
    assert [c.table for c in run] == ["busy", "light"] and waiting == []
    # over its quota a table waits, deadline or not
    run, waiting = schedule([candidate("over", 1800, 1.0), candidate("idle", 0, None)], groups, window_seconds=3600)
    assert [c.table for c in run] == ["idle"] and [c.table for c in waiting] == ["over"]


def test_the_tighter_target_is_served_first_and_meets_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two tables appended to at the same rate, one group that runs one table per pass: the table with the tighter
    target_lag is reclustered in every pass and meets its target at p95; the other waits and shows the larger lag.
    The outcome does not depend on this machine's speed: the order is decided by the deadlines, and the looser
    table's oldest commit waits through every pass."""
    from jobs.health import HealthServer, JobProbe
    from jobs.pages import job_views, render_table
    from recluster.engine.handler import ReclusterHandler
    from tests.helpers import main_json

    tight, loose = tmp_path / "tight", tmp_path / "loose"
    checkpoint = f"stream.checkpoint_location={tmp_path / 'checkpoint'}"
    rng = np.random.default_rng(45)
    for table, target in ((tight, "600"), (loose, "3600")):
        for batch in range(2):
            append_random(table, rng, batch)
        set_table_properties(table, {"self-optimizing.target-lag-seconds": target})
    settings = job_settings(tmp_path / "checkpoint", [tight, loose], Policy.LEVELS)
    one_at_a_time = {"default": OptimizerGroup(max_concurrent_tasks=1)}
    settings = settings.model_copy(
        update={"self_optimizing": settings.self_optimizing.model_copy(update={"groups": one_at_a_time})}
    )
    handler = ReclusterHandler(settings, settings.tables, spark=None)
    for table in (tight, loose):
        handler.tracked[str(table)] = handler.tables.track(str(table), None)
    served = {str(tight): 0, str(loose): 0}
    passes = 6
    for batch in range(2, 2 + passes):
        commits = []
        for table in (tight, loose):
            for _ in range(2):  # two overlapping appends: past the depth threshold, work for the table every pass
                append_random(table, rng, batch)
            known = handler.tracked[str(table)].version
            commits.extend(read_commits(str(table), known + 1, _newest(table), {}))
        before = {uri: t.totals.tasks for uri, t in handler.tracked.items()}
        handler(Rows(commits), batch)
        for uri, t in handler.tracked.items():
            served[uri] += t.totals.tasks > before[uri]
    assert served == {str(tight): passes, str(loose): 0}  # its deadline came first in every pass

    probe = JobProbe(HttpSettings(port=0, host="127.0.0.1"))
    server = HealthServer(HttpSettings(port=0, host="127.0.0.1"), probe).start()
    try:
        server.attach(SimpleNamespace(isActive=True, lastProgress=None, exception=lambda: None), handler)
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/status", timeout=30) as reply:
            body = reply.read()
        assert body.count(b"\n") == 1 and b'":' in body and b'": ' not in body  # compact: Python's C encoder
        shown = {t["table"]: t["lag"] for t in json.loads(body)["tables"]}
    finally:
        server.stop()
    first, second = shown[str(tight)], shown[str(loose)]
    print("tight", first, "loose", second)
    assert first["target_seconds"] == 600.0 and second["target_seconds"] == 3600.0
    assert first["met"] is True and first["p95_seconds"] <= 600.0 and first["clustered"] >= passes
    assert second["p95_seconds"] > first["p95_seconds"]  # the looser table is the one that lags
    assert second["oldest_pending_seconds"] > first["p95_seconds"]
    (page,) = job_views(handler, str(tight))  # the table page shows the same figures
    assert page.lag == first and '<span class="state met">met</span>' in render_table(page)
    replayed = {  # recluster status, from the tables' logs: the tight one clustered, the loose one's commits waiting
        e["table"]: e["lag"] for e in main_json(capsys, "status", tight, loose, "--json", "--set", checkpoint)
    }
    assert replayed[str(tight)]["met"] is True and replayed[str(tight)]["target_seconds"] == 600.0
    before_job = 2  # the appends made before the job took the tables up: in the log, not in the job's memory
    assert replayed[str(loose)]["pending"] == second["pending"] + before_job and replayed[str(loose)]["clustered"] == 0


def _newest(table: Path) -> int:
    from deltalake import DeltaTable

    return DeltaTable(str(table)).version()


def test_recluster_status_shows_the_lag_replayed_from_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three overlapping appends, a FINAL by recluster, one more append: `recluster status` shows each foreign data
    commit's lag as the log has it (the rewrite's time minus the commit's; the last one pending or, within target,
    0) with the target, in `--json` and in its table (docs/operations.md#time-to-clustered-target)."""
    from tests.helpers import main_json, run_main, run_rounds

    table = tmp_path / "table"
    rng = np.random.default_rng(45)
    for batch in range(3):
        append_random(table, rng, batch)
    run_rounds(table, None, job_settings(tmp_path / "unused", [table]), final=True)
    append_random(table, rng, 3)
    commits = [c for c in read_commits(str(table), 0, 5, {}) if c.adds]  # version 1 sets the key's property
    assert [c.producer == "recluster" for c in commits] == [False, False, False, True, False]
    rewrite_at = commits[3].timestamp / 1000  # type: ignore[operator]
    args = ["--set", f"stream.checkpoint_location={tmp_path / 'checkpoint'}", "--cluster-by", "k"]
    args += ["--set", "self_optimizing.target_lag_seconds=600"]
    (entry,) = main_json(capsys, "status", table, "--json", *args)
    lag = entry["lag"]
    clustered = sorted(rewrite_at - c.timestamp / 1000 for c in commits[:3])  # type: ignore[operator]
    last = commits[4].timestamp / 1000  # type: ignore[operator]
    if entry["recluster_pending"]:  # the last append overlaps: it waits, its age grows
        assert lag["pending"] == 1 and lag["clustered"] == 3 and lag["oldest_pending_seconds"] >= 0
        assert lag["p50_seconds"] == pytest.approx(clustered[1]) and lag["p95_seconds"] >= clustered[2]
    else:  # within target as appended
        assert lag["pending"] == 0 and lag["clustered"] == 4
        assert lag["p50_seconds"] == pytest.approx(sorted([0.0, *clustered])[1])
        assert lag["p95_seconds"] == pytest.approx(clustered[2])
    assert lag["target_seconds"] == 600 and lag["met"] is True and last >= rewrite_at
    monkeypatch.setenv("COLUMNS", "400")  # the table's every column whole
    code, out, _ = run_main(capsys, "status", table, *args)
    assert code == 0 and f"/{lag['p95_seconds']:.0f}s (600s met)" in out
