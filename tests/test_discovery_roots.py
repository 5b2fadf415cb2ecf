"""Storage roots (engine/discovery.py RootScanner): every Delta table below a prefix, on local disk and on the S3
emulator, found within a per-pass listing budget and a depth; a root that does not exist is one clear line."""

from __future__ import annotations

import itertools
import logging
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from recluster.core.errors import TableError
from recluster.core.leases import Claim
from recluster.delta.log_writer import set_table_properties
from recluster.delta.snapshot import open_table
from recluster.engine.claimed_order import ClaimedOrder
from recluster.engine.discovery import RECHECK_EVERY_SWEEPS, FoundTable, RootScanner, SourceScan
from recluster.engine.handler import ReclusterHandler
from recluster.engine.job_discovery import EXPIRY_MARGIN_SECONDS, SWEEP_PAUSE_SECONDS, JobDiscovery
from recluster.engine.leases import JobLeases
from recluster.settings import Settings
from recluster.settings_discovery import DiscoverySettings, LeaseSettings, StorageRoot
from tests.helpers import main_json
from tests.s3_server import S3Server

LAYOUT = ("a", "x/b", "x/y/c", "x/y/z/too_deep")


def make_tables(root: str, options: dict[str, str] | None = None) -> None:
    for name in LAYOUT:
        write_deltalake(f"{root}/{name}", pa.table({"v": pa.array([1], pa.int64())}), storage_options=options)
    set_table_properties(f"{root}/a", {"recluster.policy": "levels"}, options)


def full_sweep(scanner: RootScanner, passes: int) -> list[tuple[bool, list[str]]]:
    return [
        (scan.complete, sorted(t.uri.removeprefix(scanner.uri + "/") for t in scan.tables))
        for scan in (scanner.scan() for _ in range(passes))
    ]


def test_a_root_is_swept_within_its_listing_budget_and_depth(tmp_path: Path) -> None:
    make_tables(str(tmp_path))
    (tmp_path / "empty" / "deeper").mkdir(parents=True)
    scanner = RootScanner(StorageRoot(uri=str(tmp_path), max_depth=3, max_listings=2), Settings())
    passes = full_sweep(scanner, 5)
    # 9 listings, 2 a pass: root | a, x, empty | x/b, x/y, empty/deeper | x/y/c, x/y/z (x/y/z/too_deep: depth 4)
    assert [complete for complete, _ in passes] == [False, False, False, False, True]
    assert passes[-1][1] == ["a", "x/b", "x/y/c"]
    assert all(set(before) <= set(after) for (_, before), (_, after) in itertools.pairwise(passes))
    assert full_sweep(scanner, 1) == [(False, ["a", "x/b", "x/y/c"])]  # a new sweep shows the last one meanwhile


def test_a_table_below_a_root_inherits_the_roots_properties_and_a_filter_selects_on_them(tmp_path: Path) -> None:
    make_tables(str(tmp_path))
    root = StorageRoot(
        uri=str(tmp_path),
        max_depth=2,
        where={"recluster.policy": "levels"},
        properties={"recluster.clusterBy": "v"},
    )
    (table,) = RootScanner(root, Settings()).scan().tables  # x/b inherits no policy: filtered out
    assert table.uri == f"{tmp_path}/a"
    assert table.settings.cluster_by == ["v"]
    assert [layer.origin for layer in table.layers] == [f"root {tmp_path}"]


def test_a_root_on_the_s3_emulator(s3: S3Server) -> None:
    root = s3.table_uri("warehouse")
    make_tables(root, s3.options())
    scanner = RootScanner(StorageRoot(uri=root + "/", max_depth=3, storage_options=s3.options()), Settings())
    assert full_sweep(scanner, 1) == [(True, ["a", "x/b", "x/y/c"])]


