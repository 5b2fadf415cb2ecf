"""Leases of jobs sharing tables (core/leases.py, delta/leases.py, engine/leases.py) on a local lease root: a fair
share per live job, one owner per table (claims created only if absent), a dead job's tables taken over, a released
table let go before anyone takes it, a malformed lease one line while the other tables go on."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recluster.core.leases import (
    FORGOTTEN_AFTER_TTLS,
    Claim,
    Heartbeat,
    Holdings,
    balanced_owners,
    first_expiry,
    table_key,
)
from recluster.engine.leases import JobLeases
from recluster.settings_discovery import LeaseSettings

TABLES = [f"s3://bucket/lake/t{index:03d}" for index in range(30)]


@given(st.sets(st.text(min_size=1, max_size=8), max_size=200), st.lists(st.text(min_size=1), min_size=1, max_size=7))
def test_every_table_gets_one_live_job_and_counts_differ_by_at_most_one(tables: set[str], jobs: list[str]) -> None:
    owners = balanced_owners(tables, jobs)
    assert set(owners) == tables and set(owners.values()) <= set(jobs)
    counts = [list(owners.values()).count(job) for job in set(jobs)]
    assert max(counts) - min(counts) <= 1
    assert owners == balanced_owners(sorted(tables, reverse=True), list(reversed(jobs)))  # the same on every job


def jobs(root: Path, count: int, ttl: float = 30.0) -> list[JobLeases]:
    settings = LeaseSettings(root=str(root), ttl_seconds=ttl, renew_seconds=ttl / 3)
    return [JobLeases(settings, {}, job=f"job-{index}") for index in range(count)]


def settle(leases: list[JobLeases], tables: list[str], let_go: list[tuple[str, str]]) -> dict[str, set[str]]:
    """Lease passes of every job, in turn, until nothing changes; what each job owns."""
    for _ in range(6):
        for lease in leases:
            lease.beat()
            lease.run_pass(tables, lambda table, job=lease.job: let_go.append((job, table)))
    return {lease.job: set(lease.held) for lease in leases}


def test_three_jobs_share_the_tables_and_a_dead_jobs_tables_are_taken_over(tmp_path: Path) -> None:
    let_go: list[tuple[str, str]] = []
    first, second, third = jobs(tmp_path, 3, ttl=3.0)
    owned = settle([first], TABLES, let_go)
    assert owned == {"job-0": set(TABLES)}  # alone: every table
    owned = settle([first, second, third], TABLES, let_go)
    assert sorted(len(tables) for tables in owned.values()) == [10, 10, 10]
    assert set().union(*owned.values()) == set(TABLES)
    assert sorted(let_go) == sorted(("job-0", t) for t in owned["job-1"] | owned["job-2"])  # released first
    assert len(set.intersection(*owned.values())) == 0
    died = time.time()  # job-2 dies: no heartbeat from it for its ttl; the others renew theirs
    while time.time() - died < 3.1:
        settle([first, second], TABLES, let_go)
        time.sleep(0.3)
    owned = settle([first, second], TABLES, let_go)
    assert sorted(len(owned[j]) for j in ("job-0", "job-1")) == [15, 15]
    assert owned["job-0"] | owned["job-1"] == set(TABLES)


def dead_and_survivor(root: Path) -> tuple[JobLeases, JobLeases, dict[str, Claim]]:
    """Two jobs sharing TABLES, then the second dead (its heartbeat expired): the survivor, the dead job, and the
    claims the dead job held."""
    survivor, dead = jobs(root, 2, ttl=1.0)
    owned = settle([survivor, dead], TABLES, [])
    assert sorted(map(len, owned.values())) == [15, 15]
    held = dict(dead.held)
    time.sleep(1.1)
    survivor.beat()
    return survivor, dead, held


def test_a_dead_jobs_tables_are_claimed_from_its_holdings_without_reading_their_claims(tmp_path: Path) -> None:
    survivor, _dead, held = dead_and_survivor(tmp_path)
    read: list[str] = []
    latest_claim = survivor.store.latest_claim
    survivor.store.latest_claim = lambda table: read.append(table) or latest_claim(table)  # type: ignore[method-assign]
    assert set(survivor.run_pass(TABLES, lambda table: None).taken) == set(held)
    assert read == []  # one conditional create a table, no listing or read of its claims
    assert {t: latest_claim(t) for t in held} == {t: Claim(t, c.sequence + 1, survivor.job) for t, c in held.items()}


def test_holdings_overtaken_by_a_later_claim_are_not_trusted(tmp_path: Path) -> None:
    """The dead job's holdings name a claim after which another live job already claimed the table: the survivor's
    create fails, it reads the newest claim, and leaves the table to that job."""
    survivor, _dead, held = dead_and_survivor(tmp_path)
    other = JobLeases(survivor.settings, {}, job="job-other")
    other.beat()
    targets = balanced_owners(TABLES, [survivor.job, other.job])
    table, claim = next((t, c) for t, c in sorted(held.items()) if targets[t] == survivor.job)
    assert other.store.create_claim(Claim(table, claim.sequence + 1, other.job))
    survivor.beat()
    taken = survivor.run_pass(TABLES, lambda table: None).taken
    assert table not in taken and survivor.store.latest_claim(table) == Claim(table, claim.sequence + 1, other.job)


def test_malformed_holdings_are_one_line_and_the_tables_are_claimed_the_long_way(tmp_path: Path) -> None:
    survivor, dead, held = dead_and_survivor(tmp_path)
    (tmp_path / "holdings" / f"{dead.job}.json").write_text('{"job": "job-1", "tables": []}')
    assert set(survivor.run_pass(TABLES, lambda table: None).taken) == set(held)
    assert survivor.dead == {dead.job: (dead.last_heartbeat, None)}


def test_a_job_stopping_hands_its_tables_back_at_once(tmp_path: Path) -> None:
    """A graceful stop hands the tables back: the other job's next lease pass claims them all (one create each, from
    the holdings), without waiting for the stopped job's heartbeat to expire; the stopped job claims nothing more."""
    staying, stopping = jobs(tmp_path, 2)  # ttl 30 s: an expiry would not come within this test
    settle([staying, stopping], TABLES, [])
    handed = dict(stopping.held)
    stopping.hand_back()
    read: list[str] = []
    latest_claim = staying.store.latest_claim
    staying.store.latest_claim = lambda table: read.append(table) or latest_claim(table)  # type: ignore[method-assign]
    staying.beat()
    assert set(staying.run_pass(TABLES, lambda table: None).taken) == set(handed) and read == []
    assert staying.held.keys() == set(TABLES)
    assert stopping.run_pass(TABLES, lambda table: None).owned == frozenset()


