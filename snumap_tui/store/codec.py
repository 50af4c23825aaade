"""A small tagged binary encoding for the values a Sample's readings hold (docs/format.md, "Values").

Why not pickle or JSON: pickle runs code on load (a recording is a file users pass around) and
JSON loses numpy dtypes, shapes, tuples, non-string dict keys and NaN fidelity. This encoding is
lossless for what the readings contract allows (None, bool, int, float, str, bytes, list, tuple,
dict with any such keys, numpy arrays of plain dtypes and numpy scalars) and is specified byte by
byte, so a future snumap (or another language) can read it without this code.

Every value is one tag byte then its data, little-endian. Arrays whose items are wider than one
byte may be stored byte-shuffled (all first bytes, then all second bytes, ...): zstd then sees
long runs of equal high bytes and compresses timestamps and counters several times better.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

# Tags: one ASCII byte each, so a hex dump of an uncompressed payload is readable.
T_NONE, T_TRUE, T_FALSE = b"N", b"T", b"F"
T_INT, T_BIGINT, T_FLOAT = b"i", b"I", b"f"
T_STR, T_BYTES = b"s", b"b"
T_LIST, T_TUPLE, T_DICT = b"l", b"t", b"d"
T_ARRAY, T_SCALAR = b"a", b"x"

LAYOUT_PLAIN, LAYOUT_SHUFFLED = 0, 1
_LAYOUT = {False: bytes([LAYOUT_PLAIN]), True: bytes([LAYOUT_SHUFFLED])}

_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_INT_MIN, _INT_MAX = -(2 ** 63), 2 ** 63 - 1
# Plain numeric and string kinds; object and structured arrays are refused (not lossless
# without pickle, and nothing in the readings contract needs them).
_ARRAY_KINDS = frozenset("biufcUSmM")


class DecodeError(ValueError):
    """The payload does not follow the encoding (a damaged chunk that passed its CRC is a bug
    or a newer writer; the reader reports it like a damaged chunk)."""


def shuffle_bytes(arr: np.ndarray) -> bytes:
    """The array's bytes regrouped by byte position (what zstd compresses best)."""
    w = arr.dtype.itemsize
    flat = np.ascontiguousarray(arr).reshape(-1)
    if w == 1 or flat.size == 0:
        return flat.tobytes()
    return flat.view(np.uint8).reshape(-1, w).T.tobytes()


def unshuffle_bytes(data: bytes | memoryview, dtype: np.dtype, count: int) -> np.ndarray:
    """Inverse of ``shuffle_bytes``: a new writable 1-D array of ``count`` items."""
    w = dtype.itemsize
    raw = np.frombuffer(data, dtype=np.uint8, count=count * w)
    if w == 1 or count == 0:
        return raw.view(dtype).copy()
    # One strided write per byte position (a contiguous read each) is several times faster
    # than numpy's copy of the transposed (w, count) byte matrix.
    planes = raw.reshape(w, count)
    out = np.empty((count, w), dtype=np.uint8)
    for j in range(w):
        out[:, j] = planes[j]
    return out.view(dtype).reshape(count)


def _dtype_bytes(dt: np.dtype) -> bytes:
    s = dt.str.encode("ascii")
    return bytes([len(s)]) + s


# An array's header before its shape, per (dtype, ndim): a recording at 1 ms encodes thousands
# of small arrays a second, and building this each time was a tenth of the encoding.
_ARRAY_HEAD: dict[tuple[np.dtype, int], bytes] = {}


def _array_head(dt: np.dtype, ndim: int) -> bytes:
    key = (dt, ndim)
    head = _ARRAY_HEAD.get(key)
    if head is None:
        if dt.kind not in _ARRAY_KINDS or dt.fields is not None:
            raise TypeError(f"cannot store numpy arrays of dtype {dt}")
        head = T_ARRAY + _dtype_bytes(dt) + bytes([ndim])
        if len(_ARRAY_HEAD) < 1024:
            _ARRAY_HEAD[key] = head
    return head


