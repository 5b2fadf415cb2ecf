"""Several jobs sharing the tables (docs/discovery.md#several-jobs): who should own which table, and whether a table's
latest claim leaves it to this job. Pure: the lease objects are read and created in delta/leases.py.

A job is alive while its heartbeat (rewritten every `renew_seconds`) is younger than `ttl_seconds`; a table belongs to
the job named by its latest claim, a numbered object only ever created if absent, while that job is alive. Tables are
spread over the live jobs in fair shares, counts within one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from types import MappingProxyType
from typing import Any

FORGOTTEN_AFTER_TTLS = 10
"""A dead job's heartbeat and holdings are deleted this many `ttl_seconds` after its last heartbeat."""


class LeaseError(ValueError):
    """A lease object that cannot be read as one: one line naming it; that table waits, the others go on."""


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A job's sign of life: its id (new on every start), when it wrote this, and how many tables it owns."""

    job: str
    written_at: float
    owned: int

    def expires_at(self, ttl_seconds: float) -> float:
        """When this job is taken for dead unless it writes a newer heartbeat."""
        return self.written_at + ttl_seconds

    def alive(self, now: float, ttl_seconds: float) -> bool:
        return now < self.expires_at(ttl_seconds)

    def forgotten(self, now: float, ttl_seconds: float) -> bool:
        """Whether the job is so long dead that its lease objects are deleted: every lease pass reads every
        heartbeat, and a job's id is new on every start; its tables were taken over long before."""
        return now >= self.written_at + FORGOTTEN_AFTER_TTLS * ttl_seconds

    def to_json(self) -> bytes:
        return json.dumps({"job": self.job, "written_at": self.written_at, "owned": self.owned}).encode()


@dataclass(frozen=True, slots=True)
class Claim:
    """One numbered claim on a table: `job` owns it from then on while alive; None releases it to anyone."""

    table: str
    sequence: int
    job: str | None

    def to_json(self) -> bytes:
        return json.dumps({"table": self.table, "sequence": self.sequence, "job": self.job}).encode()


@dataclass(frozen=True, slots=True)
class Holdings:
    """The claims a job holds, by table: rewritten by that job after each lease pass that changed them. Once the job
    is dead, another job claims a table listed here with one conditional create of the next number: the listed claim
    names the dead job, so if no claim came after it the table is free (docs/discovery.md#several-jobs)."""

    job: str
    sequences: Mapping[str, int]

    def to_json(self) -> bytes:
        return json.dumps({"job": self.job, "tables": dict(self.sequences)}).encode()


def parse_heartbeat(data: bytes, where: str) -> Heartbeat:
    record = _object(data, where)
    try:
        return Heartbeat(str(record["job"]), float(record["written_at"]), int(record["owned"]))
    except (KeyError, TypeError, ValueError):
        raise LeaseError(f"malformed heartbeat {where}: expected job, written_at and owned") from None


def parse_claim(data: bytes, where: str) -> Claim:
    record = _object(data, where)
    try:
        job = record["job"]
        return Claim(str(record["table"]), int(record["sequence"]), None if job is None else str(job))
    except (KeyError, TypeError, ValueError):
        raise LeaseError(f"malformed lease {where}: expected table, sequence and job") from None


def parse_holdings(data: bytes, where: str) -> Holdings:
    record = _object(data, where)
    try:
        tables = record["tables"]
        if not isinstance(tables, dict):
            raise TypeError
        return Holdings(str(record["job"]), {str(table): int(sequence) for table, sequence in tables.items()})
    except (KeyError, TypeError, ValueError):
        raise LeaseError(f"malformed holdings {where}: expected job and tables") from None


def _object(data: bytes, where: str) -> dict[str, Any]:
    try:
        record = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise LeaseError(f"malformed lease {where}: not JSON") from None
    if not isinstance(record, dict):
        raise LeaseError(f"malformed lease {where}: not a JSON object")
    return record


def table_key(uri: str) -> str:
    """The folder of a table's claims: a digest, so any URI makes a short, safe object name."""
    return hashlib.sha256(uri.encode()).hexdigest()[:24]


def balanced_owners(tables: Collection[str], jobs: Collection[str]) -> Mapping[str, str]:
    """Which live job should own each table; every job computes the same answer from the same live set. Each job gets
    its fair share (counts within one); a table goes to the job it prefers most (highest rendezvous weight) that still
    has room, so when a job comes or goes most tables keep their owner. The answer is kept for the last few inputs: a
    lease pass asks again every renewal, mostly with the same tables and jobs (thousands of hashes each)."""
    return _balanced_owners(frozenset(tables), tuple(sorted(set(jobs))))


@lru_cache(maxsize=4)
def _balanced_owners(tables: frozenset[str], ordered_jobs: tuple[str, ...]) -> Mapping[str, str]:
    if not ordered_jobs:
        return MappingProxyType({})
    share, extra = divmod(len(tables), len(ordered_jobs))
    room = {job: share + (1 if index < extra else 0) for index, job in enumerate(ordered_jobs)}
    owners = {}
    for table in sorted(tables, key=table_key):
        preferred = sorted(ordered_jobs, key=lambda job: hashlib.sha256(f"{job}/{table}".encode()).digest())
        owner = next(job for job in preferred if room[job] > 0)
        room[owner] -= 1
        owners[table] = owner
    return MappingProxyType(owners)


class ClaimAction(StrEnum):
    """What a job does about one table in a lease pass."""

    KEEP = "keep"
    """Its own, still its to own."""
    RELEASE = "release"
    """Its own, now another live job's share: released (the job stops working on it first)."""
    TAKE = "take"
    """Its share, and free: never claimed, released, or its owner is dead."""
    WAIT = "wait"
    """Another live job holds it."""
    NONE = "none"
    """Neither its own nor its share."""


def claim_action(
    latest: Claim | None, me: str, target: str | None, alive: Mapping[str, Heartbeat], *, held: bool
) -> ClaimAction:
    """The action on one table given its latest claim, this job, the job that should own it, the live jobs, and
    whether this job holds the claim (a claim of its own it no longer holds, after its heartbeat lapsed, is free)."""
    holder = latest.job if latest is not None else None
    if holder == me and not held:
        holder = None
    if holder == me:
        return ClaimAction.KEEP if target == me else ClaimAction.RELEASE
    if target != me:
        return ClaimAction.NONE
    if holder is None or holder not in alive:
        return ClaimAction.TAKE
    return ClaimAction.WAIT


def first_expiry(beats: Iterable[Heartbeat], job: str, ttl_seconds: float) -> float | None:
    """When the first other job that owns tables is taken for dead unless it beats again (None: no such job): a lease
    pass then finds its tables free at once, not up to a renewal later (docs/discovery.md#several-jobs)."""
    return min((beat.expires_at(ttl_seconds) for beat in beats if beat.job != job and beat.owned), default=None)