def test_a_sweep_reads_only_the_commits_since_the_last(s3: S3Server) -> None:
    """The second sweep of unchanged tables costs one request a table (a GET of its next commit file, absent: 404),
    no log replay; a property set since (a new commit) is read from that commit at the next sweep, one GET."""
    root = s3.table_uri("warehouse")
    make_tables(root, s3.options())
    scanner = RootScanner(
        StorageRoot(uri=root + "/", max_depth=3, storage_options=s3.options(), where={"recluster.policy": "levels"}),
        Settings(),
    )
    assert full_sweep(scanner, 1) == [(True, ["a"])]
    prefix = root.removeprefix(f"s3://{s3.bucket}/")

    def log_reads(before: int) -> list[str]:
        lines = s3.requests()[before:]
        return sorted(line.split(" HTTP/")[0] for line in lines if f"{prefix}/" in line and "_delta_log" in line)

    def commit_reads(*versions: tuple[str, int, str]) -> list[str]:
        return sorted(f"{method} /{s3.bucket}/{prefix}/{name}/_delta_log/{v:020d}.json" for name, v, method in versions)

    before = len(s3.requests())
    assert full_sweep(scanner, 1) == [(True, ["a"])]
    assert log_reads(before) == commit_reads(("a", 2, "GET"), ("x/b", 1, "GET"), ("x/y/c", 1, "GET"))  # absent
    set_table_properties(f"{root}/x/b", {"recluster.policy": "levels"}, s3.options())
    before = len(s3.requests())
    assert full_sweep(scanner, 1) == [(True, ["a", "x/b"])]
    assert log_reads(before) == commit_reads(("a", 2, "GET"), ("x/b", 1, "GET"), ("x/b", 2, "GET"), ("x/y/c", 1, "GET"))


def test_a_known_table_is_listed_once_in_ten_sweeps_and_a_removed_one_is_let_go(s3: S3Server) -> None:
    """After the first sweep, a sweep lists the folders that hold no table every time and each table's folder at one
    sweep in RECHECK_EVERY_SWEEPS: 10 sweeps of the 3 tables and 4 other folders (root, x, x/y, x/y/z) are 43 LISTs,
    not 70. A table whose objects are all gone is let go at the next sweep; one whose `_delta_log/` alone is gone,
    by the sweep that lists it."""
    root = s3.table_uri("warehouse")
    make_tables(root, s3.options())
    scanner = RootScanner(StorageRoot(uri=root + "/", max_depth=3, storage_options=s3.options()), Settings())
    assert full_sweep(scanner, 1) == [(True, ["a", "x/b", "x/y/c"])]
    prefix = root.removeprefix(f"s3://{s3.bucket}/")

    def listed(before: int) -> list[str]:
        lines = [line.split(" HTTP/")[0] for line in s3.requests()[before:] if "list-type=2" in line]
        return [line.split(f"prefix={prefix}/", 1)[1] if f"prefix={prefix}/" in line else "" for line in lines]

    before = len(s3.requests())
    assert full_sweep(scanner, RECHECK_EVERY_SWEEPS) == [(True, ["a", "x/b", "x/y/c"])] * RECHECK_EVERY_SWEEPS
    folders = listed(before)
    assert len(folders) == 4 * RECHECK_EVERY_SWEEPS + 3
    assert [folders.count(table) for table in ("a/", "x/b/", "x/y/c/")] == [1, 1, 1]
    assert {folder: folders.count(folder) for folder in ("", "x/", "x/y/", "x/y/z/")} == dict.fromkeys(
        ("", "x/", "x/y/", "x/y/z/"), RECHECK_EVERY_SWEEPS
    )
    client = s3.client()
    for gone in ("a/", "x/b/_delta_log/"):
        for item in client.list_objects_v2(Bucket=s3.bucket, Prefix=f"{prefix}/{gone}")["Contents"]:
            client.delete_object(Bucket=s3.bucket, Key=item["Key"])
    assert full_sweep(scanner, 1)[0][1] in (["x/b", "x/y/c"], ["x/y/c"])
    assert full_sweep(scanner, RECHECK_EVERY_SWEEPS)[-1][1] == ["x/y/c"]


