"""Object-store calls through obstore (Rust object_store, the library delta-rs uses too), configured from the
table's delta-rs storage options and the environment: the conditional PUT a Delta commit needs, and reads of the log
in one request each (a GET, a HEAD, a listing) that leave the interpreter lock to the job's other threads.

S3 (AWS and compatible stores) creates-if-absent with `If-None-Match: *`, GCS with `ifGenerationMatch=0`,
Azure with `If-None-Match: *`: two writers of one log version, exactly one wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any
from urllib.parse import unquote, urlparse

_CLIENT_KEYS = frozenset(
    {
        "allow_http",
        "allow_invalid_certificates",
        "connect_timeout",
        "http1_only",
        "http2_only",
        "pool_idle_timeout",
        "pool_max_idle_per_host",
        "proxy_url",
        "proxy_ca_certificate",
        "proxy_excludes",
        "timeout",
        "user_agent",
    }
)
_STORE_KEYS: dict[str, tuple[str, frozenset[str], Mapping[str, str]]] = {
    "s3": (
        "aws_",
        frozenset(
            [
                "access_key_id",
                "bucket",
                "checksum_algorithm",
                "conditional_put",
                "container_credentials_relative_uri",
                "container_credentials_full_uri",
                "container_authorization_token_file",
                "copy_if_not_exists",
                "default_region",
                "disable_tagging",
                "endpoint",
                "imdsv1_fallback",
                "metadata_endpoint",
                "region",
                "request_payer",
                "role_arn",
                "role_session_name",
                "s3_express",
                "secret_access_key",
                "server_side_encryption",
                "session_token",
                "skip_signature",
                "sse_bucket_key_enabled",
                "sse_kms_key_id",
                "sts_endpoint",
                "unsigned_payload",
                "virtual_hosted_style_request",
                "web_identity_token_file",
            ]
        ),
        {"endpoint_url": "endpoint", "token": "session_token"},
    ),
    "gs": (
        "google_",
        frozenset(
            ["service_account", "service_account_key", "base_url", "bearer_token", "bucket", "application_credentials"]
        ),
        {"service_account_path": "service_account"},
    ),
    "az": (
        "azure_",
        frozenset(
            [
                "account_name",
                "account_key",
                "client_id",
                "client_secret",
                "tenant_id",
                "authority_host",
                "sas_key",
                "token",
                "use_emulator",
                "use_fabric_endpoint",
                "endpoint",
                "msi_endpoint",
                "object_id",
                "msi_resource_id",
                "federated_token_file",
                "use_azure_cli",
                "skip_signature",
                "container_name",
            ]
        ),
        {
            "storage_account_name": "account_name",
            "storage_account_key": "account_key",
            "storage_use_emulator": "use_emulator",
            "storage_sas_key": "sas_key",
            "storage_token": "token",
            "storage_endpoint": "endpoint",
            "storage_client_id": "client_id",
            "storage_client_secret": "client_secret",
            "storage_tenant_id": "tenant_id",
        },
    ),
}
_SCHEMES = {"s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs", "az": "az", "abfs": "az", "abfss": "az", "adl": "az"}


def store_config(scheme: str, storage_options: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(store config, client options) for obstore from delta-rs storage options; options only delta-rs knows
    (a locking provider, ...) are left out."""
    kind = _SCHEMES.get(scheme.lower())
    if kind is None:
        raise ValueError(f"no object store for scheme {scheme!r}")
    prefix, keys, aliases = _STORE_KEYS[kind]
    config: dict[str, str] = {}
    client: dict[str, str] = {}
    for raw, value in storage_options.items():
        name = raw.lower().removeprefix(prefix)
        name = aliases.get(name, name)
        if name in _CLIENT_KEYS:
            client[name] = value
        elif name in keys:
            config[name] = value
    return config, client


