"""The lease objects of jobs sharing tables (docs/discovery.md#several-jobs), under one lease root on any store the
tables may be on: `jobs/<job>.json`, each job's heartbeat, rewritten by that job alone; `tables/<digest>/<n>.json`, a
table's numbered claims, each created only if absent (the conditional PUT commits use), so of two jobs claiming a
table at once exactly one wins; `holdings/<job>.json`, the claims a job holds, read by the others once it is dead. The
rules are core/leases.py's."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping

import pyarrow.fs as pafs

from recluster.core.leases import (
    Claim,
    Heartbeat,
    Holdings,
    LeaseError,
    parse_claim,
    parse_heartbeat,
    parse_holdings,
    table_key,
)
from recluster.delta.object_store import get_object, put_object
from recluster.delta.storage import normalize_uri, put_if_absent, stored_location, table_filesystem

JOBS, TABLES, HOLDINGS = "jobs", "tables", "holdings"


class LeaseStore:
    """Reads and creates the lease objects under `root`."""

    def __init__(self, root: str, storage_options: Mapping[str, str]) -> None:
        self.root = normalize_uri(root)
        self.options = dict(storage_options)
        self.filesystem = table_filesystem(self.root, self.options)
        if "://" not in self.root:
            for folder in (JOBS, HOLDINGS):
                os.makedirs(os.path.join(self.root, folder), exist_ok=True)

    def write_heartbeat(self, heartbeat: Heartbeat) -> None:
        self._replace(f"{JOBS}/{heartbeat.job}.json", heartbeat.to_json())

    def write_holdings(self, holdings: Holdings) -> None:
        self._replace(f"{HOLDINGS}/{holdings.job}.json", holdings.to_json())

    def holdings(self, job: str) -> Holdings | None:
        """The claims a job said it holds (one read), None when it never wrote them; a malformed file raises
        LeaseError."""
        name = f"{HOLDINGS}/{job}.json"
        try:
            holdings = parse_holdings(self._read(name), f"{self.root}/{name}")
        except FileNotFoundError:
            return None
        if holdings.job != job:
            raise LeaseError(f"malformed holdings {self.root}/{name}: it names job {holdings.job}")
        return holdings

    def heartbeats(self) -> tuple[dict[str, Heartbeat], list[str]]:
        """Every job's heartbeat (one listing and one read each), and one line per malformed one."""
        found: dict[str, Heartbeat] = {}
        errors = []
        for name in self._names(JOBS):
            if not name.endswith(".json"):
                continue
            where = f"{self.root}/{JOBS}/{name}"
            try:
                heartbeat = parse_heartbeat(self._read(f"{JOBS}/{name}"), where)
            except (ValueError, FileNotFoundError) as error:
                errors.append(str(error))
                continue
            found[heartbeat.job] = heartbeat
        return found, errors

    def latest_claim(self, table: str) -> Claim | None:
        """The table's newest claim (one listing of its folder), None when it was never claimed; a malformed one
        raises LeaseError."""
        folder = f"{TABLES}/{table_key(table)}"
        numbers = [int(n[:-5]) for n in self._names(folder) if n.endswith(".json") and n[:-5].isdigit()]
        if not numbers:
            return None
        newest = max(numbers)
        name = f"{folder}/{newest:020d}.json"
        claim = parse_claim(self._read(name), f"{self.root}/{name}")
        if claim.table != table or claim.sequence != newest:
            raise ValueError(f"malformed lease {self.root}/{name}: it names {claim.table} #{claim.sequence}")
        return claim

    def create_claim(self, claim: Claim) -> bool:
        """Create the claim if no claim of that number exists; False when another job's came first."""
        folder = f"{TABLES}/{table_key(claim.table)}"
        if "://" not in self.root:
            os.makedirs(os.path.join(self.root, folder), exist_ok=True)
        return put_if_absent(self.root, f"{folder}/{claim.sequence:020d}.json", claim.to_json(), self.options)

    def forget_job(self, job: str) -> None:
        """Delete a long-dead job's heartbeat and holdings (either may be gone already: another job deleted it)."""
        for relative in (f"{JOBS}/{job}.json", f"{HOLDINGS}/{job}.json"):
            with contextlib.suppress(FileNotFoundError):
                self.filesystem.delete_file(stored_location(self.root, relative))

    def _replace(self, relative: str, data: bytes) -> None:
        """Write an object only its job writes, replacing it whole."""
        location = stored_location(self.root, relative)
        if "://" not in self.root:  # written aside and renamed: a reader never sees half of it
            temporary = f"{location}.tmp"
            with open(temporary, "wb") as out:
                out.write(data)
            os.replace(temporary, location)
            return
        put_object(self.root, location, data, self.options)

    def _names(self, folder: str) -> list[str]:
        selector = pafs.FileSelector(stored_location(self.root, folder), allow_not_found=True)
        return [info.base_name for info in self.filesystem.get_file_info(selector) if info.type == pafs.FileType.File]

    def _read(self, relative: str) -> bytes:
        if "://" in self.root:  # one request, not two
            return get_object(self.root, relative, self.options)
        with self.filesystem.open_input_stream(stored_location(self.root, relative)) as stream:
            return bytes(stream.read())
