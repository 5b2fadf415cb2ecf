"""Storage errors told apart: one that a retry may fix (a timeout, a reset connection, 500/503 from the store)
from one it cannot (no permission, bad credentials, no such bucket, a read-only disk). Every retry loop that
touches storage asks `storage_fault`, whichever library raised: local files (OSError), delta-rs and its
pyarrow filesystem (OSError, DeltaError) and obstore (its own exception classes, not OSError).
See docs/guarantees.md#storage-errors.
"""

from __future__ import annotations

import errno
import re
from enum import StrEnum

from obstore.exceptions import (
    BaseError,
    InvalidPathError,
    NotSupportedError,
    PermissionDeniedError,
    UnauthenticatedError,
    UnknownConfigurationKeyError,
)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SERVICE_ERROR = re.compile(r"<Code>([^<]+)</Code>\s*<Message>([^<]*)</Message>")
_DELTA_RS_STORAGE_SIGNS = ("Object", "object store", "I/O", "HTTP", "request", "onnection", "timed out", "S3", "GCS")
_CONNECT_ERRORS = ("Connection refused", "dns error", "tcp connect error", "timed out")


class StorageFault(StrEnum):
    TRANSIENT = "transient"
    """Retrying may succeed: timeouts, resets, throttling, a 5xx answer."""
    PERMANENT = "permanent"
    """Retrying cannot help: permissions, credentials, a missing bucket, a read-only or wrong path."""


PERMANENT_ERRNOS = frozenset({errno.EPERM, errno.EACCES, errno.EROFS, errno.ENOTDIR, errno.EISDIR})
"""Local-file errors a retry cannot fix."""

PERMANENT_SERVICE_CODES = (
    "AccessDenied",
    "AllAccessDisabled",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "NoSuchBucket",
    "InvalidBucketName",
    "AuthenticationFailed",
    "AuthorizationFailure",
    "AuthorizationPermissionMismatch",
    "ContainerNotFound",
    "AccountIsDisabled",
)
"""Object-store error codes (S3, GCS's XML API, Azure) that mean the request can never succeed as it is."""

_PERMANENT_OBSTORE = (
    PermissionDeniedError,
    UnauthenticatedError,
    InvalidPathError,
    NotSupportedError,
    UnknownConfigurationKeyError,
)


def storage_fault(error: BaseException) -> StorageFault | None:
    """TRANSIENT or PERMANENT for an error of a storage call; None when it is no storage error at all (a bug,
    a bad value), which no retry loop should swallow."""
    if isinstance(error, OSError) and isinstance(error.__cause__, BaseError):  # obstore's, raised as a read's OSError
        return storage_fault(error.__cause__)
    if isinstance(error, (*_PERMANENT_OBSTORE, PermissionError)):
        return StorageFault.PERMANENT
    if isinstance(error, FileNotFoundError):
        return StorageFault.PERMANENT  # (callers that expect a missing file test for it before asking)
    text = _ANSI.sub("", str(error))
    if isinstance(error, OSError) and error.errno in PERMANENT_ERRNOS:
        return StorageFault.PERMANENT
    if any(code in text for code in PERMANENT_SERVICE_CODES):
        return StorageFault.PERMANENT
    if isinstance(error, OSError | BaseError):
        return StorageFault.TRANSIENT
    if type(error).__name__ == "DeltaError" and any(sign in text for sign in _DELTA_RS_STORAGE_SIGNS):
        return StorageFault.TRANSIENT  # delta-rs wraps object-store errors in its DeltaError
    return None


def describe_storage_error(error: BaseException) -> str:
    """One line for an object-store error: the store's own code and message (NoSuchBucket,
    SignatureDoesNotMatch, AccessDenied ...) or the connection problem, not the first line of a chain of
    wrapped errors ("Generic S3 error"). Carries no credentials: delta-rs errors never contain them."""
    text = _ANSI.sub("", str(error))
    service = _SERVICE_ERROR.search(text)
    if service:
        return f"{service.group(2).strip().rstrip('.')} ({service.group(1)})"
    reason = next((r for r in _CONNECT_ERRORS if r in text), None)
    if reason:
        url = re.search(r"https?://[^/\s]+", text)
        return f"cannot reach the storage endpoint{' ' + url.group(0) if url else ''} ({reason})"
    return (text.strip().splitlines() or [type(error).__name__])[0]