def _located(table_uri: str, relative: str, storage_options: Mapping[str, str] | None) -> tuple[Any, str]:
    """The store of the root's bucket (or container) and the path of `relative` in it. One store per bucket and
    options, not one per table: a job with thousands of tables keeps one connection pool per bucket, and its
    connections serve every table there."""
    parsed = urlparse(table_uri)
    bucket = f"{parsed.scheme}://{parsed.netloc}"
    prefix = unquote(parsed.path).strip("/")
    path = f"{prefix}/{relative}" if prefix else relative
    return _bucket_store(bucket, tuple(sorted((storage_options or {}).items()))), path


@cache
def _bucket_store(bucket: str, options: tuple[tuple[str, str], ...]) -> Any:
    from obstore.store import from_url

    config, client = store_config(urlparse(bucket).scheme, dict(options))
    retries = next((value for key, value in options if key.lower() == "max_retries"), None)  # delta-rs's option too
    retry = {"max_retries": int(retries)} if retries is not None else None
    return from_url(
        bucket,
        config=config or None,  # type: ignore[arg-type]
        client_options=client or None,  # type: ignore[arg-type]
        retry_config=retry,  # type: ignore[arg-type]
    )


def read_error(table_uri: str, relative: str, error: BaseException) -> OSError:
    """An obstore error on a read, as the OSError pyarrow's file systems raise (every reader of the log catches
    those); raised `from` obstore's error, its cause, which storage_faults.py classifies."""
    return OSError(f"cannot read {table_uri.rstrip('/')}/{relative}: {error}")


def put_new_object(table_uri: str, relative: str, data: bytes, storage_options: Mapping[str, str] | None) -> bool:
    """Create `relative` under the table's root only if absent; False when it already exists."""
    import obstore
    from obstore.exceptions import AlreadyExistsError, PreconditionError

    store, path = _located(table_uri, relative, storage_options)
    try:
        obstore.put(store, path, data, mode="create")
    except (AlreadyExistsError, PreconditionError):
        return False
    return True


def get_object(table_uri: str, relative: str, storage_options: Mapping[str, str] | None) -> bytes:
    """`relative` under the root in one GET (pyarrow's file system asks for its size first, a HEAD more: a
    takeover's claims read one object each, thousands at once); FileNotFoundError when it is absent."""
    import obstore
    from obstore.exceptions import BaseError, NotFoundError

    store, path = _located(table_uri, relative, storage_options)
    try:
        return bytes(obstore.get(store, path).bytes())
    except (NotFoundError, FileNotFoundError):
        raise FileNotFoundError(f"{table_uri.rstrip('/')}/{relative}") from None
    except BaseError as error:
        raise read_error(table_uri, relative, error) from error


def object_exists(table_uri: str, relative: str, storage_options: Mapping[str, str] | None) -> bool:
    """Whether `relative` exists under the root: one HEAD."""
    import obstore
    from obstore.exceptions import BaseError, NotFoundError

    store, path = _located(table_uri, relative, storage_options)
    try:
        obstore.head(store, path)
    except (NotFoundError, FileNotFoundError):  # a HEAD's 404 comes as the latter
        return False
    except BaseError as error:
        raise read_error(table_uri, relative, error) from error
    return True


def list_names(table_uri: str, folder: str, storage_options: Mapping[str, str] | None) -> list[str]:
    """The names of the objects directly in `folder` under the root (a listing with a delimiter, one request a
    page); an empty list when there are none."""
    import obstore
    from obstore.exceptions import BaseError

    store, path = _located(table_uri, folder, storage_options)
    try:
        listed = obstore.list_with_delimiter(store, path)
    except BaseError as error:
        raise read_error(table_uri, folder, error) from error
    return [str(entry["path"]).rsplit("/", 1)[-1] for entry in listed["objects"]]


def on_object_store(table_uri: str) -> bool:
    """Whether the URI is on a store obstore reaches (S3, GCS, Azure), not a local path."""
    return urlparse(table_uri).scheme.lower() in _SCHEMES


def put_object(table_uri: str, relative: str, data: bytes, storage_options: Mapping[str, str] | None) -> None:
    """Write `relative` under the root, replacing it: for an object only one writer ever writes (a heartbeat)."""
    import obstore

    store, path = _located(table_uri, relative, storage_options)
    obstore.put(store, path, data)
