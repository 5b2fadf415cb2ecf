"""A Delta Spark Structured Streaming writer and DML beside `recluster watch` (issue 41 item 4), the short version
of bench/streaming_writers_bench.py: the writer's query survives our rewrites (it died with DELTA_METADATA_CHANGED
when the job named new range bounds with a metaData commit), and the table holds exactly the writer's rows with
the DML statements that committed applied. The writer stops once it committed twice after our second rewrite and
a DML statement was tried (60 s at most), and the session's referee checks the rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.referee import Referee
from tests.streaming_writers import run_writers

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REWRITES = 2
"""Rewrites of ours the writer must outlive (the first named the range bounds; the old code's metaData commit)."""


def test_a_streaming_writer_survives_the_job_rewriting_its_table(referee: Referee, tmp_path: Path) -> None:
    run = run_writers("recluster", 60, tmp_path, referee=referee, until_rewrites=REWRITES)
    assert run.writer_active and run.writer_error is None, run
    assert run.rewrites >= REWRITES and list((tmp_path / "table" / "_recluster").glob("current-ranges-*.json")), run
    assert run.metadata_actions == 0, run
    assert run.rows_exact and run.rows > 0, run
