"""What the logged queries ask of a table, the candidate keys that would serve them, and their ranking. Pure.

A table's workload is its scans grouped by predicate set (a pattern and how often it ran). Candidates are the
columns the queries filter on, most used first: each alone (linear), and the two, three and four most used
together on a curve; the current key is always one of them. Each is scored by the files the logged queries would
read on it, weighted by how often each ran (docs/advise.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from recluster.core.advice.filters import Predicate, PredicateShape
from recluster.core.advice.scans import Scan

MAX_KEY_COLUMNS = 4
DAY_MS = 86_400_000


class Confidence(StrEnum):
    """How sure the advice is, from how many queries over how long (docs/advise.md#confidence)."""

    LOW = "low"
    """Fewer than 30 queries, or less than a day of them."""
    MEDIUM = "medium"
    """At least 30 queries over at least a day."""
    HIGH = "high"
    """At least 300 queries over at least 7 days."""


@dataclass(frozen=True, slots=True)
class Pattern:
    """One predicate set and how many logged queries used it."""

    predicates: tuple[Predicate, ...]
    queries: int

    def __str__(self) -> str:
        where = " AND ".join(str(p) for p in self.predicates) or "(no filter)"
        return f"{self.queries} x {where}"


@dataclass(frozen=True, slots=True)
class Workload:
    """The logged scans of one table."""

    location: str
    names: tuple[str, ...]
    patterns: tuple[Pattern, ...]
    first_ms: int
    last_ms: int
    files_read: int | None
    bytes_read: int | None
    """Sums of the scans' own metrics, when every scan had them."""

    @property
    def queries(self) -> int:
        return sum(p.queries for p in self.patterns)

    @property
    def days(self) -> float:
        return (self.last_ms - self.first_ms) / DAY_MS

    def column_use(self) -> Counter[str]:
        """Queries filtering on each column."""
        used: Counter[str] = Counter()
        for pattern in self.patterns:
            for column in {p.column for p in pattern.predicates}:
                used[column] += pattern.queries
        return used

    def shapes(self) -> dict[str, Counter[PredicateShape]]:
        """Per column, queries by predicate shape."""
        found: dict[str, Counter[PredicateShape]] = {}
        for pattern in self.patterns:
            for predicate in pattern.predicates:
                found.setdefault(predicate.column, Counter())[predicate.shape] += pattern.queries
        return found

    @property
    def confidence(self) -> Confidence:
        if self.queries >= 300 and self.days >= 7:
            return Confidence.HIGH
        if self.queries >= 30 and self.days >= 1:
            return Confidence.MEDIUM
        return Confidence.LOW


def _sums(values: Sequence[int | None]) -> int | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def workloads(scans: Iterable[Scan], table_of: Mapping[str, str] | None = None) -> dict[str, Workload]:
    """The scans grouped by table (`table_of` maps a scan's location to the table's URI; unmapped locations are
    their own tables)."""
    grouped: dict[str, list[Scan]] = {}
    for scan in scans:
        grouped.setdefault((table_of or {}).get(scan.location, scan.location), []).append(scan)
    result = {}
    for table, found in grouped.items():
        counted = Counter(tuple(sorted(s.predicates, key=str)) for s in found)
        patterns = tuple(Pattern(p, n) for p, n in sorted(counted.items(), key=lambda item: (-item[1], str(item[0]))))
        names = tuple(sorted({s.name for s in found if s.name}))
        times = [s.time_ms for s in found]
        result[table] = Workload(
            table,
            names,
            patterns,
            min(times),
            max(times),
            _sums([s.files_read for s in found]),
            _sums([s.bytes_read for s in found]),
        )
    return result


@dataclass(frozen=True, slots=True)
class CandidateKey:
    columns: tuple[str, ...]
    curve: bool
    """Ordered on a space-filling curve (several columns) or linearly."""

    def __str__(self) -> str:
        return f"{'curve' if self.curve else 'linear'}({', '.join(self.columns)})"


def candidate_keys(
    used: Mapping[str, int], current: Sequence[str] | None, available: Iterable[str]
) -> tuple[CandidateKey, ...]:
    """The keys worth scoring: each filtered column alone, the top two to four on a curve, the current key."""
    known = set(available)
    ranked = [c for c, _ in sorted(used.items(), key=lambda item: (-item[1], item[0])) if c in known]
    found: list[CandidateKey] = [CandidateKey((c,), False) for c in ranked[:MAX_KEY_COLUMNS]]
    found += [CandidateKey(tuple(ranked[:n]), True) for n in range(2, min(len(ranked), MAX_KEY_COLUMNS) + 1)]
    if current:
        key = CandidateKey(tuple(current), len(current) > 1)
        if key not in found:
            found.append(key)
    return tuple(found)


@dataclass(frozen=True, slots=True)
class Scored:
    """A candidate key and what the logged queries would read on it."""

    key: CandidateKey
    files: int
    """Files of the table once clustered on it."""
    files_read: float
    """Files a query reads on it, averaged over the logged queries."""
    current: bool
    cost_mb_per_day: float | None = None
    cost_seconds_per_day: float | None = None

    @property
    def read_share(self) -> float:
        return self.files_read / self.files if self.files else 1.0


def mean_files_read(patterns: Sequence[Pattern], reads: Sequence[int]) -> float:
    """Files read per query, weighted by each pattern's queries."""
    total = sum(p.queries for p in patterns)
    return sum(p.queries * r for p, r in zip(patterns, reads, strict=True)) / total if total else 0.0


def ranked(scored: Iterable[Scored]) -> tuple[Scored, ...]:
    """Best first: fewest files read per query; then fewer columns; then linear before curve."""
    return tuple(sorted(scored, key=lambda s: (round(s.files_read, 6), len(s.key.columns), s.key.curve)))
