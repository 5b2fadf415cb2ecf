"""The pieces every figure of the README and the docs is made of: the newest results file of a benchmark, and one
formatting rule."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
MB = 1_000_000

Json = dict[str, Any]
BLOCK = re.compile(
    r"^(?P<indent>[ \t]*)<!-- figures:(?P<name>[a-z0-9-]+) -->\n(?P<body>.*?)^(?P=indent)<!-- /figures:(?P=name) -->$",
    re.MULTILINE | re.DOTALL,
)
OPENING = re.compile(r"<!-- figures:([a-z0-9-]+) -->")
WIDTH = 120
NO_BREAKS: dict[str, Any] = {"break_long_words": False, "break_on_hyphens": False}


class Results:
    """The newest results file of each benchmark: `<name>-<YYYY-MM-DD>.json` (so `merge` never means `merge-quick`)."""

    def __init__(self, directory: Path = RESULTS) -> None:
        self.directory = directory
        self._loaded: dict[str, tuple[str, Json]] = {}

    def newest_name(self, name: str) -> str | None:
        pattern = re.compile(rf"^{re.escape(name)}-(\d{{4}}-\d{{2}}-\d{{2}})\.json$")
        dated = [(m[1], p.name) for p in self.directory.glob(f"{name}-*.json") if (m := pattern.match(p.name))]
        return max(dated)[1] if dated else None

    def get(self, name: str) -> tuple[str, Json]:
        """(file name, content) of the newest `name` results; a missing benchmark is an error, not a blank row."""
        if name not in self._loaded:
            file = self.newest_name(name)
            if file is None:
                raise ValueError(f"no {name}-<date>.json in {self.directory}")
            data = json.loads((self.directory / file).read_text(encoding="utf-8"))
            self._loaded[name] = (file, data)
        return self._loaded[name]


# ---- formatting: one rule for every figure ---------------------------------------------------------------------


def num(value: float) -> str:
    """Three significant digits with trailing zeros kept (2.90, 0.0719, 14.0); >= 100 as a whole number."""
    if value == 0:
        return "0"
    if abs(value) >= 99.95:
        return f"{value:,.0f}"
    return f"{value:#.3g}".rstrip(".")


def whole(value: float) -> str:
    """Counts and depths that are whole numbers print as integers (60, not 60.0)."""
    return f"{int(value):,}" if float(value).is_integer() else num(value)


def span(values: Iterable[float], fmt: Callable[[float], str] = num) -> str:
    """A range `low-high` (one value when they are equal)."""
    ordered = sorted(values)
    low, high = fmt(ordered[0]), fmt(ordered[-1])
    return low if low == high else f"{low}-{high}"


def met(ok: bool) -> str:
    return "met" if ok else "missed"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> str:
    """A markdown table; `align` has one letter per column: `l` for text, `r` for figures."""
    lines = [headers, ["---:" if a == "r" else "---" for a in align], *rows]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)


def source(*files: str) -> str:
    return ", ".join(f"`bench/results/{f}`" for f in files)


def goal_lines(goals: Sequence[Json], extra: dict[int, str] | None = None) -> list[str]:
    """The goals a bench evaluated and wrote, one bullet each (`extra`: a note after goal i)."""
    return [
        f"- {g['goal']}: {g['value']} -> **{met(g['met'])}**{(extra or {}).get(i, '')}" for i, g in enumerate(goals)
    ]


# ---- summary rows: every benchmark's results file holds them, `python -m bench` prints them --------------------

SUMMARY_HEADERS = ("measure", "recluster", "baseline", "ratio", "goal")
"""The columns of every benchmark's summary rows (`python -m bench` prints them in one combined table)."""


def ratio_row(measure: str, ours: float, theirs: float, goal: str) -> list[Any]:
    """One summary row: the measure, ours, the baseline's, their ratio and the goal."""
    return [measure, ours, theirs, ours / theirs, goal]


def summary_records(rows: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    """Summary rows as the `summary` list of a result JSON: one {column: value} per row."""
    return [dict(zip(SUMMARY_HEADERS, row, strict=True)) for row in rows]
