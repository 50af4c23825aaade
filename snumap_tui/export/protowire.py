"""Protocol Buffers wire format, written by hand: scalar fields one at a time, and packed
repeated varint fields for whole numpy arrays at once.

Why by hand: a Perfetto trace of a 10 M-event recording holds millions of varints in packed
fields (CompactSched); building them through protobuf message objects costs microseconds per
value, while numpy encodes an array in a few passes (docs/benchmarks.md, "exports").

Wire format (https://protobuf.dev/programming-guides/encoding/): a field is a key
``(number << 3) | wire_type`` as a varint, then the value; wire type 0 is a varint, 1 a
little-endian 64-bit value, 2 a length-delimited payload (strings, bytes, embedded messages,
packed repeated scalars). Varints are base-128, least significant group first, the high bit
set on every byte but the last. Negative int32/int64 values are sign-extended to 64 bits (ten
bytes); sint* (zig-zag) fields are not used here.
"""

from __future__ import annotations

import struct

import numpy as np

VARINT, I64, LEN = 0, 1, 2

_LIMITS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)


def varint(value: int) -> bytes:
    """One varint; negative values as their 64-bit two's complement (ten bytes)."""
    v = value & 0xFFFF_FFFF_FFFF_FFFF
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def key(number: int, wire_type: int) -> bytes:
    return varint((number << 3) | wire_type)


def f_varint(number: int, value: int) -> bytes:
    """A varint field (int32/int64/uint32/uint64/bool/enum)."""
    return key(number, VARINT) + varint(value)


def f_double(number: int, value: float) -> bytes:
    return key(number, I64) + struct.pack("<d", value)


def f_bytes(number: int, payload: bytes) -> bytes:
    """A length-delimited field: an embedded message, bytes, or a packed repeated field."""
    return key(number, LEN) + varint(len(payload)) + payload


def f_str(number: int, text: str) -> bytes:
    return f_bytes(number, text.encode("utf-8", "surrogateescape"))


def varint_lengths(v: np.ndarray) -> np.ndarray:
    """Bytes each value of the uint64 array ``v`` takes as a varint (1..10)."""
    n = np.ones(len(v), dtype=np.int64)
    top = int(v.max()) if len(v) else 0
    for lim in _LIMITS:
        if int(lim) > top:
            break
        n += v >= lim
    return n


def as_wire(values: np.ndarray) -> np.ndarray:
    """Integers as the uint64 their varint encodes (negative ones sign-extended)."""
    a = np.asarray(values)
    if a.dtype.kind == "u":
        return a.astype(np.uint64, copy=False)
    return a.astype(np.int64, copy=False).view(np.uint64)


def encode_varints(values: np.ndarray) -> tuple[bytes, np.ndarray]:
    """The varints of every value, back to back, and the byte offset where each value starts
    (len n + 1, so value i is ``out[off[i]:off[i + 1]]``): a run of values is one slice."""
    v = as_wire(values)
    n = varint_lengths(v)
    off = np.zeros(len(v) + 1, dtype=np.int64)
    np.cumsum(n, out=off[1:])
    if not len(v):
        return b"", off
    width = int(n.max())
    if width == 1:
        return v.astype(np.uint8).tobytes(), off
    grid = np.empty((len(v), width), dtype=np.uint8)
    for k in range(width):
        grid[:, k] = (v >> np.uint64(7 * k)).astype(np.uint8) & 0x7F
    more = np.arange(width)[None, :] < (n - 1)[:, None]     # continuation bits
    grid |= more.view(np.uint8) << 7
    keep = np.arange(width)[None, :] < n[:, None]
    return grid[keep].tobytes(), off


def packed(number: int, data: bytes) -> bytes:
    """A packed repeated field from already encoded varints (empty: no field at all)."""
    return f_bytes(number, data) if data else b""
