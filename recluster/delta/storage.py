"""Where a table's files are and how to reach them: URIs, the pyarrow filesystem of a table (local or through
delta-rs's object store with the table's storage options), the log's files, and the one atomic primitive a
Delta commit needs: create a file only if it does not exist yet.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs
from deltalake.fs import DeltaStorageHandler

from recluster.core.errors import TableError
from recluster.delta.object_store import get_object, object_exists, on_object_store, put_new_object


def _option(options: Mapping[str, str], *names: str, environment: bool = False) -> str:
    """A delta-rs storage option by any of its names (case-insensitive); with `environment`, else the
    environment variable delta-rs documents for it. Empty when unset."""
    lowered = {k.lower(): v for k, v in options.items()}
    found = next((lowered[n.lower()] for n in names if n.lower() in lowered), None)
    if found is None and environment:
        found = next((os.environ[n.upper()] for n in names if n.upper() in os.environ), None)
    return (found or "").strip().lower()


def commit_safety_problem(table_uri: str, storage_options: Mapping[str, str] | None) -> str | None:
    """Why concurrent commits to this table would be unsafe, or None when they are safe.

    A Delta commit is "create version N if absent". S3 offers that only as a conditional PUT
    (`conditional_put=etag`) or through a DynamoDB lock (`AWS_S3_LOCKING_PROVIDER=dynamodb`); without either,
    delta-rs commits with a plain PUT and two writers of the same version silently overwrite each other.
    GCS, Azure and local filesystems have an atomic put-if-absent of their own.
    """
    if urlparse(table_uri).scheme.lower() not in ("s3", "s3a"):
        return None
    options = storage_options or {}
    # conditional_put as a storage option or as the AWS_CONDITIONAL_PUT variable (object_store reads it from the
    # environment, for delta-rs and for our own commits through obstore), the lock provider likewise.
    conditional = _option(options, "conditional_put", "aws_conditional_put", environment=True)
    locking = _option(options, "aws_s3_locking_provider", environment=True)
    if conditional not in ("", "disabled") or locking == "dynamodb":
        return None
    return (
        f"refusing to commit to {table_uri}: S3 without conditional puts or a lock lets concurrent writers "
        f"overwrite each other's commits; set the storage option conditional_put=etag (AWS S3 and most "
        f"S3-compatible stores) or AWS_S3_LOCKING_PROVIDER=dynamodb, or commit.allow_unsafe_single_writer=true "
        f"if nothing else ever writes to this table"
    )


CREDENTIAL_PREFIXES = {
    "s3": ("AWS_",),
    "s3a": ("AWS_",),
    "gs": ("GOOGLE_",),
    "az": ("AZURE_",),
    "abfs": ("AZURE_",),
    "abfss": ("AZURE_",),
    "adl": ("AZURE_",),
    "azure": ("AZURE_",),
}
"""The environment variables delta-rs (object_store) reads per URI scheme: AWS_*, GOOGLE_*, AZURE_*."""


def executor_storage_options(table_uri: str, storage_options: Mapping[str, str] | None) -> dict[str, str]:
    """The storage options Spark tasks need to reach the table: the driver's AWS_*/GOOGLE_*/AZURE_* variables
    for the table's store (delta-rs reads them on the driver; executors started by a cluster's workers do not
    have them), with the explicit options on top. They travel inside task closures, never as Spark conf: the
    Spark UI's environment page does not show them."""
    prefixes = CREDENTIAL_PREFIXES.get(urlparse(table_uri).scheme.lower(), ())
    from_environment = {k: v for k, v in os.environ.items() if prefixes and k.startswith(prefixes)}
    return {**from_environment, **(storage_options or {})}


def require_safe_commits(table_uri: str, storage_options: Mapping[str, str] | None, allow_unsafe: bool) -> None:
    """Raise a TableError unless commits to the table are safe or the user opted into unsafe single-writer mode."""
    problem = commit_safety_problem(table_uri, storage_options)
    if problem and not allow_unsafe:
        raise TableError(problem)


def normalize_uri(uri: str) -> str:
    """Local paths and `file://` URIs become absolute paths; object-store URIs pass through."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return os.path.abspath(unquote(parsed.path))
    if parsed.scheme in ("", "c", "d") or len(parsed.scheme) == 1:  # plain or Windows-drive paths
        return os.path.abspath(uri)
    return uri.rstrip("/")


@cache
def _filesystem(table_uri: str, options: tuple[tuple[str, str], ...]) -> pafs.FileSystem:
    if "://" not in table_uri:
        return pafs.LocalFileSystem()
    return pafs.PyFileSystem(DeltaStorageHandler(table_uri, dict(options)))


def table_filesystem(table_uri: str, storage_options: Mapping[str, str] | None) -> pafs.FileSystem:
    return _filesystem(table_uri, tuple(sorted((storage_options or {}).items())))


def file_location(table_uri: str, path: str) -> str:
    """Where `path` (relative to the table, URL-encoded as in the log) is for the table's filesystem."""
    if "://" in path:
        return path
    return stored_location(table_uri, unquote(path))


def stored_location(table_uri: str, relative: str) -> str:
    """A stored (decoded) path relative to the table root, for the table's filesystem."""
    if "://" not in table_uri:
        return os.path.join(table_uri, relative)
    return relative  # DeltaStorageHandler is rooted at the table


LOG_DIR = "_delta_log"


def log_file(table_uri: str, name: str) -> str:
    return stored_location(table_uri, f"{LOG_DIR}/{name}")


