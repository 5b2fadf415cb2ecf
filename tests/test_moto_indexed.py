"""The indexed moto listing (tests/moto_indexed.py) answers as stock moto does: two buckets in one in-process backend
get the same puts and deletes, one keeping moto's own store and one the index, and every listing of random
prefixes, delimiters, markers and page sizes compares (the oracle is stock moto's `list_objects`)."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from moto.s3 import models

from tests.moto_indexed import IndexedKeyStore, list_objects

NAMES = st.text(alphabet="ab/_", min_size=1, max_size=6)
OPERATIONS = st.lists(st.tuples(st.sampled_from(["put", "put", "delete"]), NAMES), max_size=40)
LISTINGS = st.lists(
    st.tuples(
        st.none() | st.text(alphabet="ab/_", max_size=3),
        st.sampled_from([None, "", "/", "_", "a/"]),
        st.none() | NAMES,
        st.sampled_from([None, 0, 1, 2, 1000]),
    ),
    min_size=1,
    max_size=8,
)


def _listed(answer: tuple[Any, ...]) -> tuple[Any, ...]:
    keys, folders, truncated, next_marker = answer
    return [key.name for key in keys], list(folders), truncated, next_marker


@settings(max_examples=150, deadline=None)
@given(OPERATIONS, LISTINGS)
def test_indexed_listing_answers_as_stock_moto(operations: list[tuple[str, str]], listings: list[Any]) -> None:
    backend = models.S3Backend("us-east-1", "123456789012")
    stock = backend.create_bucket(f"stock-{uuid.uuid4().hex[:12]}", "us-east-1")
    indexed = backend.create_bucket(f"indexed-{uuid.uuid4().hex[:12]}", "us-east-1")
    indexed.keys = IndexedKeyStore()
    for operation, name in operations:
        for bucket in (stock, indexed):
            if operation == "put":
                backend.put_object(bucket.name, name, name.encode())
            else:
                backend.delete_object(bucket.name, name)
    assert list(indexed.keys.names) == sorted(dict.keys(stock.keys))
    for prefix, delimiter, marker, max_keys in listings:
        expected = backend.list_objects(stock, prefix, delimiter, marker, max_keys)
        answered = list_objects(backend, indexed, prefix, delimiter, marker, max_keys)
        assert _listed(answered) == _listed(expected), (prefix, delimiter, marker, max_keys)
