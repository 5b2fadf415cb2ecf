"""`recluster advise`'s pure part and its event-log reader, without a JVM (docs/advise.md): Spark's filter text
parsed, scans and their metrics taken from events, files read on a layout against a brute-force oracle, candidate
keys, and event log files (zstd, lz4 and snappy as Spark frames them) with a malformed or cut-short file reported
in one line while the others are read. tests/test_advise.py runs it on event logs of real Delta Spark runs."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
from hypothesis import given, settings
from hypothesis import strategies as st

from recluster.core.advice.filters import Predicate, PredicateShape, scan_predicates
from recluster.core.advice.layouts import Layout, files_read, simulated_layout
from recluster.core.advice.ranking import CandidateKey, Confidence, candidate_keys, workloads
from recluster.core.advice.scans import delta_scans
from recluster.engine.advise import read_scans, table_uri
from tests.event_log_files import execution, lz4_java, snappy_java

EQ, IN, RANGE, PREFIX = PredicateShape.EQUALITY, PredicateShape.IN, PredicateShape.RANGE, PredicateShape.PREFIX


def test_spark_filter_text_becomes_predicates() -> None:
    pushed = "[IsNotNull(b), GreaterThanOrEqual(b,10), LessThanOrEqual(b,20), In(a, [1,2,3]), EqualTo(s,17)]"
    assert set(scan_predicates(pushed)) == {
        Predicate("b", RANGE, low="10", high="20"),
        Predicate("a", IN, ("1", "2", "3")),
        Predicate("s", EQ, ("17",)),
    }
    assert scan_predicates("[Or(EqualTo(a,1),EqualTo(a,2)), StringStartsWith(s,ab), Not(EqualTo(c,1))]") == (
        Predicate("a", IN, ("1", "2")),
        Predicate("s", PREFIX, ("ab",)),
    )
    assert scan_predicates("[Or(EqualTo(a,1),EqualTo(b,2))]") == ()  # across columns: prunes nothing here
    assert scan_predicates("[]", "[isnotnull(p#12), (p#12 = 3), q#4L IN (1,2), (d#7 > 2024-01-01)]") == (
        Predicate("p", EQ, ("3",)),
        Predicate("q", IN, ("1", "2")),
        Predicate("d", RANGE, low="2024-01-01"),
    )


def test_scans_of_delta_tables_with_their_metrics_and_delta_own_reads_left_out() -> None:
    events = [
        *execution(1, "PreparedDeltaFileIndex(1 paths)[file:/t]", 3),
        *execution(2, "DeltaLogFileIndex(1 paths)[file:/t/_delta_log/0.json]", 1, "Scan json"),
        *execution(3, "InMemoryFileIndex(1 paths)[file:/plain-parquet]", 9),
        *execution(4, "PreparedDeltaFileIndex(1 paths)[file:/t]", 2, "Scan parquet spark_catalog.db.t"),
        execution(5, "PreparedDeltaFileIndex(1 paths)[file:/t]", 7)[0],  # a cut-short log: no metrics, no end
    ]
    scans = list(delta_scans(events))
    assert [(s.location, s.name, s.files_read, s.bytes_read) for s in scans] == [
        ("file:/t", None, 3, 300),
        ("file:/t", "spark_catalog.db.t", 2, 200),
        ("file:/t", None, None, None),
    ]
    found = workloads(scans, {"file:/t": table_uri("file:/t")})["/t"]
    assert found.queries == 3 and found.names == ("spark_catalog.db.t",) and found.files_read is None
    assert found.column_use() == {"a": 3} and found.confidence is Confidence.LOW


def oracle(rows: list[tuple[int, int]], files: int, predicates: list[Predicate]) -> int:
    """Files read, by hand: rows cut in equal runs, each run's min/max held against every predicate."""
    edges = [i * len(rows) // files for i in range(files + 1)]
    read = 0
    for start, stop in itertools.pairwise(edges):
        run = rows[start:stop]
        if not run:
            continue
        ok = True
        for p in predicates:
            values = [r[0 if p.column == "a" else 1] for r in run]
            low, high = min(values), max(values)
            if p.shape in (EQ, IN):
                ok &= any(low <= int(v) <= high for v in p.values)
            else:
                ok &= (p.low is None or high >= int(p.low)) and (p.high is None or low <= int(p.high))
        read += ok
    return read


predicates = st.lists(
    st.one_of(
        st.builds(lambda c, v: Predicate(c, EQ, (str(v),)), st.sampled_from("ab"), st.integers(-5, 60)),
        st.builds(
            lambda c, vs: Predicate(c, IN, tuple(map(str, vs))),
            st.sampled_from("ab"),
            st.lists(st.integers(-5, 60), min_size=1, max_size=3),
        ),
        st.builds(
            lambda c, lo, hi: Predicate(
                c, RANGE, low=None if lo is None else str(lo), high=None if hi is None else str(hi)
            ),
            st.sampled_from("ab"),
            st.none() | st.integers(-5, 60),
            st.none() | st.integers(-5, 60),
        ),
    ),
    max_size=3,
)


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), min_size=1, max_size=80),
    files=st.integers(1, 12),
    chosen=predicates,
)
def test_files_read_on_a_simulated_layout_match_the_oracle(rows, files, chosen) -> None:
    table = pa.table({"a": [r[0] for r in rows], "b": [r[1] for r in rows]})
    layout = simulated_layout(table, files, ["a", "b"])
    assert files_read(layout, chosen) == oracle(rows, min(files, len(rows)), chosen)