def test_taking_over_a_dead_jobs_table_on_an_object_store_is_one_request(s3: S3Server) -> None:
    """A takeover claims thousands of tables at once: the dead job's holdings are read once (one GET), then each of its
    tables is claimed with one conditional create of the claim after the one it held."""
    leases = LeaseSettings(root=s3.table_uri("leases"), ttl_seconds=1, renew_seconds=0.5)
    tables = [f"s3://{s3.bucket}/lake/t{index}" for index in range(4)]
    dead = JobLeases(leases, s3.options(), job="dead")
    dead.beat()
    assert len(dead.run_pass(tables, lambda uri: None).taken) == 4
    dead.beat()  # its heartbeat says it owns tables
    time.sleep(1.2)  # its heartbeat expires
    survivor = JobLeases(leases, s3.options(), job="survivor")
    survivor.beat()
    prefix = leases.root.removeprefix(f"s3://{s3.bucket}/")
    before = len(s3.requests())
    assert len(survivor.run_pass(tables, lambda uri: None).taken) == 4
    claims = [line for line in s3.requests()[before:] if f"{prefix}/tables/" in line or f"{prefix}/holdings/" in line]
    methods = sorted(line.split()[0] + (" holdings" if "/holdings/" in line else "") for line in claims)
    assert methods == ["GET holdings"] + ["PUT"] * 4 + ["PUT holdings"], claims
    assert {survivor.store.latest_claim(table) for table in tables} == {Claim(t, 1, "survivor") for t in tables}
    survivor.store.forget_job("dead")  # long dead: its heartbeat and holdings deleted
    assert sorted(survivor.store.heartbeats()[0]) == ["survivor"] and survivor.store.holdings("dead") is None


def test_a_table_opened_for_its_properties_is_taken_up_with_one_request_when_unchanged(s3: S3Server) -> None:
    """A take-up starts from the table as discovery opened it for its properties: one request for its next commit
    file, and a listing after its version only when there is one (a takeover takes up thousands of tables)."""
    uri = s3.table_uri("opened")
    write_deltalake(uri, pa.table({"v": pa.array([1], pa.int64())}), storage_options=s3.options())
    opened = DeltaTable(uri, storage_options=s3.options())
    prefix = uri.removeprefix(f"s3://{s3.bucket}/")
    before = len(s3.requests())
    assert open_table(uri, s3.options(), opened).version() == 0
    assert [line.split()[0] for line in s3.requests()[before:] if f"/{prefix}/" in line] == ["HEAD"]
    write_deltalake(uri, pa.table({"v": pa.array([2], pa.int64())}), mode="append", storage_options=s3.options())
    assert open_table(uri, s3.options(), opened).version() == 1  # a commit since: brought up to date


def test_a_job_reads_the_properties_of_the_tables_it_holds_only_and_of_one_as_it_claims_it(s3: S3Server) -> None:
    """Jobs sharing a root: every sweep lists every table (the jobs split them all, whatever their properties), but
    reads the log of the tables this job holds only ("a": its next commit probed at every sweep, a property set on
    it seen at the next); the others' logs are never read, until this job claims one ("x/b"): `open_claimed` reads
    it then, once a sweep."""
    root = s3.table_uri("warehouse")
    make_tables(root, s3.options())
    held = {f"{root}/a"}
    scanner = RootScanner(
        StorageRoot(uri=root + "/", max_depth=3, storage_options=s3.options(), where={"recluster.policy": "levels"}),
        Settings(),
        owns=lambda uri: uri in held,
    )
    prefix = root.removeprefix(f"s3://{s3.bucket}/")

    def log_requests(before: int, table: str) -> int:
        return sum(f"/{prefix}/{table}/_delta_log/" in line for line in s3.requests()[before:])

    before = len(s3.requests())
    scan = scanner.scan()
    assert scan.complete and [t.uri for t in scan.tables] == [f"{root}/a"]
    assert scan.listed == tuple(f"{root}/{name}" for name in ("a", "x/b", "x/y/c"))
    assert [log_requests(before, table) for table in ("x/b", "x/y/c")] == [0, 0]  # their folders listed, no log read
    before = len(s3.requests())
    assert full_sweep(scanner, RECHECK_EVERY_SWEEPS) == [(True, ["a"])] * RECHECK_EVERY_SWEEPS
    assert [log_requests(before, table) for table in ("a", "x/b", "x/y/c")] == [RECHECK_EVERY_SWEEPS, 0, 0]
    set_table_properties(f"{root}/a", {"recluster.policy": "absorb"}, s3.options())
    set_table_properties(f"{root}/x/b", {"recluster.policy": "levels"}, s3.options())
    assert full_sweep(scanner, 1) == [(True, [])]  # "a" filtered out at once; "x/b" another job's
    held.add(f"{root}/x/b")  # claimed: read now (opened: no probe for a next commit), not again before the next sweep
    before = len(s3.requests())
    assert [t.uri for t in open_claimed(scanner, held)] == [f"{root}/x/b"]
    version = DeltaTable(f"{root}/x/b", storage_options=s3.options()).version()
    assert not [line for line in s3.requests()[before:] if f"/x/b/_delta_log/{version + 1:020d}.json" in line]
    before = len(s3.requests())
    assert open_claimed(scanner, held) == [] and len(s3.requests()) == before
    assert full_sweep(scanner, 1) == [(True, ["x/b"])]


