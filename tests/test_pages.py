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

from jobs.health import HealthServer
from jobs.pages import PageSource, snapshot_views
from recluster.engine.optimizer import history_store
from recluster.settings import HttpSettings, Settings
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
            else:
                assert served_entry[key] == value, key
    events = api[str(tables[0])]
    assert events["processes"] and events["processes"][0]["type"] == "full" and events["processes"][0]["depth"] == 6
