"""Keys as ranks (docs/architecture.md#blocks-as-columns). Pure: numpy and Arrow arrays, no I/O.

Metrics and selection compare files' keys only through their dense ranks among all the keys of a table: one sort
of a million files' keys, kept. Keys of one number (the common case) are sorted as the unsigned 64-bit words they
order as; other keys as byte strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from recluster.core.key_encoding import ONE_NUMBER_KEY_BYTES, VALUE_MARKER

IntArray = npt.NDArray[np.signedinteger[Any]]
"""Indices, counts and key ranks (int32 where a million of them are kept, int64 elsewhere)."""
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def rank_keys(keys: Sequence[bytes]) -> tuple[IntArray, int]:
    """Dense ranks (0-based) of byte keys and the number of distinct keys.

    Fixed-width keys (one numeric column, the common case) are sorted as big-endian 64-bit words with
    numpy, several times faster than sorting byte strings; byte columns equal in every key (the NULL
    marker) are dropped first, so a 9-byte int64 key sorts as one word. Other keys go through Arrow.
    """
    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    width = len(keys[0])
    if width and min(map(len, keys)) == max(map(len, keys)):
        raw = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(n, width)
        raw = raw[:, ~np.all(raw == raw[0], axis=0)]
        if raw.shape[1] == 0:
            return np.zeros(n, dtype=np.int64), 1
        words = -(-raw.shape[1] // 8)
        padded = np.zeros((n, words * 8), dtype=np.uint8)
        padded[:, : raw.shape[1]] = raw
        columns = padded.view(">u8").astype(np.uint64)
        order = np.lexsort(columns.T[::-1]) if words > 1 else np.argsort(columns[:, 0], kind="stable")
        ordered = columns[order]
        new_value = np.ones(n, dtype=bool)
        new_value[1:] = np.any(ordered[1:] != ordered[:-1], axis=1)
        dense = np.cumsum(new_value) - 1
        ranks = np.empty(n, dtype=np.int64)
        ranks[order] = dense
        return ranks, int(dense[-1]) + 1
    ranked = pc.rank(pa.array(keys, pa.binary()), sort_keys="ascending", tiebreaker="dense")
    ranks = ranked.to_numpy().astype(np.int64) - 1
    return ranks, int(ranks.max()) + 1


def rank_words(
    lows: npt.NDArray[np.uint64], highs: npt.NDArray[np.uint64], groups: IntArray | None = None
) -> tuple[IntArray, int]:
    """Dense int32 ranks of two arrays of numbers (one set of ranks), freeing each temporary as soon as it is
    spent: a million-file table's keys are two million numbers, and `np.unique` with its inverse holds about
    twice as much at once. The words are sorted in place after the argsort instead of gathered through it (a
    second sort costs less than a third full-size array). With `groups` (each file's partition, in the order of
    the partitions' keys) a number ranks within its group: numbers of two groups never tie."""
    words = np.concatenate([lows, highs])
    if not len(words):
        return np.zeros(0, dtype=np.int32), 0
    if groups is None:
        order = np.argsort(words)
        words.sort()
        new_value = np.empty(len(words), dtype=bool)
        new_value[0] = True
        np.not_equal(words[1:], words[:-1], out=new_value[1:])
    else:
        both = np.concatenate([groups, groups])
        order = np.argsort(words)  # then by group, stably (a radix sort for up to 32,768 groups): twice lexsort's speed
        grouped = both[order].astype(np.int16) if int(both.max()) < 1 << 15 else both[order]
        order = order[np.argsort(grouped, kind="stable")]
        del grouped
        words, both = words[order], both[order]
        new_value = np.empty(len(words), dtype=bool)
        new_value[0] = True
        np.not_equal(words[1:], words[:-1], out=new_value[1:])
        new_value[1:] |= both[1:] != both[:-1]
        del both
    del words
    dense = np.cumsum(new_value, dtype=np.int32)
    del new_value
    dense -= 1
    ranks = np.empty(len(dense), dtype=np.int32)
    ranks[order] = dense
    return ranks, int(dense[-1]) + 1


def dense_ranks(lo: IntArray, hi: IntArray) -> tuple[IntArray, IntArray, int]:
    """Ranks of some blocks' ends (ranks among more keys) made dense among these ends alone."""
    points, inverse = np.unique(np.concatenate([lo, hi]), return_inverse=True)
    inverse = inverse.astype(np.int64)
    return inverse[: len(lo)], inverse[len(lo) :], len(points)


def as_words(keys: Sequence[bytes | None]) -> npt.NDArray[np.uint64] | None:
    """Keys that are all one number (the value marker, then 8 bytes) as the unsigned words they order as; None
    stays 0 (an unclustered block's key is never compared). None when some key has another shape."""
    blank = bytes(ONE_NUMBER_KEY_BYTES)
    filled = [blank if k is None else k for k in keys]
    if set(map(len, filled)) - {ONE_NUMBER_KEY_BYTES}:
        return None
    raw = np.frombuffer(b"".join(filled), dtype=np.uint8).reshape(-1, ONE_NUMBER_KEY_BYTES)
    if not np.all((raw[:, 0] == VALUE_MARKER[0]) | np.array([k is None for k in keys], dtype=bool)):
        return None
    raw = raw[:, 1:]
    words: npt.NDArray[np.uint64] = np.ascontiguousarray(raw).view(">u8").ravel().astype(np.uint64)
    return words


def word_key(word: int) -> bytes:
    """The key a word of `as_words` stands for (the value marker, then its 8 bytes)."""
    return VALUE_MARKER + int(word).to_bytes(8, "big")


def key_arrays(
    min_keys: Sequence[bytes | None], max_keys: Sequence[bytes | None]
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """Keys as `BlockTable` holds them: words when every one is one number, else bytes objects (both alike)."""
    low_words, high_words = as_words(min_keys), as_words(max_keys)
    if low_words is not None and high_words is not None:
        return low_words, high_words
    lows, highs = np.empty(len(min_keys), dtype=object), np.empty(len(max_keys), dtype=object)
    lows[:], highs[:] = min_keys, max_keys
    return lows, highs
