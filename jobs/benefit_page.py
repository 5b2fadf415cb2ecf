"""The benefit on the table page (docs/benefit.md): what the logged queries skipped against the bytes the job rewrote,
and the files skipped per day as bars, the way the page draws its depth histogram."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from jobs.pages import _e, _number, _table

GB = 1e9


def benefit_section(benefit: Mapping[str, Any] | None) -> str:
    """The table's benefit as the job last counted it (its `/status` `benefit`); nothing outside the job. A modelled
    figure (no logged scan of the table) is one query's and says so; it has no per-day series."""
    if not benefit:
        return ""
    paused = benefit["paused"]
    modelled = benefit["source"] == "modelled"
    facts = [
        ["figures", "modelled: one point query on the key, no logged scan" if modelled else "logged scans"],
        ["queries logged (with scan metrics)", f"{benefit['queries']} ({benefit['measured']})"],
        ["files skipped", f'<span class="files-skipped">{benefit["files_skipped"]}</span> of {benefit["files_total"]}'],
        ["GB skipped / rewritten", f"{benefit['bytes_skipped'] / GB:,.3f} / {benefit['bytes_rewritten'] / GB:,.3f}"],
        ["GB skipped per GB rewritten", _number(benefit["skipped_per_gb_rewritten"])],
        ["reclustering", f'<span class="state pending">paused: {_e(paused)}</span>' if paused else "not paused"],
    ]
    if modelled:
        return "<h2>Benefit: what one query on the key would skip (modelled)</h2>" + _table(("", ""), facts, "benefit")
    return (
        "<h2>Benefit: what the logged queries skipped</h2>"
        + _table(("", ""), facts, "benefit")
        + "<h2>Files skipped per day (UTC)</h2>"
        + daily_plot(benefit["daily"])
    )


def daily_plot(daily: Sequence[Mapping[str, Any]], width: int = 640, height: int = 160) -> str:
    """One bar per day: its files skipped, the files its queries read stacked on top."""
    if not daily:
        return '<p class="muted">no logged query yet</p>'
    widest, step = max(max(d["files_total"] for d in daily), 1), min(60.0, (width - 20) / len(daily))
    scale = (height - 50) / widest
    bars = []
    for index, day in enumerate(daily):
        x, skipped, read = 10 + index * step, day["files_skipped"], day["files_total"] - day["files_skipped"]
        date = dt.date.fromordinal(dt.date(1970, 1, 1).toordinal() + day["day"]).isoformat()
        bars.append(
            f'<rect x="{x:.1f}" y="{height - 30 - scale * skipped:.1f}" width="{step * 0.8:.1f}" '
            f'height="{scale * skipped:.1f}" fill="#1a7f37"><title>{date}: {skipped} files skipped, '
            f"{day['queries']} queries, {day['bytes_rewritten'] / GB:,.3f} GB rewritten</title></rect>"
            f'<rect x="{x:.1f}" y="{height - 30 - scale * (skipped + read):.1f}" width="{step * 0.8:.1f}" '
            f'height="{scale * read:.1f}" fill="#dde3ea"><title>{date}: {read} files read</title></rect>'
            f'<text x="{x:.1f}" y="{height - 12}" font-size="11">{date[5:]}</text>'
        )
    return (
        f'<svg id="benefit-daily" width="{width}" height="{height}" role="img" '
        f'aria-label="files skipped per day">{"".join(bars)}</svg>'
    )
