"""Tables on Azure Blob Storage, end to end against azurite (the Azure emulator, from npm; `./dev test` installs it
under the venv): delta-rs writes the tables, the CLI reclusters and optimizes them with the credentials in the
usual AZURE_* variables, and our own commits are create-if-absent on this store too."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import cli_environment, store_end_to_end, wait_for
from tests.spark_cluster import free_port

ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
"""azurite's well-known development account and key (public, documented by Microsoft)."""


@dataclass(frozen=True)
class Azurite:
    url: str
    container: str = "lake"

    def environment(self) -> dict[str, str]:
        """What a user of the emulator exports; delta-rs and obstore read these variables themselves."""
        return {
            "AZURE_STORAGE_USE_EMULATOR": "true",
            "AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT,
            "AZURE_STORAGE_ACCOUNT_KEY": KEY,
            "AZURITE_BLOB_STORAGE_URL": self.url,
        }

    def options(self) -> dict[str, str]:
        return {"azure_storage_use_emulator": "true", "azure_storage_account_name": ACCOUNT,
                "azure_storage_account_key": KEY}  # fmt: skip

    def table_uri(self, name: str) -> str:
        return f"az://{self.container}/{name}-{uuid.uuid4().hex[:8]}"


def _azurite_binary() -> str | None:
    local = Path(sys.prefix) / "node" / "node_modules" / ".bin" / "azurite-blob"
    return str(local) if local.exists() else shutil.which("azurite-blob")


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    binary = _azurite_binary()
    if binary is None:
        pytest.skip("azurite is not installed (./dev test installs it with npm)")
    from azure.storage.blob import BlobServiceClient

    port = free_port()
    data = tmp_path_factory.mktemp("azurite")
    process = subprocess.Popen(
        [
            binary,
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--location",
            str(data),
            "--silent",
            "--skipApiVersionCheck",
            "--loose",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    connection = f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};BlobEndpoint={url}/{ACCOUNT};"
    # no retries: the SDK's first one backs off 15 s, while wait_for asks again within 0.05 s of azurite answering
    client = BlobServiceClient.from_connection_string(connection, retry_total=0)

    def created() -> bool:
        try:
            client.create_container("lake")
        except Exception as error:  # not up yet: a connection error
            return "ContainerAlreadyExists" in str(error)
        return True

    try:
        with client:  # closed: an open connection would hold azurite's shutdown
            wait_for(created, "azurite to answer", process, timeout=60)
        previous = os.environ.get("AZURITE_BLOB_STORAGE_URL")
        os.environ["AZURITE_BLOB_STORAGE_URL"] = url  # object_store's emulator endpoint, in this process too
        yield Azurite(url)
        if previous is None:
            os.environ.pop("AZURITE_BLOB_STORAGE_URL", None)
        else:
            os.environ["AZURITE_BLOB_STORAGE_URL"] = previous
    finally:
        process.terminate()
        try:
            process.wait(timeout=2)  # it stops in well under a second when nothing holds it
        except subprocess.TimeoutExpired:  # azurite 3.37 may wait on open connections: it holds nothing we need
            process.kill()
            process.wait(timeout=30)


def cli(azurite: Azurite, tmp_path: Path, *args: str) -> dict[str, object]:
    env = cli_environment({**azurite.environment(), "XDG_STATE_HOME": str(tmp_path / "state")})
    done = subprocess.run(
        [sys.executable, "-m", "recluster.cli", *args, "--json"], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert KEY not in done.stdout + done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_info_final_minor_optimize_and_conditional_commits_on_azure(azurite: Azurite, tmp_path: Path) -> None:
    store_end_to_end(lambda *args: cli(azurite, tmp_path, *args), azurite.table_uri, azurite.options())