def encode(value: Any, shuffle: bool = True) -> bytes:
    """Encode one value (recursively) to bytes."""
    out: list[bytes] = []
    _enc(value, out, shuffle)
    return b"".join(out)


def _enc(v: Any, out: list[bytes], shuffle: bool) -> None:
    t = type(v)
    # the commonest types first, by exact type (a sample is dicts of ints, strs and arrays);
    # their subclasses take the general chain below (numpy's float64 and str_ are scalars)
    if t is dict:
        _enc_dict(v, out, shuffle)
    elif t is str:
        _enc_str(v, out)
    elif t is int and _INT_MIN <= v <= _INT_MAX:
        out.append(T_INT + _I64.pack(v))
    elif t is np.ndarray:
        _enc_array(v, out, shuffle)
    elif t is float:
        out.append(T_FLOAT + _F64.pack(v))
    elif v is None:
        out.append(T_NONE)
    elif v is True or v is False:
        out.append(T_TRUE if v else T_FALSE)
    elif isinstance(v, np.ndarray):
        _enc_array(v, out, shuffle)
    elif isinstance(v, np.generic):
        if v.dtype.kind not in _ARRAY_KINDS:
            raise TypeError(f"cannot store numpy scalars of dtype {v.dtype}")
        data = v.tobytes()
        out.append(T_SCALAR + _dtype_bytes(v.dtype) + _U32.pack(len(data)) + data)
    elif isinstance(v, int):
        if _INT_MIN <= v <= _INT_MAX:
            out.append(T_INT + _I64.pack(v))
        else:
            s = str(v).encode("ascii")
            out.append(T_BIGINT + _U32.pack(len(s)) + s)
    elif isinstance(v, float):
        out.append(T_FLOAT + _F64.pack(v))
    elif isinstance(v, str):
        _enc_str(v, out)
    elif isinstance(v, (bytes, bytearray, memoryview)):
        b = bytes(v)
        out.append(T_BYTES + _U32.pack(len(b)) + b)
    elif isinstance(v, (list, tuple)):
        out.append((T_TUPLE if isinstance(v, tuple) else T_LIST) + _U32.pack(len(v)))
        for item in v:
            _enc(item, out, shuffle)
    elif isinstance(v, dict):
        _enc_dict(v, out, shuffle)
    else:
        raise TypeError(f"cannot store a value of type {type(v).__name__}")


def _enc_dict(v: dict[Any, Any], out: list[bytes], shuffle: bool) -> None:
    out.append(T_DICT + _U32.pack(len(v)))
    for k, item in v.items():
        _enc(k, out, shuffle)
        _enc(item, out, shuffle)


def _enc_str(v: str, out: list[bytes]) -> None:
    b = v.encode("utf-8", "surrogatepass")
    out.append(T_STR + _U32.pack(len(b)) + b)


def _enc_array(v: np.ndarray, out: list[bytes], shuffle: bool) -> None:
    head = _array_head(v.dtype, v.ndim)
    shuf = shuffle and v.dtype.itemsize > 1 and v.size > 1
    data = shuffle_bytes(v) if shuf else np.ascontiguousarray(v).tobytes()
    out.append(head + b"".join([_U64.pack(d) for d in v.shape])
               + _LAYOUT[shuf] + _U64.pack(len(data)))
    out.append(data)


# Bounds on what one payload may make a reader build: nesting (the decoder recurses; a crafted
# payload of 10 000 nested lists is 50 kB) and items (a list of 200 M one-byte Nones is 200 MB
# on disk but 1.6 GB of pointers). Real payloads nest ~5 deep and hold thousands of items
# (arrays count as one).
MAX_DEPTH = 32
MAX_ITEMS = 1 << 22


class _Budget:
    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items = MAX_ITEMS


def decode(data: bytes | memoryview) -> Any:
    """Decode one value that fills ``data`` exactly."""
    mv = memoryview(data)
    try:
        value, end = _dec(mv, 0, 0, _Budget())
    except (struct.error, IndexError, UnicodeDecodeError, TypeError, ValueError,
            OverflowError, MemoryError) as e:
        raise DecodeError(f"malformed value encoding: {e}") from None
    if end != len(mv):
        raise DecodeError(f"{len(mv) - end} stray bytes after the value")
    return value


