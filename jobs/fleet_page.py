"""The fleet on the status page: the jobs sharing the tables through leases (docs/discovery.md#several-jobs)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobs.pages import _e, _number, _table


def fleet_section(fleet: Mapping[str, Any], now: float) -> str:
    """Which job owns how many of the tables, this one marked; the tables listed above are this job's own
    (docs/discovery.md#several-jobs)."""
    if not fleet:
        return ""
    rows = [
        [
            f"<code>{_e(job['job'])}</code>" + (" (this job)" if job["job"] == fleet["job"] else ""),
            f'<span class="owned">{job["tables"]}</span>',
            _number(now - job["heartbeat"], 1),
        ]
        for job in fleet["jobs"]
    ]
    errors = "".join(
        f"<li><code>{_e(t)}</code>: {_e(e)}</li>" for t, e in sorted(fleet.get("lease_errors", {}).items())
    )
    return (
        f"<h2>Fleet: {len(fleet['jobs'])} job(s) own {fleet['tables']} table(s)</h2>"
        + _table(("job", "tables owned", "heartbeat age (s)"), rows, "fleet")
        + f'<p class="muted">This job found {fleet.get("found", 0)} table(s) and lists the ones it owns above.</p>'
        + (f'<p class="error">Leases it cannot read:</p><ul>{errors}</ul>' if errors else "")
    )