def open_claimed(scanner: RootScanner, claimed: set[str]) -> list[FoundTable]:
    order = ClaimedOrder(memory_seconds=0.0)
    order.claim(scanner.unread_claims(sorted(claimed)))
    return scanner.open_claimed(order)


def test_a_found_table_is_taken_up_from_the_table_its_properties_were_read_from(s3: S3Server) -> None:
    """A job's pass reads a new table's properties by opening it and hands that table to its take-up, which brings it
    up to date (a listing after its version) instead of opening it again: one read of its log, not two. A commit in
    between is in the state taken up."""
    root = s3.table_uri("handed")
    names = ["t0", "t1", "t2"]
    for name in names:
        for value in range(3):
            write_deltalake(
                f"{root}/{name}",
                pa.table({"k": pa.array([value], pa.int64())}),
                mode="append",
                storage_options=s3.options(),
            )
    where = StorageRoot(
        uri=root + "/", max_depth=1, storage_options=s3.options(), properties={"recluster.clusterBy": "k"}
    )
    settings = Settings(discovery=DiscoverySettings(roots=[where]))
    handler = ReclusterHandler(settings, settings.tables, spark=None)

    writer_reads = []

    def take_up(table: FoundTable) -> int:
        if table.uri.endswith("/t2"):  # a commit after its properties were read (the writer's reads set apart)
            before = len(s3.requests())
            write_deltalake(
                table.uri, pa.table({"k": pa.array([9], pa.int64())}), mode="append", storage_options=s3.options()
            )
            writer_reads.append(first_commit_reads("t2", before))
        return handler.take_up_found(table)

    prefix = root.removeprefix(f"s3://{s3.bucket}/")

    def first_commit_reads(name: str, since: int) -> int:  # an open reads every commit; an update only newer ones
        return sum(f"/{prefix}/{name}/_delta_log/{0:020d}.json" in line for line in s3.requests()[since:])

    before = len(s3.requests())
    DeltaTable(f"{root}/t0", storage_options=s3.options())
    one_open = first_commit_reads("t0", before)
    discovery = JobDiscovery(settings, None, frozenset(), take_up, handler.let_go, None)
    before = len(s3.requests())
    assert sorted(discovery.run_pass().added) == [f"{root}/{name}" for name in names]
    assert [first_commit_reads(name, before) for name in names] == [one_open, one_open, one_open + writer_reads[0]]
    assert {uri: tracked.version for uri, tracked in handler.tracked.items()} == {
        f"{root}/t0": 2,
        f"{root}/t1": 2,
        f"{root}/t2": 3,
    }
    assert sum(block.live_rows for block in handler.tracked[f"{root}/t2"].state.blocks) == 4


