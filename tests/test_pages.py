"""The status pages without a browser: escaping, 404s, and the JSON API against `recluster status --json`."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from jobs.fleet_page import fleet_section
from jobs.health import HealthServer
from jobs.pages import PageSource, render_index, snapshot_views
from recluster.engine.optimizer import history_store
from recluster.settings import Settings
from recluster.settings_job import HttpSettings
from tests.helpers import append_random, main_json

SCRIPT_NAME = "x<script>alert(1)</script>"


@pytest.fixture
def tables(tmp_path: Path) -> list[Path]:
    rng = np.random.default_rng(3)
    paths = [tmp_path / "events", tmp_path / SCRIPT_NAME]
    for path in paths:
        for batch in range(6):
            append_random(path, rng, batch, rows=500)
    return paths


@pytest.fixture
def served(tables: list[Path], tmp_path: Path, capsys: Any) -> Iterator[tuple[str, Settings]]:
    history = f"self_optimizing.history_location={tmp_path / 'history'}"
    main_json(capsys, "optimize", str(tables[0]), "--type", "full", "--set", history)
    settings = Settings(self_optimizing={"history_location": str(tmp_path / "history")})  # type: ignore[arg-type]
    store = history_store(settings)
    uris = [str(t) for t in tables]
    server = HealthServer(
        HttpSettings(port=0), pages=PageSource(lambda only: snapshot_views(uris, settings, store, only))
    ).start()
    try:
        yield f"http://127.0.0.1:{server.port}", settings
    finally:
        server.stop()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_user_strings_are_escaped_everywhere(served: tuple[str, Settings], tables: list[Path]) -> None:
    base, _ = served
    code, index = get(base + "/")
    assert code == 200 and "<script>" not in index
    assert "x&lt;script&gt;alert(1)&lt;/script&gt;" in index
    name = urllib.parse.quote(str(tables[1]), safe="")
    code, page = get(f"{base}/tables/{name}")
    assert code == 200 and "<script>" not in page and "&lt;script&gt;" in page


def test_bad_paths_are_404_not_tracebacks(served: tuple[str, Settings]) -> None:
    base, _ = served
    for path in ("/tables/%2Fno%2Fsuch%2Ftable", "/api/tables/nope", "/nothing-here", "/tables/%ZZ"):
        code, body = get(base + path)
        assert code == 404 and "Traceback" not in body, path


def test_api_numbers_equal_status_json(served: tuple[str, Settings], tables: list[Path], capsys: Any) -> None:
    base, settings = served
    code, body = get(base + "/api/tables")
    assert code == 200
    api = {t["table"]: t for t in json.loads(body)}
    history = f"self_optimizing.history_location={settings.self_optimizing.history_location}"
    status = main_json(capsys, "status", *map(str, tables), "--set", history)
    assert len(api) == len(status) == 2
    for entry in status:
        served_entry = api[entry["table"]]
        for key, value in entry.items():
            if key == "quota_occupation":  # busy seconds over a window that moved between the two reads
                assert served_entry[key] == pytest.approx(value, rel=0.05, abs=1e-6)
            elif key == "benefit":  # the job counts it on its tick; read-only pages count none (docs/benefit.md)
                assert served_entry[key] is None and value["source"] == "modelled"
            elif key == "lag":  # status replays it from the log; the pages show the job's (none when read-only)
                assert key not in served_entry and value["target_seconds"] is None
            else:
                assert served_entry[key] == value, key
    events = api[str(tables[0])]
    assert events["processes"] and events["processes"][0]["type"] == "full" and events["processes"][0]["depth"] == 6


def test_recluster_ui_serves_the_pages_read_only(tables: list[Path], tmp_path: Path) -> None:
    import re
    import subprocess
    import sys

    from tests.helpers import cli_environment

    versions = len(list((tables[0] / "_delta_log").glob("*.json")))
    process = subprocess.Popen(
        [sys.executable, "-m", "recluster.cli", "ui", str(tables[0]), "--port", "0", "--seconds", "20"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cli_environment({"XDG_STATE_HOME": str(tmp_path / "state")}),
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        port = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert port, line
        code, index = get(f"http://127.0.0.1:{port.group(1)}/")
        assert code == 200 and str(tables[0]) in index and "1 table(s)" in index
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert len(list((tables[0] / "_delta_log").glob("*.json"))) == versions  # read-only: no commit


def test_a_history_written_before_the_depth_column_still_reads_and_grows(tmp_path: Path) -> None:
    from deltalake import write_deltalake

    from recluster.core.scheduling import ProcessRecord, ProcessStatus, ProcessType
    from recluster.delta.history import HISTORY_SCHEMA, HistoryStore, records_to_arrow

    old = ProcessRecord("p1", "/t", ProcessType.MINOR, "default", 1.0, 2.0, ProcessStatus.SUCCESS)
    rows = records_to_arrow([old]).drop_columns(["depth"])
    assert "depth" in HISTORY_SCHEMA.names and "depth" not in rows.column_names
    write_deltalake(str(tmp_path / "history"), rows, mode="append")
    store = HistoryStore(str(tmp_path / "history"), window_seconds=1e12)
    assert store.records()[0].depth is None
    store.append(ProcessRecord("p2", "/t", ProcessType.FULL, "default", 3.0, 4.0, ProcessStatus.SUCCESS, depth=2.5))
    fresh = HistoryStore(str(tmp_path / "history"), window_seconds=1e12).records()
    assert sorted((r.process_id, r.depth) for r in fresh) == [("p1", None), ("p2", 2.5)]


def test_the_fleet_section_names_each_job_its_tables_and_the_leases_it_cannot_read() -> None:
    fleet = {
        "job": "job-b",
        "jobs": [{"job": "job-a<x>", "tables": 7, "heartbeat": 95.0}, {"job": "job-b", "tables": 5, "heartbeat": 99.5}],
        "tables": 12,
        "found": 13,
        "lease_errors": {"s3://lake/t<9>": "malformed lease: <not json>"},
    }
    page = render_index([], "recluster", fleet_section(fleet, now=100.0))
    assert "Fleet: 2 job(s) own 12 table(s)" in page
    assert page.count("(this job)") == 1 and "<code>job-b</code> (this job)" in page
    assert "job-a&lt;x&gt;" in page and "job-a<x>" not in page  # user strings escaped
    assert '<span class="owned">7</span>' in page and "<td>5.0</td>" in page  # heartbeat ages
    assert "found 13 table(s)" in page
    assert "s3://lake/t&lt;9&gt;" in page and "malformed lease: &lt;not json&gt;" in page
    assert fleet_section({}, now=100.0) == ""  # a job without leases shows no fleet
