"""A Delta Spark Structured Streaming writer and DML beside `recluster watch` (issue 41 item 4), the short version
of bench/streaming_writers_bench.py: the writer's query survives our rewrites (it died with DELTA_METADATA_CHANGED
when the job named new range bounds with a metaData commit), and the table holds exactly the writer's rows with
the DML statements that committed applied."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.referee import referee_missing
from tests.streaming_writers import run_writers

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_a_streaming_writer_survives_the_job_rewriting_its_table(tmp_path: Path) -> None:
    missing = referee_missing()
    if missing:
        pytest.fail(missing)
    run = run_writers("recluster", 60, tmp_path)
    assert run.writer_active and run.writer_error is None, run
    assert run.rewrites >= 1 and list((tmp_path / "table" / "_recluster").glob("current-ranges-*.json")), run
    assert run.metadata_actions == 0, run
    assert run.rows_exact and run.rows > 0, run
