"""moto_server listing from a sorted index of key names, as S3 does: `python -m tests.moto_indexed [moto_server's
arguments]`. Stock moto answers every listing by iterating (a copy of) every key of the bucket, so a listing's cost
grows with the whole lake: at a few thousand tables under one root the emulator, not the job, was the bottleneck
(docs/discovery.md#not-built-yet). Here each bucket keeps its key names sorted and a listing visits only the names
under its prefix, skipping a whole common prefix at once when a delimiter folds it. Same answers as stock moto
(tests/test_moto_indexed.py compares the two on random buckets); only the fleet benchmark runs it.
"""

from __future__ import annotations

import bisect
import threading
from typing import Any

from moto.s3 import models
from moto.s3.exceptions import MethodNotAllowed
from moto.s3.utils import _VersionedKeyStore

LAST_CHARACTER = chr(0x10FFFF)
"""After every name that starts with a folder: `folder + LAST_CHARACTER` sorts after them all."""


class IndexedKeyStore(_VersionedKeyStore):
    """moto's store of a bucket's keys (a dict of version lists) that also keeps the names sorted, under a lock since
    moto_server answers requests on threads."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lock = threading.Lock()
        self.names = sorted(dict.keys(self))

    def __setitem__(self, key: str, value: Any) -> None:
        with self.lock:
            self._index(key)
            super().__setitem__(key, value)

    def setlist(self, key: Any, list_: Any) -> None:
        with self.lock:
            self._index(key)
            super().setlist(key, list_)

    def pop(self, key: str) -> None:  # type: ignore[override]
        with self.lock:
            super().pop(key)
            self._unindex(key)

    def __delitem__(self, key: str) -> None:
        with self.lock:
            super().__delitem__(key)
            self._unindex(key)

    def _index(self, key: str) -> None:
        if not dict.__contains__(self, key):
            bisect.insort(self.names, key)

    def _unindex(self, key: str) -> None:
        position = bisect.bisect_left(self.names, key)
        if position < len(self.names) and self.names[position] == key:
            del self.names[position]

    def names_under(self, prefix: str, delimiter: str | None) -> list[tuple[str, bool]]:
        """(name, is a folder) in name order: the names starting with `prefix`, and where `delimiter` occurs after
        the prefix, the folder up to it once instead of every name in it."""
        found: list[tuple[str, bool]] = []
        with self.lock:
            position = bisect.bisect_left(self.names, prefix)
            while position < len(self.names) and self.names[position].startswith(prefix):
                name = self.names[position]
                cut = name.find(delimiter, len(prefix)) if delimiter else -1
                if cut < 0:
                    found.append((name, False))
                    position += 1
                else:
                    folder = name[: cut + len(delimiter or "")]
                    found.append((folder, True))
                    position = bisect.bisect_left(self.names, folder + LAST_CHARACTER)
        return found


def list_objects(
    self: models.S3Backend,
    bucket: models.FakeBucket,
    prefix: str | None,
    delimiter: str | None,
    marker: str | None,
    max_keys: int | None,
) -> tuple[list[Any], list[str], bool, str | None]:
    """`S3Backend.list_objects` from the bucket's index: the latest version of each name (delete markers left out)
    and the folders, both sorted, then moto's own marker and truncation."""
    if isinstance(bucket, models.FakeTableStorageBucket):
        raise MethodNotAllowed()  # as stock moto does
    store = bucket.keys
    assert isinstance(store, IndexedKeyStore), "a bucket created before install()"
    keys: list[Any] = []
    folders: list[str] = []
    for name, is_folder in store.names_under(prefix or "", delimiter):
        if is_folder:
            folders.append(name)
            continue
        key = store.get(name)
        if key is not None and not isinstance(key, models.FakeDeleteMarker):
            keys.append(key)
    if marker:
        keys = self._get_results_from_token(keys, self._pagination_tokens.get(marker) or marker)
    if max_keys is None:
        return keys, folders, False, None
    truncated_keys, is_truncated, next_marker = self._truncate_result(keys, max_keys)
    return truncated_keys, folders, is_truncated, next_marker


def install() -> None:
    """Every bucket created from now on keeps its index, and listings use it."""
    models._VersionedKeyStore = IndexedKeyStore  # type: ignore[attr-defined]  # FakeBucket.__init__ builds its keys
    models.S3Backend.list_objects = list_objects  # type: ignore[method-assign,assignment]


if __name__ == "__main__":
    from moto.server import main

    install()
    main()
