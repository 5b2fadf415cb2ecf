"""One job's side of sharing tables with other jobs (docs/discovery.md#several-jobs): every lease pass it writes its
heartbeat, reads the others', works out its share of the tables and claims, keeps or releases tables accordingly. A
table is let go (its work finished, under the handler's lock) before its release is written, and taken up only after
its claim was created, so two jobs never work on one table at once."""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from recluster.core.errors import first_line
from recluster.core.leases import (
    Claim,
    ClaimAction,
    Heartbeat,
    Holdings,
    balanced_owners,
    claim_action,
    first_expiry,
)
from recluster.delta.leases import LeaseStore
from recluster.settings_discovery import LeaseSettings

log = logging.getLogger("recluster.leases")


def new_job_id() -> str:
    """This job's id: host, process and a random part, new on every start (a restarted job is a new job)."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True, slots=True)
class LeasePass:
    """What one lease pass left this job with."""

    owned: frozenset[str]
    taken: tuple[str, ...]
    released: tuple[str, ...]
    jobs: tuple[Heartbeat, ...]
    """The live jobs, this one included, with the tables each said it owned."""

    def __str__(self) -> str:
        owned, taken, released = len(self.owned), len(self.taken), len(self.released)
        return f"leases owned={owned} taken={taken} released={released} jobs={len(self.jobs)}"


class JobLeases:
    """The claims this job holds, kept in memory: while it is alive no other job creates a newer claim on them."""

    def __init__(
        self, settings: LeaseSettings, storage_options: dict[str, str], job: str | None = None, threads: int = 8
    ) -> None:
        """`threads`: the claims a lease pass reads and creates at once (`discovery.threads`): taking over a dead
        job's share is a listing, a read and a create per table, which one after another made most of a takeover."""
        self.settings = settings
        self.threads = threads
        self.job = job or new_job_id()
        self.store = LeaseStore(settings.root, {**storage_options, **settings.storage_options})
        self.held: dict[str, Claim] = {}
        self.last_heartbeat = 0.0
        self.errors: dict[str, str] = {}
        """Tables whose lease could not be read, with the one line saying why."""
        self.fleet: tuple[Heartbeat, ...] = ()
        self.dead: dict[str, tuple[float, Holdings | None]] = {}
        """Per dead job whose heartbeat is still there: its last heartbeat's time and its holdings read then (None:
        unreadable or never written)."""

    @property
    def next_expiry(self) -> float | None:
        """When the first other live job owning tables, as the last pass saw them, is taken for dead if it does not
        beat again (`time.time()`): the job's next lease pass comes right after it (`JobDiscovery.period`)."""
        return first_expiry(self.fleet, self.job, self.settings.ttl_seconds)

    def may_work(self, now: float | None = None) -> bool:
        """Whether this job's heartbeat is fresh enough for its claims to stand (else it starts no new work)."""
        return (now or time.time()) - self.last_heartbeat < self.settings.ttl_seconds - self.settings.renew_seconds

    def beat(self) -> None:
        """Write this job's heartbeat (its own thread, every `renew_seconds`: slow take-ups never delay it)."""
        now = time.time()
        self.store.write_heartbeat(Heartbeat(self.job, now, len(self.held)))
        self.last_heartbeat = now

    def hand_back(self) -> None:
        """At a graceful stop, once no work runs: say this job is gone (a heartbeat already expired, with its holdings
        current), so the others' next lease pass claims its tables, each with one request, instead of waiting for its
        heartbeat to expire (docs/discovery.md#several-jobs)."""
        self._write_holdings()
        expired = time.time() - self.settings.ttl_seconds
        self.store.write_heartbeat(Heartbeat(self.job, expired, len(self.held)))
        self.held.clear()
        self.last_heartbeat = expired  # a lease pass still running claims nothing more

    def run_pass(self, tables: Collection[str], let_go: Callable[[str], None]) -> LeasePass:
        now = time.time()
        if self.held and now - self.last_heartbeat >= self.settings.ttl_seconds:  # others may have taken them
            log.error("recluster job=%s reason=heartbeat_lapsed: letting go of %d tables", self.job, len(self.held))
            for table in list(self.held):
                let_go(table)
                del self.held[table]
        if not self.may_work(now):  # no claim on a stale heartbeat: the others may think this job dead
            return LeasePass(frozenset(self.held), (), (), self.fleet)
        beats, problems = self.store.heartbeats()
        for problem in problems:
            log.error("recluster reason=bad_heartbeat error=%s", problem)
        for job in [job for job, beat in beats.items() if beat.forgotten(now, self.settings.ttl_seconds)]:
            del beats[job]
            try:
                self.store.forget_job(job)
                log.info("recluster job=%s reason=forgotten: its heartbeat and holdings deleted", job)
            except Exception as error:  # left for the next pass, or another job
                log.error("recluster job=%s reason=forget_failed error=%s", job, first_line(error))
        alive = {job: beat for job, beat in beats.items() if beat.alive(now, self.settings.ttl_seconds)}
        alive[self.job] = Heartbeat(self.job, now, len(self.held))
        targets = balanced_owners(tables, list(alive))
        released = []
        for table in sorted(self.held):
            if claim_action(self.held[table], self.job, targets.get(table), alive, held=True) is ClaimAction.RELEASE:
                let_go(table)  # its work ends before anyone may take it
                held = self.held.pop(table)
                self.store.create_claim(Claim(table, held.sequence + 1, None))
                released.append(table)
        share = sorted(table for table, job in targets.items() if job == self.job and table not in self.held)
        for table in set(self.errors) - set(share):  # no longer this job's to claim
            del self.errors[table]
        taken = []
        left = self._left_by_dead(beats, alive) if share else {}
        with ThreadPoolExecutor(self.threads, "recluster-claims") as pool:
            futures = {pool.submit(self._take, table, alive, left.get(table)): table for table in share}
            for future, table in futures.items():
                try:
                    claim = future.result()
                except Exception as error:  # a malformed or unreadable lease: that table waits, the others go on
                    self.errors[table] = first_line(error)
                    log.error("recluster table=%s reason=bad_lease error=%s", table, self.errors[table])
                    continue
                self.errors.pop(table, None)
                if claim is not None:
                    self.held[table] = claim
                    taken.append(table)
        alive[self.job] = Heartbeat(self.job, now, len(self.held))  # this pass's claims counted
        self.fleet = tuple(sorted(alive.values(), key=lambda beat: beat.job))
        outcome = LeasePass(frozenset(self.held), tuple(taken), tuple(released), self.fleet)
        if taken or released:
            self._write_holdings()
            log.info("recluster job=%s %s", self.job, outcome)
        return outcome

    def _write_holdings(self) -> None:
        """Say which claims this job holds, for the jobs that take them over if it dies; a failed write only makes
        their claims the long way."""
        try:
            self.store.write_holdings(Holdings(self.job, {table: claim.sequence for table, claim in self.held.items()}))
        except Exception as error:
            log.error("recluster job=%s reason=holdings_unwritten error=%s", self.job, first_line(error))

    def _left_by_dead(self, beats: Mapping[str, Heartbeat], alive: Mapping[str, Heartbeat]) -> dict[str, Claim]:
        """The claims dead jobs said they held, by table (each dead job's holdings read once per last heartbeat): a
        claim naming a dead job is free if no claim came after it."""
        self.dead = {job: read for job, read in self.dead.items() if job in beats}  # a heartbeat gone: its job too
        left: dict[str, Claim] = {}
        for job, beat in beats.items():
            if job in alive:
                continue
            if job not in self.dead or self.dead[job][0] != beat.written_at:
                try:
                    self.dead[job] = (beat.written_at, self.store.holdings(job))
                except Exception as error:  # its tables are claimed the long way: a listing and a read each
                    self.dead[job] = (beat.written_at, None)
                    log.error("recluster job=%s reason=bad_lease error=%s", job, first_line(error))
            holdings = self.dead[job][1]
            for table, sequence in holdings.sequences.items() if holdings is not None else ():
                if table not in left or sequence > left[table].sequence:
                    left[table] = Claim(table, sequence, job)
        return left

    def _take(self, table: str, alive: Mapping[str, Heartbeat], left: Claim | None) -> Claim | None:
        """Claim a table of this job's share if it is free: its claim, or None (another live job holds it, or another
        job's claim of the same number came first). A table a dead job held (`left`) is claimed with one conditional
        create; if a claim came after the dead job's, its newest claim is listed and read."""
        if left is not None:
            claim = Claim(table, left.sequence + 1, self.job)
            if self.store.create_claim(claim):
                return claim
        latest = self.store.latest_claim(table)
        if claim_action(latest, self.job, self.job, alive, held=False) is not ClaimAction.TAKE:
            return None
        claim = Claim(table, latest.sequence + 1 if latest is not None else 0, self.job)
        return claim if self.store.create_claim(claim) else None