def commit_file_exists(table_uri: str, version: int, storage_options: Mapping[str, str] | None) -> bool:
    """Whether `_delta_log/<version>.json` exists: one HEAD on an object store, through obstore (as
    `read_log_actions`)."""
    if on_object_store(table_uri):
        return object_exists(table_uri, log_file(table_uri, f"{version:020d}.json"), storage_options)
    filesystem = table_filesystem(table_uri, storage_options)
    try:
        filesystem.open_input_file(log_file(table_uri, f"{version:020d}.json")).close()
    except FileNotFoundError:
        return False
    return True


def read_log_actions(table_uri: str, version: int, storage_options: Mapping[str, str] | None) -> list[dict[str, Any]]:
    """The actions of one commit file; FileNotFoundError when the log no longer has it. On an object store one GET
    through obstore, which waits for the store without the interpreter's lock: delta-rs's file system for pyarrow
    held it for much of each request (a HEAD, then a GET), so a job's other threads stalled behind its commit reads
    (docs/streaming.md#reading-commits). Any other error is an OSError, as pyarrow's, caused by obstore's."""
    name = log_file(table_uri, f"{version:020d}.json")
    if on_object_store(table_uri):
        data = get_object(table_uri, name, storage_options)
    else:
        with table_filesystem(table_uri, storage_options).open_input_stream(name) as stream:
            data = stream.read()
    return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]


def read_last_checkpoint(
    table_uri: str, storage_options: Mapping[str, str] | None
) -> tuple[int, dict[str, Any]] | None:
    """`_delta_log/_last_checkpoint` (one GET): the version it names and all it says; None when it is missing or
    malformed. A storage error is raised: an unanswered read says nothing about the log."""
    filesystem = table_filesystem(table_uri, storage_options)
    try:
        with filesystem.open_input_stream(log_file(table_uri, "_last_checkpoint")) as stream:
            data = stream.read()
    except FileNotFoundError:
        return None
    try:
        hint = json.loads(data.decode("utf-8"))
        return int(hint["version"]), dict(hint)
    except (KeyError, ValueError, TypeError):
        return None


def last_checkpoint_version(table_uri: str, storage_options: Mapping[str, str] | None) -> int | None:
    """The version `_delta_log/_last_checkpoint` names (one GET), None when the table has no checkpoint."""
    try:
        found = read_last_checkpoint(table_uri, storage_options)
    except OSError:  # unreadable: as if there were none
        return None
    return None if found is None else found[0]


@dataclass(frozen=True, slots=True)
class StoredFile:
    """A file found under a table root by listing (whatever the log says about it)."""

    path: str
    """Relative to the table root, decoded (as stored, not as the log encodes it)."""
    bytes: int
    modified: float | None
    """Last modification, seconds since the epoch."""


def list_data_files(table_uri: str, storage_options: Mapping[str, str] | None) -> list[StoredFile]:
    """Every file under the table root outside `_delta_log/`: one prefix listing per directory level
    (an object store lists a prefix with a delimiter, in pages); the log itself is never listed."""
    filesystem = table_filesystem(table_uri, storage_options)
    root = stored_location(table_uri, "")
    found = []
    pending = [root]
    while pending:
        directory = pending.pop()
        for info in filesystem.get_file_info(pafs.FileSelector(directory, allow_not_found=True)):
            relative = info.path[len(root) :].lstrip("/") if root else info.path.lstrip("/")
            if relative == LOG_DIR:
                continue
            if info.type == pafs.FileType.Directory:
                pending.append(info.path)
            elif info.type == pafs.FileType.File:
                modified = info.mtime.timestamp() if info.mtime else None
                found.append(StoredFile(relative, int(info.size or 0), modified))
    return sorted(found, key=lambda f: f.path)


def remove_stored_files(table_uri: str, paths: Sequence[str], storage_options: Mapping[str, str] | None) -> None:
    """Delete files by their stored (decoded) paths relative to the table root; missing ones are fine."""
    filesystem = table_filesystem(table_uri, storage_options)
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            filesystem.delete_file(stored_location(table_uri, path))


def put_if_absent(table_uri: str, relative: str, data: bytes, storage_options: Mapping[str, str] | None) -> bool:
    """Create `relative` (stored path under the table root) holding `data`, atomically and only if no such file
    exists; False when it exists. This is what makes a Delta commit atomic: two writers of one version, one wins.

    Local files: written aside, then hard-linked into place (link fails if the name exists). Object stores:
    a conditional PUT (If-None-Match / ifGenerationMatch=0) through obstore with the table's storage options.
    """
    if "://" not in table_uri:
        target = os.path.join(table_uri, relative)
        handle, temporary = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(target))
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.link(temporary, target)
        except FileExistsError:
            return False
        finally:
            os.remove(temporary)
        return True

    return put_new_object(table_uri, relative, data, storage_options)


def require_writable(location: str, what: str, *, create: bool = False) -> None:
    """Fail with one clear line, before any work starts, when a local directory cannot be written (object stores:
    work that cannot write fails there and leaves everything as it was). With `create`, make it first."""
    if "://" in location and not location.startswith("file://"):
        return
    path = location.removeprefix("file://")
    probe = os.path.join(path, f".recluster-write-probe-{os.getpid()}")
    try:
        if create:
            os.makedirs(path, exist_ok=True)
        with open(probe, "w", encoding="utf-8") as handle:
            handle.write("ok")
        os.remove(probe)
    except OSError as error:
        raise TableError(f"{what} {location} is not writable: {error.strerror}") from None