def test_an_unreadable_table_is_one_line_and_the_roots_other_tables_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    make_tables(str(tmp_path))
    scanner = RootScanner(StorageRoot(uri=str(tmp_path), max_depth=3), Settings())
    assert full_sweep(scanner, 1) == [(True, ["a", "x/b", "x/y/c"])]
    (tmp_path / "x/b/_delta_log/00000000000000000001.json").write_text("{not json\n")  # found before: kept
    (tmp_path / "d/_delta_log").mkdir(parents=True)  # new and unreadable (no commit): waits for the next sweep
    (tmp_path / "d/_delta_log/00000000000000000000.json").write_text("{not json\n")
    with caplog.at_level(logging.ERROR, logger="recluster.discovery"):
        assert full_sweep(scanner, 1) == [(True, ["a", "x/b", "x/y/c"])]
    lines = sorted(r.getMessage() for r in caplog.records if "reason=unreadable_table" in r.getMessage())
    assert [line.split(" reason=")[0] for line in lines] == [
        f"recluster table={tmp_path}/d",
        f"recluster table={tmp_path}/x/b",
    ]
    assert all("\n" not in line for line in lines)


def test_a_first_pass_takes_up_every_found_table_several_at_a_time(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    uris = [f"{lake}/t{index:02d}" for index in range(24)]
    for index, uri in enumerate(uris):
        write_deltalake(uri, pa.table({"k": pa.array(range(index, index + 10), pa.int64())}))
        if index % 3 == 0:
            write_deltalake(uri, pa.table({"k": pa.array([index], pa.int64())}), mode="append")
    settings = Settings(
        discovery=DiscoverySettings(
            roots=[StorageRoot(uri=str(lake), max_depth=1, properties={"recluster.clusterBy": "k"})], threads=8
        )
    )
    handler = ReclusterHandler(settings, settings.tables, spark=None)
    discovery = JobDiscovery(settings, None, frozenset(), handler.take_up_found, handler.let_go, None)
    changes = discovery.run_pass()
    assert sorted(changes.added) == uris
    assert discovery.versions == {uri: 1 if index % 3 == 0 else 0 for index, uri in enumerate(uris)}
    assert {uri: (status.version, status.error) for uri, status in handler.status.items()} == {
        uri: (version, None) for uri, version in discovery.versions.items()
    }
    assert {uri: tracked.key.names for uri, tracked in handler.tracked.items()} == dict.fromkeys(uris, ("k",))


def test_an_unfinished_sweep_goes_on_at_the_next_pass_without_waiting_for_the_interval(tmp_path: Path) -> None:
    for index in range(6):
        write_deltalake(tmp_path / f"t{index}", pa.table({"k": pa.array([index], pa.int64())}))
    root = StorageRoot(uri=str(tmp_path), max_depth=1, max_listings=2, properties={"recluster.clusterBy": "k"})
    settings = Settings(discovery=DiscoverySettings(interval_seconds=300, roots=[root]))
    handler = ReclusterHandler(settings, settings.tables, spark=None)
    discovery = JobDiscovery(settings, None, frozenset(), handler.take_up_found, handler.let_go, None)
    found, periods = [], []
    for _ in range(5):  # 7 listings (the root, then each table's folder), 2 a pass
        discovery.run_pass()
        found.append(len(discovery.found_by))
        periods.append(discovery.period())
    assert found == [1, 3, 5, 6, 6]  # each pass swept on; the fifth waits for the interval
    assert periods == [SWEEP_PAUSE_SECONDS] * 3 + [300.0] * 2


def test_claimed_tables_are_taken_up_as_their_properties_are_read_from_the_tables_as_opened(tmp_path: Path) -> None:
    """A takeover claims thousands of tables: each is taken up as soon as its properties are read (the reads are the
    store's work, the take-ups the job's: they overlap), in the pass that claims it, from the table as opened for
    its properties (opening one again reads its whole log twice over)."""
    lake = tmp_path / "lake"
    for index in range(10):
        write_deltalake(lake / f"t{index}", pa.table({"k": pa.array([index], pa.int64())}))
    leases = LeaseSettings(root=str(tmp_path / "leases"), ttl_seconds=4, renew_seconds=2)
    root = StorageRoot(uri=str(lake), max_depth=1, properties={"recluster.clusterBy": "k"})
    settings = Settings(discovery=DiscoverySettings(roots=[root], leases=leases, threads=2))
    read, handed_over = [], []
    discovery = JobDiscovery(
        settings, None, frozenset(), lambda t: handed_over.append(t.opened) or 0, lambda uri: None, None
    )
    (scanner,) = discovery.scanners
    properties_get = scanner.properties.get
    scanner.properties.get = lambda uri, options: read.append(len(handed_over)) or properties_get(uri, options)  # type: ignore[method-assign]
    assert discovery.leases is not None
    discovery.leases.beat()
    discovery.run_pass()
    assert len(discovery.found_by) == 10 and len(discovery.leases.held) == 10 and not discovery.deferred
    assert read[-1] > 0  # the first take-ups began before the last table was read
    assert all(isinstance(opened, DeltaTable) for opened in handed_over) and len(handed_over) == 10


def enabled_later(tmp_path: Path, count: int, threads: int, interval: float) -> tuple[Settings, list[str]]:
    """`count` tables on a root whose filter (`recluster.policy: levels`) none passes yet, and a job's settings
    with leases on it: its first pass claims them all and takes none up; enable them, and its next sweep finds
    them all at once."""
    lake = tmp_path / "lake"
    for index in range(count):
        write_deltalake(lake / f"t{index}", pa.table({"k": pa.array([index], pa.int64())}))
    leases = LeaseSettings(root=str(tmp_path / "leases"), ttl_seconds=4, renew_seconds=2)
    root = StorageRoot(
        uri=str(lake), max_depth=1, properties={"recluster.clusterBy": "k"}, where={"recluster.policy": "levels"}
    )
    settings = Settings(
        discovery=DiscoverySettings(roots=[root], leases=leases, threads=threads, interval_seconds=interval)
    )
    return settings, [str(lake / f"t{index}") for index in range(count)]


def enable(tables: list[str]) -> None:
    for uri in tables:
        set_table_properties(uri, {"recluster.policy": "levels"}, None)


def test_tables_left_to_take_up_when_a_pass_is_out_of_time_are_taken_up_at_once(tmp_path: Path) -> None:
    """With leases a pass takes up the tables a sweep found for half a renewal (the lease passes must go on); the
    tables it could not start are taken up by the next pass, after SWEEP_PAUSE_SECONDS rather than a whole
    renewal."""
    settings, tables = enabled_later(tmp_path, 10, threads=2, interval=300)

    def slow_take_up(table: FoundTable) -> int:
        time.sleep(0.3)
        return 0

    discovery = JobDiscovery(settings, None, frozenset(), slow_take_up, lambda uri: None, None)
    assert discovery.leases is not None
    discovery.leases.beat()
    discovery.run_pass()
    assert len(discovery.leases.held) == 10 and discovery.found_by == {}  # claimed, filtered out
    enable(tables)
    discovery.scanned_at = -float("inf")  # a sweep due: it finds them all at once
    taken, periods = [], []
    for _ in range(3):
        discovery.leases.beat()
        discovery.run_pass()
        taken.append(len(discovery.found_by))
        periods.append(discovery.period())
    assert 0 < taken[0] < 10 and taken[1:] == [10, 10]  # a second of 0.3 s take-ups, 2 at a time
    assert periods == [SWEEP_PAUSE_SECONDS, 2.0, 2.0]


def test_a_due_sweep_waits_until_the_tables_waiting_to_be_taken_up_are(tmp_path: Path) -> None:
    """A sweep reads every owned table's next commit file: on a big root, minutes of requests. Due while tables wait
    to be taken up, it waits for them; then it runs at the next pass."""
    settings, tables = enabled_later(tmp_path, 6, threads=1, interval=0.01)

    def slow_take_up(table: FoundTable) -> int:
        time.sleep(0.4)
        return 0

    discovery = JobDiscovery(settings, None, frozenset(), slow_take_up, lambda uri: None, None)
    assert discovery.leases is not None
    real_scans, swept, waiting = discovery.scans, [], []

    def counted_scans() -> list[SourceScan]:
        swept.append(len(waiting) - 1)  # the index of the pass that sweeps
        return real_scans()

    discovery.scans = counted_scans  # type: ignore[method-assign]
    for index in range(6):
        if index == 1:
            enable(tables)
        discovery.leases.beat()
        waiting.append(discovery.deferred)
        discovery.run_pass()
    assert waiting[:3] == [False, False, True] and len(discovery.found_by) == 6
    assert all(not waiting[index] for index in swept)  # no pass that began with take-ups waiting swept
    assert swept[:2] == [0, 1] and len(swept) >= 3  # then one after every table was taken up


def test_a_pass_follows_right_after_another_owners_heartbeat_expires_and_takes_its_tables(tmp_path: Path) -> None:
    """A job that stops beating is dead `ttl_seconds` after its last heartbeat: the survivor's next lease pass comes
    then (plus EXPIRY_MARGIN_SECONDS), not up to a renewal later, and claims the dead job's tables."""
    lake = tmp_path / "lake"
    for index in range(6):
        write_deltalake(lake / f"t{index}", pa.table({"k": pa.array([index], pa.int64())}))
    leases = LeaseSettings(root=str(tmp_path / "leases"), ttl_seconds=6, renew_seconds=3)
    root = StorageRoot(uri=str(lake), max_depth=1, properties={"recluster.clusterBy": "k"})
    settings = Settings(discovery=DiscoverySettings(roots=[root], leases=leases))
    other = JobLeases(leases, {}, job="other")
    other.beat()
    other.run_pass([str(lake / f"t{index}") for index in range(6)], lambda uri: None)  # alone: it owns all six
    other.beat()
    died = time.time()  # no heartbeat from it after this
    survivor = JobDiscovery(settings, None, frozenset(), lambda table: 0, lambda uri: None, None)
    assert survivor.leases is not None
    survivor.leases.beat()
    survivor.run_pass()
    assert len(survivor.found_by) == 0  # the other job holds all six and lives (it would release three)
    assert survivor.period() == leases.renew_seconds  # its expiry is further away than a renewal
    time.sleep(max(died + leases.ttl_seconds - leases.renew_seconds + EXPIRY_MARGIN_SECONDS + 0.3 - time.time(), 0))
    survivor.leases.beat()
    survivor.run_pass()
    assert len(survivor.found_by) == 0
    wait = survivor.period()
    assert wait < leases.renew_seconds
    assert wait == pytest.approx(died + leases.ttl_seconds + EXPIRY_MARGIN_SECONDS - time.time(), abs=0.1)
    time.sleep(wait)
    survivor.run_pass()
    assert len(survivor.found_by) == 6  # the dead job's, claimed at the first pass after its expiry
    assert survivor.leases.next_expiry is None


def test_a_root_that_does_not_exist_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(TableError, match=f"^storage root {tmp_path}/nope does not exist$"):
        RootScanner(StorageRoot(uri=str(tmp_path / "nope")), Settings()).scan()


def test_status_lists_the_tables_under_a_root_with_where_each_setting_came_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lake = tmp_path / "lake"
    make_tables(str(lake))  # a: recluster.policy=levels of its own
    config = tmp_path / "recluster.yaml"
    config.write_text(
        f"discovery:\n  roots:\n    - uri: {lake}\n      max_depth: 2\n"
        "      properties: {recluster.clusterBy: v, recluster.policy: absorb}\n"
        f"self_optimizing:\n  history_location: {tmp_path / 'history'}\n"
    )
    reports = {r["table"]: r for r in main_json(capsys, "status", "--config", config)}
    assert sorted(reports) == [f"{lake}/a", f"{lake}/x/b"]
    root = f"root {lake}"
    assert reports[f"{lake}/a"]["settings"] == [
        {"key": "recluster.clusterBy", "value": "v", "origin": root},
        {"key": "recluster.policy", "value": "levels", "origin": "table"},
    ]
    assert reports[f"{lake}/x/b"]["settings"][1] == {"key": "recluster.policy", "value": "absorb", "origin": root}
