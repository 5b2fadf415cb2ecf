"""The status pages in a real browser: headless Chromium loads them from a running job on real tables with live
appends. Screenshots are saved under the test's temporary directory (printed), for a person to look at."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from jobs.autorecluster import start_job, stop_gracefully
from jobs.health import HealthServer
from recluster.settings import ClusteringSettings, Settings, TableSettings
from recluster.settings_job import HttpSettings, StreamSettings
from recluster.settings_optimizing import SelfOptimizingSettings
from tests.helpers import append_random

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(*args: str) -> str:
    """Headless Chromium's output for `args` (a missing browser skips here, which CI turns into a failure)."""
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (./dev test installs the Debian package when run as root)")
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


def api(base: str, path: str = "/api/tables") -> Any:
    with urllib.request.urlopen(base + path, timeout=30) as response:
        return json.loads(response.read())


def test_pages_in_a_browser_from_a_running_job(tmp_path: Path, spark: Any) -> None:
    rng = np.random.default_rng(21)
    tables = [tmp_path / "clicks", tmp_path / "orders"]
    for table in tables:
        append_random(table, rng, 0, rows=1_000)
    settings = Settings(
        clustering=ClusteringSettings(target_rows=3_000),
        stream=StreamSettings(
            checkpoint_location=str(tmp_path / "checkpoint"), trigger_interval_seconds=0.2, starting_version="earliest"
        ),
        self_optimizing=SelfOptimizingSettings(history_location=str(tmp_path / "history")),
        tables=[TableSettings(uri=str(t), cluster_by=["k"]) for t in tables],
    )
    server = HealthServer(HttpSettings(port=0)).start()
    base = f"http://127.0.0.1:{server.port}"
    query, handler = start_job(spark, settings, settings.tables)
    server.attach(query, handler)
    try:
        for batch in range(1, 9):  # live appends, the job merging as they come
            for table in tables:
                append_random(table, rng, batch, rows=1_000)
            query.processAllAvailable()
        index = chromium("--dump-dom", base + "/")
        chromium("--screenshot=" + str(tmp_path / "index.png"), "--window-size=1400,500", base + "/")
        served = {t["table"]: t for t in api(base)}
        rows = re.findall(r"<tr><td><a href=\"(/tables/[^\"]+)\">([^<]+)</a>(.*?)</tr>", index)
        assert sorted(uri for _, uri, _ in rows) == sorted(str(t) for t in tables)  # a row per table
        for link, uri, cells in rows:
            depth = float(re.search(r'class="depth">([0-9.]+)<', cells).group(1))  # type: ignore[union-attr]
            files = int(re.search(r'class="files">(\d+)<', cells).group(1))  # type: ignore[union-attr]
            assert depth == pytest.approx(served[uri]["average_depth"], abs=5e-4)
            assert files == served[uri]["files"]
            page = chromium("--dump-dom", base + link)  # follow the link
            shot = tmp_path / f"{Path(uri).name}.png"
            chromium(f"--screenshot={shot}", "--window-size=1000,1100", base + link)
            assert shot.stat().st_size > 10_000
            recorded = [p for p in served[uri]["processes"] if p["depth"] is not None]
            assert recorded, "the job recorded no process for this table"
            points = len(re.findall(r'<circle class="point"', page))
            assert points >= len(recorded)
            assert re.search(r'<table id="levels">.*?<td>L\d+</td>', page, re.S)
        print(f"screenshots: {sorted(str(p) for p in tmp_path.glob('*.png'))}")
    finally:
        stop_gracefully(query, handler)
        server.stop()