def test_a_long_dead_jobs_heartbeat_and_holdings_are_deleted(tmp_path: Path) -> None:
    """Every lease pass reads every heartbeat, and each start is a new job: a job dead for FORGOTTEN_AFTER_TTLS
    renewals' worth of ttl has its lease objects deleted; one dead more recently keeps them (its holdings serve the
    takeover)."""
    (live,) = jobs(tmp_path, 1, ttl=3.0)
    now = time.time()
    for job, age in (("gone", FORGOTTEN_AFTER_TTLS * 3.0 + 1), ("dead", 2 * 3.0)):
        live.store.write_heartbeat(Heartbeat(job, now - age, 1))
        live.store.write_holdings(Holdings(job, {"s3://bucket/elsewhere": 0}))
    live.beat()
    live.run_pass(TABLES, lambda table: None)
    assert sorted(live.store.heartbeats()[0]) == ["dead", live.job]
    assert sorted(path.name for path in (tmp_path / "holdings").iterdir()) == ["dead.json", f"{live.job}.json"]


def test_two_jobs_claiming_one_table_at_once_one_wins(tmp_path: Path) -> None:
    first, second = jobs(tmp_path, 2)
    assert first.store.create_claim(Claim(TABLES[0], 0, "job-0"))
    assert not second.store.create_claim(Claim(TABLES[0], 0, "job-1"))
    assert first.store.latest_claim(TABLES[0]) == Claim(TABLES[0], 0, "job-0")


def test_a_malformed_lease_is_one_line_and_the_other_tables_go_on(tmp_path: Path) -> None:
    (only,) = jobs(tmp_path, 1)
    folder = tmp_path / "tables" / table_key(TABLES[0])
    folder.mkdir(parents=True)
    (folder / f"{0:020d}.json").write_text("{not json")
    only.beat()
    result = only.run_pass(TABLES[:3], lambda table: None)
    assert result.owned == frozenset(TABLES[1:3])
    assert only.errors == {
        TABLES[0]: f"malformed lease {tmp_path}/tables/{table_key(TABLES[0])}/{0:020d}.json: not JSON"
    }


def test_a_job_whose_heartbeat_is_stale_claims_nothing(tmp_path: Path) -> None:
    (only,) = jobs(tmp_path, 1)
    assert only.run_pass(TABLES, lambda table: None).owned == frozenset()  # never beat
    only.beat()
    assert only.run_pass(TABLES, lambda table: None).owned == frozenset(TABLES)


def test_when_a_job_goes_most_tables_keep_their_owner() -> None:
    tables = [f"t{index}" for index in range(300)]
    before = balanced_owners(tables, ["a", "b", "c"])
    after = balanced_owners(tables, ["a", "b"])
    moved = sum(1 for t in tables if before[t] != "c" and after[t] != before[t])
    assert moved < 30  # only the dead job's 100 must move; the survivors' 200 mostly stay
    assert sorted(list(after.values()).count(job) for job in "ab") == [150, 150]


def test_renewal_must_come_before_expiry() -> None:
    with pytest.raises(ValueError, match="renew_seconds must be at most half of ttl_seconds"):
        LeaseSettings(root="/x", ttl_seconds=10, renew_seconds=6)


def test_the_first_expiry_is_that_of_the_oldest_other_job_owning_tables() -> None:
    beats = [Heartbeat("me", 100.0, 5), Heartbeat("idle", 90.0, 0), Heartbeat("a", 110.0, 3), Heartbeat("b", 95.0, 2)]
    assert first_expiry(beats, "me", 30.0) == 125.0  # b's: not this job's own, nor a job owning nothing
    assert first_expiry(beats[:2], "me", 30.0) is None
