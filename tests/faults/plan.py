"""What the fault front injects, and where: fault kinds, request targets, rules and the seeded decision.

A rule names a fault kind, the target it is aimed at (commit files, data files, checkpoints, `_last_checkpoint`,
listings), the methods it applies to, a rate and a budget. Whether the n-th request of one method on one object is
hit is a pure function of the seed, the rule and n (a hash, not a shared random stream), so a run's decisions do not
depend on how concurrent requests interleave. Plain values only: the plan travels to the front as JSON.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit


class FaultKind(StrEnum):
    LOST_RESPONSE = "lost_response"
    """The request is forwarded and applied, then the connection is dropped unanswered."""
    APPLIED_ERROR = "applied_error"
    """The request is forwarded and applied, then answered 500 InternalError: a client that retries a conditional
    PUT then gets 412 (already exists) for its own write."""
    SLOW_DOWN = "slow_down"
    """503 SlowDown, not forwarded."""
    SERVER_ERROR = "server_error"
    """500 InternalError, not forwarded."""
    RESET = "reset"
    """The connection is reset before the request is forwarded."""
    LATENCY = "latency"
    """Forwarded after a delay."""


class Target(StrEnum):
    COMMIT = "commit"
    """`_delta_log/<20 digits>.json`."""
    DATA = "data"
    """`*.parquet` outside the log."""
    CHECKPOINT = "checkpoint"
    """Checkpoint parts and sidecars in the log."""
    LAST_CHECKPOINT = "last_checkpoint"
    LISTING = "listing"
    """A bucket listing (GET with `list-type=2`)."""
    BULK_DELETE = "bulk_delete"
    """A multi-object delete (POST with `delete`): how object_store deletes a batch of files."""
    OTHER = "other"
    ANY = "any"


_COMMIT = re.compile(r"(^|/)_delta_log/\d{20}\.json$")
_CHECKPOINT = re.compile(r"(^|/)_delta_log/(\d{20}\.checkpoint.*\.parquet|_sidecars/.*)$")


_BATCH_KEY = re.compile(rb"<Key>([^<]*)</Key>")
_NAMED = ("list:", "delete:")


def classify(path: str, body: bytes = b"") -> tuple[Target, str]:
    """The target of a request (path-style `/bucket/key?query`, and its body) and the object it is about: the key,
    for a listing `list:` and the prefix listed, for a multi-object delete `delete:` and its first key."""
    parts = urlsplit(path)
    _, _, key = unquote(parts.path).lstrip("/").partition("/")
    query = parse_qs(parts.query, keep_blank_values=True)
    if not key and "list-type" in query:
        return Target.LISTING, "list:" + query.get("prefix", [""])[0]
    if not key and "delete" in query:
        first = _BATCH_KEY.search(body)
        return Target.BULK_DELETE, "delete:" + (first.group(1).decode() if first else "")
    if _COMMIT.search(key):
        return Target.COMMIT, key
    if key.endswith("_delta_log/_last_checkpoint"):
        return Target.LAST_CHECKPOINT, key
    if _CHECKPOINT.search(key):
        return Target.CHECKPOINT, key
    if key.endswith(".parquet") and "_delta_log/" not in key:
        return Target.DATA, key
    return Target.OTHER, key


@dataclass(frozen=True, slots=True)
class FaultRule:
    kind: FaultKind
    target: Target
    methods: tuple[str, ...] = ()
    """HTTP methods it applies to; empty: every method."""
    rate: float = 1.0
    """Share of matching requests hit."""
    budget: int | None = None
    """At most this many injections by this rule; None: no limit."""
    latency_seconds: float = 0.3
    prefix: str = ""
    """Only objects whose key (or listed prefix) starts with this (a table's prefix)."""
    after_requests: int = 0
    """Only once this many requests of the method on one object have passed: a name requested again and again (the
    Delta-log source's probe of the next commit) is hit, a file read once or twice is not."""

    def matches(self, method: str, target: Target, name: str) -> bool:
        if self.target is not Target.ANY and self.target is not target:
            return False
        if self.methods and method not in self.methods:
            return False
        named = next((name.removeprefix(kind) for kind in _NAMED if name.startswith(kind)), name)
        return named.startswith(self.prefix)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "methods": list(self.methods)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FaultRule:
        return cls(
            kind=FaultKind(data["kind"]),
            target=Target(data["target"]),
            methods=tuple(data.get("methods", ())),
            rate=float(data.get("rate", 1.0)),
            budget=data.get("budget"),
            latency_seconds=float(data.get("latency_seconds", 0.3)),
            prefix=data.get("prefix", ""),
            after_requests=int(data.get("after_requests", 0)),
        )


@dataclass(frozen=True, slots=True)
class FaultPlan:
    seed: int
    rules: tuple[FaultRule, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "rules": [r.to_json() for r in self.rules]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FaultPlan:
        return cls(int(data["seed"]), tuple(FaultRule.from_json(r) for r in data.get("rules", ())))


@dataclass(frozen=True, slots=True)
class InjectedFault:
    """One fault the front injected."""

    kind: FaultKind
    target: Target
    method: str
    path: str
    rule: int
    """Index of the rule in the plan in force."""
    plan: int
    """How many plans were set before this one (which phase of a run)."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> InjectedFault:
        return cls(
            FaultKind(data["kind"]), Target(data["target"]), data["method"], data["path"], data["rule"], data["plan"]
        )


def draw(seed: int, rule: int, method: str, name: str, occurrence: int) -> float:
    """A uniform number in [0, 1) for the `occurrence`-th request of `method` on `name` under rule `rule`."""
    digest = hashlib.blake2b(f"{seed}|{rule}|{method}|{name}|{occurrence}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


@dataclass
class Decider:
    """The front's state under one plan: occurrences per (method, object), injections per rule."""

    plan: FaultPlan
    occurrences: dict[tuple[str, str], int] = field(default_factory=dict)
    spent: dict[int, int] = field(default_factory=dict)

    def decide(self, method: str, path: str, body: bytes = b"") -> tuple[int, FaultRule, Target] | None:
        """The rule (index, rule, target) whose fault this request gets, or None; counts the request."""
        target, name = classify(path, body)
        occurrence = self.occurrences.get((method, name), 0)
        self.occurrences[(method, name)] = occurrence + 1
        for index, rule in enumerate(self.plan.rules):
            if not rule.matches(method, target, name):
                continue
            if rule.budget is not None and self.spent.get(index, 0) >= rule.budget:
                continue
            if occurrence < rule.after_requests:
                continue
            if draw(self.plan.seed, index, method, name, occurrence) < rule.rate:
                self.spent[index] = self.spent.get(index, 0) + 1
                return index, rule, target
        return None