def test_files_without_stats_are_read_and_unconvertible_literals_prune_nothing() -> None:
    layout = Layout(3, {"a": pa.array([0, None, 20])}, {"a": pa.array([9, None, 29])})
    assert files_read(layout, [Predicate("a", EQ, ("5",))]) == 2  # the first, and the one without stats
    assert files_read(layout, [Predicate("a", EQ, ("x",))]) == 3
    assert files_read(layout, [Predicate("z", EQ, ("5",))]) == 3


def test_candidates_are_the_used_columns_alone_then_together_on_a_curve_and_the_current_key() -> None:
    found = candidate_keys({"a": 21, "b": 4, "s": 2, "gone": 9}, ("d",), ["a", "b", "s", "d"])
    assert [str(c) for c in found] == [
        "linear(a)",
        "linear(b)",
        "linear(s)",
        "curve(a, b)",
        "curve(a, b, s)",
        "linear(d)",
    ]
    assert CandidateKey(("a",), False) in found


def test_event_log_files_in_every_codec_and_bad_ones_one_line_each(tmp_path: Path) -> None:
    text = "".join(json.dumps(e) + "\n" for e in execution(1, "PreparedDeltaFileIndex(1 paths)[file:/t]", 3)).encode()
    rolled = tmp_path / "eventlog_v2_app-1"
    rolled.mkdir()
    (rolled / "events_1_app-1.zstd").write_bytes(pa.compress(text, "zstd", asbytes=True))
    (rolled / "appstatus_app-1").write_bytes(b"")
    (tmp_path / "app-2.lz4").write_bytes(lz4_java(text))
    (tmp_path / "app-3.snappy").write_bytes(snappy_java(text))
    (tmp_path / "app-4").write_bytes(text)
    (tmp_path / "app-5.inprogress").write_bytes(text + text[:40])  # cut short mid-line: its first query counts
    (tmp_path / "app-6.lz4").write_bytes(lz4_java(text)[:50])
    (tmp_path / "app-7").write_bytes(b"not json\n")
    scans, problems, files = read_scans([str(tmp_path)], {})
    assert files == 7 and len(scans) == 5
    assert sorted(p.split(": ", 1)[1] for p in problems) == [
        "cut short at its last line (JSONDecodeError)",
        "line 1 is not a Spark listener event",
        "lz4: cut short inside a block",
    ]
    assert all(p.startswith(f"event log {tmp_path}/app-") for p in problems)
    local = pafs.LocalFileSystem()
    assert local.get_file_info(str(tmp_path)).type == pafs.FileType.Directory