def _read_dtype(mv: memoryview, pos: int) -> tuple[np.dtype, int]:
    n = mv[pos]
    dt = np.dtype(bytes(mv[pos + 1:pos + 1 + n]).decode("ascii"))
    if dt.kind not in _ARRAY_KINDS:
        raise DecodeError(f"unsupported dtype {dt}")
    return dt, pos + 1 + n


def _take(mv: memoryview, pos: int, n: int) -> memoryview:
    if pos + n > len(mv):
        raise DecodeError("value runs past the end of the payload")
    return mv[pos:pos + n]


def _dec(mv: memoryview, pos: int, depth: int, budget: _Budget) -> tuple[Any, int]:
    tag = bytes(mv[pos:pos + 1])
    pos += 1
    if tag == T_NONE:
        return None, pos
    if tag == T_TRUE:
        return True, pos
    if tag == T_FALSE:
        return False, pos
    if tag == T_INT:
        return _I64.unpack_from(mv, pos)[0], pos + 8
    if tag == T_FLOAT:
        return _F64.unpack_from(mv, pos)[0], pos + 8
    if tag in (T_STR, T_BYTES, T_BIGINT):
        n = _U32.unpack_from(mv, pos)[0]
        raw = bytes(_take(mv, pos + 4, n))
        pos += 4 + n
        if tag == T_STR:
            return raw.decode("utf-8", "surrogatepass"), pos
        if tag == T_BYTES:
            return raw, pos
        return int(raw.decode("ascii")), pos
    if tag in (T_LIST, T_TUPLE, T_DICT):
        if depth >= MAX_DEPTH:
            raise DecodeError(f"values nested deeper than {MAX_DEPTH} levels")
        n = _U32.unpack_from(mv, pos)[0]
        budget.items -= n
        # Each item takes at least one byte (two for a map entry): a count the rest of the
        # payload cannot hold is refused before any loop runs.
        if budget.items < 0 or n * (2 if tag == T_DICT else 1) > len(mv) - pos - 4:
            raise DecodeError(f"a container of {n} items cannot be in this payload")
    if tag in (T_LIST, T_TUPLE):
        pos += 4
        items = []
        for _ in range(n):
            item, pos = _dec(mv, pos, depth + 1, budget)
            items.append(item)
        return (tuple(items) if tag == T_TUPLE else items), pos
    if tag == T_DICT:
        pos += 4
        d: dict[Any, Any] = {}
        for _ in range(n):
            k, pos = _dec(mv, pos, depth + 1, budget)
            d[k], pos = _dec(mv, pos, depth + 1, budget)
        return d, pos
    if tag == T_ARRAY:
        dt, pos = _read_dtype(mv, pos)
        ndim = mv[pos]
        pos += 1
        shape = tuple(_U64.unpack_from(mv, pos + 8 * i)[0] for i in range(ndim))
        pos += 8 * ndim
        layout = mv[pos]
        nbytes = _U64.unpack_from(mv, pos + 1)[0]
        pos += 9
        count = math.prod(shape)  # Python ints: a crafted shape cannot wrap around
        if count * dt.itemsize != nbytes:
            raise DecodeError("array size does not match its shape")
        view = _take(mv, pos, nbytes)
        if layout == LAYOUT_SHUFFLED:
            arr = unshuffle_bytes(view, dt, count)
        elif layout == LAYOUT_PLAIN:
            arr = np.frombuffer(view, dtype=dt, count=count).copy()
        else:
            raise DecodeError(f"unknown array layout {layout}")
        return arr.reshape(shape), pos + nbytes
    if tag == T_SCALAR:
        dt, pos = _read_dtype(mv, pos)
        n = _U32.unpack_from(mv, pos)[0]
        view = _take(mv, pos + 4, n)
        return np.frombuffer(view, dtype=dt, count=1)[0], pos + 4 + n
    raise DecodeError(f"unknown tag {tag!r} at byte {pos - 1}")
