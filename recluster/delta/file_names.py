"""The names of the files recluster wrote, read for every file of a snapshot at once
(docs/architecture.md#blocks-as-columns).

A table recluster keeps holds millions of files named `part-L02-k3f9a1c07-r<run>-[h<horizon>-][c<low>-<high>-]
<uuid>.parquet` (`core.blocks.data_file_name`). A regular expression per name (even Arrow's) costs a second per
million names and a struct of string columns; these names have four fixed layouts, told apart by their length, so
every name is checked and read at fixed byte offsets from its end, with numpy, a chunk of names at a time.
`core.blocks.parse_data_file_name` stays the definition: a property test holds the two equal.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from recluster.core.block_table import NO_HORIZON
from recluster.core.ranks import IntArray

_UUID_HEX = 32
_SUFFIX = b".parquet"
_CHUNK = 1 << 14
"""Names checked at once (a chunk's byte window and its index: under 16 MB)."""


@dataclass(frozen=True, slots=True)
class FileNames:
    """What the names of the files recluster wrote say, for every file at once (`core.blocks` names them)."""

    fingerprints: list[str | None]
    """Distinct fingerprints; index 0 is None (a file recluster did not write)."""
    fingerprint_codes: IntArray
    levels: IntArray
    run_numbers: IntArray
    horizons: IntArray
    curve_lows: IntArray
    curve_highs: IntArray


@dataclass(frozen=True, slots=True)
class _Layout:
    """Byte offsets of one name layout: fixed characters, hex fields (start, width) and the length."""

    length: int
    literals: tuple[tuple[int, bytes], ...]
    fields: dict[str, tuple[int, int]]


def _layout(horizon: bool, curve: bool) -> _Layout:
    literals: list[tuple[int, bytes]] = [(0, b"part-L"), (8, b"-k"), (18, b"-r"), (32, b"-")]
    fields = {"fingerprint": (10, 8), "run": (20, 12)}
    at = 33
    if horizon:
        literals += [(at, b"h"), (at + 13, b"-")]
        fields["horizon"] = (at + 1, 12)
        at += 14
    if curve:
        literals += [(at, b"c"), (at + 11, b"-"), (at + 22, b"-")]
        fields["curve_low"], fields["curve_high"] = (at + 1, 10), (at + 12, 10)
        at += 23
    fields["uuid"] = (at, _UUID_HEX)
    literals.append((at + _UUID_HEX, _SUFFIX))
    return _Layout(at + _UUID_HEX + len(_SUFFIX), tuple(literals), fields)


_LAYOUTS = tuple(_layout(horizon, curve) for horizon in (False, True) for curve in (False, True))


_IS_HEX = np.zeros(256, dtype=bool)
_IS_HEX[list(b"0123456789abcdef")] = True
_HEX_DIGIT = np.zeros(256, dtype=np.int64)
_HEX_DIGIT[list(b"0123456789abcdef")] = range(16)


def _is_hex(window: npt.NDArray[np.uint8], start: int, width: int) -> npt.NDArray[np.bool_]:
    """Whether the field at [start, start + width) of each row is lowercase hex (one table lookup per byte)."""
    return np.asarray(_IS_HEX[window[:, start : start + width]].all(axis=1), dtype=bool)


def _hex_value(window: npt.NDArray[np.uint8], start: int, width: int) -> IntArray:
    """The hex field at [start, start + width) of each row as a number (at most 15 digits)."""
    value: IntArray = _HEX_DIGIT[window[:, start : start + width]] @ (
        16 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    )
    return value


def _empty(count: int) -> FileNames:
    """No file recluster wrote: constant columns that hold no memory."""
    none = np.broadcast_to(np.int64(-1), (count,))
    zero = np.broadcast_to(np.int64(0), (count,))
    return FileNames([None], zero, zero, zero, none, none, none)


def parse_file_names(paths: pa.Array | pa.ChunkedArray) -> FileNames:
    """`core.blocks.parse_data_file_name` of every path; a file recluster did not write has no fingerprint, level 0,
    no horizon and no curve range. Read chunk by chunk where the paths came (no copy of a million paths)."""
    chunks = paths.chunks if isinstance(paths, pa.ChunkedArray) else [paths]
    count = len(paths)
    names = _Found(count)
    base = 0
    for chunk in chunks:
        strings = chunk if chunk.type == pa.string() else chunk.cast(pa.string())
        if len(strings) and strings.buffers()[2] is not None:
            _read_names(strings, base, names)
        base += len(strings)
    return names.result()


class _Found:
    """The fields found so far; columns are made when the first name of ours is."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.names: FileNames | None = None
        self.fingerprint_codes: dict[bytes, int] = {}

    def columns(self) -> FileNames:
        if self.names is None:
            count = self.count
            self.names = FileNames(
                [None],
                np.zeros(count, dtype=np.int32),
                np.zeros(count, dtype=np.int8),
                np.zeros(count, dtype=np.int64),
                np.full(count, NO_HORIZON, dtype=np.int64),
                np.broadcast_to(np.int64(-1), (count,)),  # made when a name with a curve range is found
                np.broadcast_to(np.int64(-1), (count,)),
            )
        return self.names

    def curve_columns(self) -> FileNames:
        names = self.columns()
        if not names.curve_lows.flags.writeable:
            self.names = names = dataclasses.replace(
                names,
                curve_lows=np.full(self.count, -1, dtype=np.int64),
                curve_highs=np.full(self.count, -1, dtype=np.int64),
            )
        return names

    def result(self) -> FileNames:
        if self.names is None:
            return _empty(self.count)
        self.names.fingerprints.extend(f.decode("ascii") for f in self.fingerprint_codes)  # in code order
        return self.names

    def add_fingerprints(self, rows: IntArray, fingerprints: npt.NDArray[np.uint8]) -> None:
        """Code the fingerprints (rows x 8 bytes) of these rows: a table has one or a few, so each chunk's few
        distinct ones are looked up, not every row's."""
        words = np.ascontiguousarray(fingerprints).view(np.uint64).ravel()
        distinct, inverse = np.unique(words, return_inverse=True)
        codes = [self.fingerprint_codes.setdefault(w.tobytes(), len(self.fingerprint_codes) + 1) for w in distinct]
        self.columns().fingerprint_codes[rows] = np.array(codes, dtype=np.int32)[inverse]


def _read_names(strings: pa.Array, base: int, found: _Found) -> None:
    """Check and read the names of one Arrow string array (rows base.. of the whole)."""
    count = len(strings)
    offsets = np.frombuffer(strings.buffers()[1], dtype=np.int32)[strings.offset : strings.offset + count + 1]
    data = np.frombuffer(strings.buffers()[2], dtype=np.uint8)
    begins, ends = offsets[:-1].astype(np.int64), offsets[1:].astype(np.int64)
    for layout in _LAYOUTS:
        if len(data) < layout.length:
            continue
        windows = np.lib.stride_tricks.sliding_window_view(data, layout.length)  # a view: every byte window
        long_enough = np.flatnonzero(ends - begins >= layout.length)
        first = ends[long_enough] - layout.length
        # three bytes decide which names can have this layout at all: the full check reads only those
        likely = (data[first] == ord("p")) & (data[first + 5] == ord("L")) & (data[ends[long_enough] - 8] == ord("."))
        candidates = long_enough[likely]
        for rows in np.array_split(candidates, max(1, -(-len(candidates) // _CHUNK))):
            if not len(rows):
                continue
            start = ends[rows] - layout.length
            window = windows[start]  # one row copy per name (no index per byte)
            ok = (start == begins[rows]) | (data[np.maximum(start - 1, 0)] == ord("/"))  # the whole base name
            for at, literal in layout.literals:
                ok &= (window[:, at : at + len(literal)] == np.frombuffer(literal, dtype=np.uint8)).all(axis=1)
            level_chars = window[:, 6:8].astype(np.int64)
            constant = (level_chars[:, 0] == ord("-")) & (level_chars[:, 1] == ord("1"))
            ok &= constant | ((level_chars >= ord("0")) & (level_chars <= ord("9"))).all(axis=1)
            for at, width in layout.fields.values():
                ok &= _is_hex(window, at, width)
            if not ok.any():
                continue
            window, level_chars, constant = window[ok], level_chars[ok], constant[ok]
            values = {name: _hex_value(window, *layout.fields[name]) for name in layout.fields if name != "uuid"}
            names = found.columns()
            rows = rows[ok] + base
            names.levels[rows] = np.where(constant, -1, (level_chars[:, 0] - ord("0")) * 10 + level_chars[:, 1] - 48)
            names.run_numbers[rows] = values["run"]
            if "horizon" in values:
                names.horizons[rows] = values["horizon"]
            if "curve_low" in values:
                names = found.curve_columns()
                names.curve_lows[rows], names.curve_highs[rows] = values["curve_low"], values["curve_high"]
            found.add_fingerprints(rows, window[:, 10:18])
