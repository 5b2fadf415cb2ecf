"""One listing of a table's `_delta_log/`: which commits and which complete checkpoints it holds, by the Delta
protocol's file names (docs/operations.md#maintenance). On an object store the listing is one request a page
through obstore, which leaves the interpreter lock to the job's other threads while it waits."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow.fs as pafs

from recluster.delta.object_store import list_names, on_object_store
from recluster.delta.storage import LOG_DIR, normalize_uri, stored_location, table_filesystem

CHECKPOINT_NAME = re.compile(
    r"^(?P<version>\d{20})\.checkpoint(?:\.(?P<part>\d{10})\.(?P<parts>\d{10})|\.(?P<uuid>[0-9a-fA-F-]{36}))?"
    r"\.(?P<format>parquet|json)$"
)
"""A classic (`<v>.checkpoint.parquet`), multi-part (`<v>.checkpoint.<i>.<n>.parquet`) or v2
(`<v>.checkpoint.<uuid>.json|parquet`) checkpoint file."""
COMMIT_NAME = re.compile(r"^(?P<version>\d{20})\.json$")


def checkpoint_files(names: list[str], version: int) -> tuple[int, list[str]] | None:
    """The newest complete checkpoint at or below `version` among `names`: (its version, its files)."""
    found: dict[tuple[int, str], list[str]] = {}
    expected: dict[tuple[int, str], int] = {}
    for name in names:
        match = CHECKPOINT_NAME.match(name)
        if not match or int(match["version"]) > version:
            continue
        kind = "multi" if match["parts"] else ("v2:" + match["uuid"] if match["uuid"] else "single")
        slot = (int(match["version"]), kind)
        found.setdefault(slot, []).append(name)
        expected[slot] = int(match["parts"] or 1)
    complete = [slot for slot, files in found.items() if len(files) == expected[slot]]
    if not complete:
        return None
    best = max(complete, key=lambda slot: (slot[0], slot[1] == "single"))
    return best[0], sorted(found[best])


@dataclass(frozen=True, slots=True)
class LogListing:
    """The file names in a table's `_delta_log/` at one listing."""

    names: tuple[str, ...]

    @property
    def commits(self) -> list[int]:
        """The versions with a commit file (`<v>.json`; a v2 checkpoint's `<v>.checkpoint.<uuid>.json` is none)."""
        return sorted(int(match["version"]) for match in map(COMMIT_NAME.match, self.names) if match)

    def any_before(self, version: int) -> bool:
        """Whether a versioned log file (a commit, a checkpoint, ...) comes before `version`: what a log cleanup up to
        a checkpoint at `version` could delete."""
        return any(name[:20].isdigit() and int(name[:20]) < version for name in self.names)

    def newest_checkpoint(self, version: int | None = None) -> int | None:
        """The version of the newest complete checkpoint (at or below `version`), None when there is none."""
        found = checkpoint_files(list(self.names), version if version is not None else 10**20)
        return None if found is None else found[0]


def list_log(table_uri: str, storage_options: Mapping[str, str] | None) -> LogListing:
    """The table's `_delta_log/` file names (an empty listing when there is no log)."""
    location = normalize_uri(table_uri)
    if on_object_store(location):
        return LogListing(tuple(list_names(location, LOG_DIR, storage_options)))
    filesystem = table_filesystem(location, storage_options)
    selector = pafs.FileSelector(stored_location(location, LOG_DIR), allow_not_found=True)
    infos = filesystem.get_file_info(selector)
    return LogListing(tuple(info.base_name for info in infos if info.type == pafs.FileType.File))


def log_versions(table_uri: str, storage_options: Mapping[str, str] | None) -> list[int]:
    """Versions that have a commit file, from one listing."""
    return list_log(table_uri, storage_options).commits
