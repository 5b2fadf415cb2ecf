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

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from recluster.delta.object_store import put_new_object
from tests.helpers import cli_environment, row_multiset, wait_for
from tests.test_s3 import _free_port

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

    port = _free_port()
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
    client = BlobServiceClient.from_connection_string(connection)

    def created() -> bool:
        try:
            client.create_container("lake")
        except Exception as error:  # not up yet: a connection error
            return "ContainerAlreadyExists" in str(error)
        return True

    try:
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


def test_info_final_and_minor_optimize_on_azure(azurite: Azurite, tmp_path: Path) -> None:
    uri = azurite.table_uri("events")
    rng = np.random.default_rng(41)
    for batch in range(8):
        data = pa.table({"k": rng.integers(0, 10**9, 1_500), "batch": pa.array([batch] * 1_500, pa.int32())})
        write_deltalake(uri, data, mode="append", storage_options=azurite.options())
    expected = row_multiset(DeltaTable(uri, storage_options=azurite.options()).to_pyarrow_table())
    cli(azurite, tmp_path, "sql", f"ALTER TABLE '{uri}' CLUSTER BY (k)")
    assert cli(azurite, tmp_path, "info", uri)["average_depth"] == 8.0
    result = cli(azurite, tmp_path, "run", uri, "--final")
    assert result["failures"] == 0 and result["after"]["average_depth"] <= 1.5  # type: ignore[index]
    assert row_multiset(DeltaTable(uri, storage_options=azurite.options()).to_pyarrow_table()) == expected

    fragments = azurite.table_uri("fragments")  # minor optimizing of small appends, no key needed
    for batch in range(6):
        write_deltalake(fragments, pa.table({"v": [batch] * 100}), mode="append", storage_options=azurite.options())
    before = row_multiset(DeltaTable(fragments, storage_options=azurite.options()).to_pyarrow_table())
    optimized = cli(azurite, tmp_path, "optimize", fragments, "--type", "minor")
    assert optimized["outcome"] == "done" and optimized["failures"] == 0
    table = DeltaTable(fragments, storage_options=azurite.options())
    assert len(table.file_uris()) == 1 and row_multiset(table.to_pyarrow_table()) == before


def test_our_commits_are_create_if_absent_on_azure(azurite: Azurite) -> None:
    uri = azurite.table_uri("conditional")
    write_deltalake(uri, pa.table({"k": [1, 2, 3]}), storage_options=azurite.options())
    taken = "_delta_log/00000000000000000001.json"
    assert put_new_object(uri, taken, b'{"commitInfo":{}}\n', azurite.options())
    assert not put_new_object(uri, taken, b'{"commitInfo":{"other":1}}\n', azurite.options())  # the second loses
    assert DeltaTable(uri, storage_options=azurite.options()).version() == 1
