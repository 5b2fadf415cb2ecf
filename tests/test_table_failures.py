"""One table's failure stays with that table: classified, shown with the table (status, API, metrics record),
retried after a backoff, while the job goes on reclustering the others; mended, the table recovers.
"""

from __future__ import annotations

import errno
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from obstore.exceptions import GenericError, PermissionDeniedError

from recluster.core.deletion_vectors import DeletionVectorError
from recluster.core.errors import ErrorKind, StorageError, TableError
from recluster.core.selection.plan import Policy
from recluster.delta.log_writer import set_table_properties
from recluster.engine.backoff import FailureBook, error_kind
from recluster.settings import CLUSTER_BY_PROPERTY
from tests.helpers import append_random, job_settings, row_multiset, running_job, wait_for


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (TableError("key column 'k' is not in the table"), ErrorKind.TABLE),
        (StorageError("cannot open Delta table: AccessDenied", transient=False), ErrorKind.STORAGE),
        (GenericError("Generic S3 error: timed out"), ErrorKind.STORAGE),
        (PermissionDeniedError("denied"), ErrorKind.STORAGE),
        (ConnectionResetError(errno.ECONNRESET, "reset"), ErrorKind.STORAGE),
        (FileNotFoundError(errno.ENOENT, "part-1.parquet"), ErrorKind.DATA),
        (DeletionVectorError("deletion vector holds 3 rows, its cardinality says 4"), ErrorKind.DATA),
        (pa.ArrowInvalid("Parquet magic bytes not found"), ErrorKind.DATA),
        (ZeroDivisionError("a bug"), ErrorKind.UNKNOWN),
    ],
)
def test_errors_are_classified_by_kind(error: BaseException, kind: ErrorKind) -> None:
    assert error_kind(error) is kind


def test_a_failing_table_waits_longer_after_each_failure_in_a_row_and_a_success_clears_it() -> None:
    book = FailureBook(base_seconds=10, max_seconds=60)
    waits = [book.failed("t", OSError("x"), now=1000).retry_at - 1000 for _ in range(5)]
    assert waits == [10, 20, 40, 60, 60]
    assert book.waiting("t", 1059) and not book.waiting("t", 1060)
    assert book.due(1059) == [] and book.due(1060) == ["t"]
    assert book.get("other") is None and not book.waiting("other", 0)
    failure = book.recovered("t")
    assert failure is not None and failure.attempts == 5 and failure.kind is ErrorKind.STORAGE
    assert book.recovered("t") is None and book.failed("t", OSError("x"), now=0).attempts == 1


def _live_files(table: Path) -> list[Path]:
    return [Path(p.removeprefix("file://")) for p in DeltaTable(str(table)).file_uris()]


