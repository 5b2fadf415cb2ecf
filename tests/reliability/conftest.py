"""The reliability suite (issue 10): every scenario checks the row multiset and that no referenced file is missing.

Shortened in CI (`./dev test`); `pytest tests/reliability --soak` (or `RECLUSTER_SOAK=1`) runs the long mode:
more kills, more concurrent changes, bigger tables.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.reliability.checks import COUNTS


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--soak", default=False):
        os.environ["RECLUSTER_SOAK"] = "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.reliability)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if COUNTS.scenarios:
        terminalreporter.write_line(
            f"reliability: {COUNTS.scenarios} scenario checks, {COUNTS.kills} kills, "
            f"{COUNTS.rows:,} rows checked, {COUNTS.files:,} referenced files checked"
        )
