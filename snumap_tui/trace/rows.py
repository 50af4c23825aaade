"""Fast whole-row copies of structured (record) arrays such as EVENT_DTYPE.

Why: numpy copies a structured array that is not an aligned struct (EVENT_DTYPE is 37 packed
bytes) field by field and item by item when it concatenates, masks, fancy-indexes or copies it;
measured with numpy 2.4 on 200 000 events: ``events[order]`` 16 ms, ``events[mask]`` 4 ms,
``np.concatenate`` 5 ms, ``.copy()`` 5 ms. The same rows viewed as opaque ``V<itemsize>``
items (or taken with ``np.take``) are copied as plain bytes: 0.4-1 ms. The result is viewed
back as the original dtype, so callers see the same values.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _void(a: np.ndarray) -> np.ndarray:
    return a.view(np.dtype((np.void, a.dtype.itemsize)))


def take_rows(a: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``a[index]`` (integer indexes or a boolean mask) as a new array."""
    if index.dtype == bool:
        index = np.flatnonzero(index)
    return np.take(a, index)


def sort_rows(a: np.ndarray, order: np.ndarray) -> None:
    """``a[:] = a[order]`` in place for a permutation ORDER of a's rows, moving only the rows
    that change place: the rows a permutation moves are sent among themselves, so batches
    that overlap in time only near their seams move only the rows there. A must be
    contiguous (a copy of its own, such as concat_rows gives)."""
    if a.size != order.size or not a.flags.c_contiguous:
        raise ValueError("sort_rows: a permutation of a contiguous array's rows is needed")
    moved = np.flatnonzero(order != np.arange(order.size, dtype=order.dtype))
    if moved.size:
        v = _void(a)
        v[moved] = np.take(v, order[moved])


def concat_rows(parts: Sequence[np.ndarray]) -> np.ndarray:
    """``np.concatenate(parts)`` of arrays of one structured dtype."""
    if len(parts) == 1:
        return copy_rows(parts[0])
    dtype = parts[0].dtype
    if any(p.dtype != dtype for p in parts):
        raise ValueError("concat_rows: the parts have different dtypes")
    return np.concatenate([_void(np.ascontiguousarray(p)) for p in parts]).view(dtype)


def copy_rows(a: np.ndarray) -> np.ndarray:
    """``a.copy()``."""
    return _void(np.ascontiguousarray(a)).copy().view(a.dtype)


def insert_rows(a: np.ndarray, at: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``np.insert(a, at, rows)``: each of ROWS goes before ``a[at[i]]`` (AT nondecreasing;
    ``len(a)`` appends), in the order given."""
    out = np.empty(len(a) + len(rows), dtype=a.dtype)
    new_at = np.asarray(at, dtype=np.int64) + np.arange(len(rows))
    is_new = np.zeros(len(out), dtype=bool)
    is_new[new_at] = True
    ov = _void(out)
    ov[new_at] = _void(np.ascontiguousarray(rows))
    ov[~is_new] = _void(np.ascontiguousarray(a))
    return out