@pytest.mark.spark
@pytest.mark.slow
def test_three_tables_one_broken_three_ways_the_others_go_on_and_it_recovers_once_mended(
    tmp_path: Path, spark: Any
) -> None:
    healthy, broken = [tmp_path / "a", tmp_path / "b"], tmp_path / "c"
    rng = np.random.default_rng(41)
    appended: dict[Path, list[pa.Table]] = {t: [append_random(t, rng, 0)] for t in (*healthy, broken)}
    settings = job_settings(tmp_path / "checkpoint", [*healthy, broken], Policy.LEVELS)
    settings = settings.model_copy(update={"stream": settings.stream.model_copy(update={"table_retry_seconds": 0.2})})
    batch = [0]

    def append_everywhere(query: Any) -> None:
        batch[0] += 1
        for table in appended:
            appended[table].append(append_random(table, rng, batch[0]))
        query.processAllAvailable()

    def merges(handler: Any, table: Path) -> int:
        return int(handler.status[str(table)].tasks)

    def recovers(query: Any, handler: Any) -> None:
        """Mended: after the backoff the broken table is worked on again, its error gone."""

        def healed() -> bool:
            handler.last_tick = 0.0
            handler.tick()
            append_everywhere(query)
            status = handler.status[str(broken)]
            return status.error is None and handler.failures.get(str(broken)) is None

        wait_for(healed, "the mended table to recover", timeout=120)

    broken_ways: list[tuple[str, str]] = []
    with running_job(spark, settings) as (query, handler):
        for _ in range(3):
            append_everywhere(query)
        wait_for(lambda: all(merges(handler, t) > 0 for t in (*healthy, broken)), "merges on every table", timeout=120)

        def failed(query: Any, handler: Any) -> bool:
            append_everywhere(query)
            return handler.failures.get(str(broken)) is not None

        def breaks(kind: ErrorKind, damage: Any, mend: Any) -> None:
            before = {t: merges(handler, t) for t in healthy}
            damage()
            wait_for(lambda: failed(query, handler), f"the {kind} failure", timeout=120)
            failure = handler.failures.get(str(broken))
            assert failure is not None and failure.kind is kind, failure
            status = handler.status[str(broken)]
            assert status.error and status.error_kind == str(kind)
            assert status.to_dict()["error_kind"] == str(kind)
            for _ in range(2):
                append_everywhere(query)
            assert all(merges(handler, t) > before[t] for t in healthy), "a broken table stopped the others"
            broken_ways.append((str(kind), status.error))
            mend()
            recovers(query, handler)

        # 1. an input vacuumed under the job (data): its files moved away, then back
        aside = tmp_path / "aside"
        aside.mkdir()
        moved: list[tuple[Path, Path]] = []

        def vacuum_inputs() -> None:
            for live in _live_files(broken):
                moved.append((live, aside / live.name))
                shutil.move(live, aside / live.name)

        breaks(ErrorKind.DATA, vacuum_inputs, lambda: [shutil.move(a, live) for live, a in moved])

        # 2. an input that is not Parquet (data): a live file overwritten, then put back
        kept: dict[Path, bytes] = {}

        def corrupt_inputs() -> None:
            for live in _live_files(broken):
                kept[live] = live.read_bytes()
                live.write_bytes(b"not parquet at all")

        breaks(ErrorKind.DATA, corrupt_inputs, lambda: [path.write_bytes(data) for path, data in kept.items()])

        # 3. the cluster key names a column the table does not have (table): then set right again
        breaks(
            ErrorKind.TABLE,
            lambda: set_table_properties(broken, {CLUSTER_BY_PROPERTY: "no_such_column"}),
            lambda: set_table_properties(broken, {CLUSTER_BY_PROPERTY: "k"}),
        )
        time.sleep(0.5)
        append_everywhere(query)
    assert [kind for kind, _ in broken_ways] == ["data", "data", "table"], broken_ways
    for table, rows in appended.items():
        assert row_multiset(DeltaTable(str(table)).to_pyarrow_table()) == row_multiset(pa.concat_tables(rows))


def test_the_metrics_record_of_a_failed_table_says_what_failed_and_when_it_is_retried() -> None:
    from recluster.core.metrics import clustering_info
    from recluster.engine.failures import failed_record, failed_status

    failure = FailureBook(10, 60).failed("s3://lake/t", FileNotFoundError(errno.ENOENT, "part-1.parquet"), now=1e9)
    record = failed_record(failure, -1, clustering_info([]))
    assert record.failure is not None and record.failure.kind == "data" and record.failure.attempts == 1
    assert record.failure.retry_at.timestamp() == 1e9 + 10
    assert record.errors == [f"data: {failure.message}"] and record.pending
    status = failed_status(failure, None)
    assert status.to_dict()["error_kind"] == "data" and "part-1.parquet" in (status.error or "")


def test_a_failure_book_survives_pickling_as_spark_ships_a_source_that_holds_one() -> None:
    import pickle

    book = FailureBook(1, 30)
    book.failed("t", OSError("x"), now=0)
    copy = pickle.loads(pickle.dumps(book))
    assert copy.get("t") == book.get("t") and copy.failed("t", OSError("x"), now=0).attempts == 2


def test_a_storage_error_while_estimating_is_logged_and_the_estimate_thread_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from recluster.engine import estimate
    from recluster.engine.optimizer import history_store
    from recluster.settings import Settings
    from recluster.settings_job import StreamSettings

    def unreachable(uri: str, **kwargs: Any) -> Any:
        raise OSError(errno.ECONNRESET, "Generic S3 error: connection reset by peer")

    monkeypatch.setattr(estimate, "estimate_table", unreachable)
    settings = Settings(stream=StreamSettings(checkpoint_location=str(tmp_path / "checkpoint")))
    store = history_store(settings)
    assert estimate.record_estimate(str(tmp_path / "t"), settings=settings, store=store) is None
