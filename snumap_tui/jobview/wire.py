"""The line format of a node's frame stream (``snumap top --stream``), both directions, pure.

A *record* is a small JSON header plus named numpy arrays (raw bytes after the header),
zlib-compressed and base64-encoded, then cut into text lines of at most ``MAX_LINE`` bytes::

    SJ1 <kind><seq> <i>/<n> <base64 piece>

Slurm forwards a task's output to srun in messages of at most 1 KiB (``SLURM_IO_MAX_MSG_LEN``);
a longer line is cut into several messages, and srun may write another node's message between
two of them. Lines under that size arrive whole, so N nodes' streams over one srun stdout never
mix inside a line (``srun --label`` says whose line it is). Kinds: ``T`` the node (topology,
host, sources) once, ``F`` one interval's arrays, ``E`` the sampler's last words.

Decoding is bounded: a record has at most ``MAX_PIECES`` pieces and inflates to at most
``MAX_RECORD`` bytes; arrays must fit the bytes they claim. What does not parse is dropped and
counted (``Assembler.bad``), never raised: a node's stream is another process's output.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import sys
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MAGIC = b"SJ1"
MAX_LINE = 1000
PIECE = MAX_LINE - 32               # the base64 characters of one line
MAX_PIECES = 4096                   # ~4 MB of base64: the largest topology's record
MAX_RECORD = 16 << 20               # what one record may inflate to
KINDS = frozenset("TFE")
DTYPES = frozenset({"<f4", "<f8", "<i4", "<i8", "<i2", "<u2", "<u1", "|u1", "<u4"})
_DTYPES = {d: np.dtype(d) for d in DTYPES}
_KIND = {k.encode(): k for k in KINDS}
#: zlib inflates a byte to at most ~1,032: a body this small cannot exceed MAX_RECORD, and
#: inflates in one call without the bounded decompressor's set-up
_SMALL = MAX_RECORD // 1100

if sys.version_info >= (3, 11):
    def _unbase64(b: bytes) -> bytes:
        return binascii.a2b_base64(b, strict_mode=True)   # b64decode(validate=True)'s check
else:                                                       # pragma: no cover
    def _unbase64(b: bytes) -> bytes:
        return base64.b64decode(b, validate=True)
_JSON = json.JSONDecoder()


@dataclass
class Record:
    kind: str
    seq: int
    header: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


def _specs(arrays: dict[str, np.ndarray] | None) -> tuple[list[list[Any]], list[bytes]]:
    specs, blobs = [], []
    for name, arr in (arrays or {}).items():
        a = np.ascontiguousarray(arr)
        if a.dtype.str not in DTYPES:
            raise ValueError(f"array {name}: dtype {a.dtype.str}")
        specs.append([name, a.dtype.str, list(a.shape)])
        blobs.append(a.tobytes())
    return specs, blobs


def _lines(kind: str, seq: int, head: dict[str, Any], blobs: list[bytes], level: int) -> bytes:
    raw = json.dumps(head, separators=(",", ":")).encode()
    body = base64.b64encode(zlib.compress(raw + b"\n" + b"".join(blobs), level))
    pieces = [body[i:i + PIECE] for i in range(0, len(body), PIECE)] or [b""]
    n = len(pieces)
    tag = MAGIC + b" " + kind.encode() + str(seq).encode() + b" "
    return b"".join(tag + f"{i}/{n} ".encode() + p + b"\n" for i, p in enumerate(pieces))


def encode(kind: str, seq: int, header: dict[str, Any],
           arrays: dict[str, np.ndarray] | None = None, level: int = 6) -> bytes:
    """One record as text lines (each ending in a newline, each at most MAX_LINE bytes)."""
    if kind not in KINDS:
        raise ValueError(f"record kind {kind!r}")
    specs, blobs = _specs(arrays)
    return _lines(kind, seq, {**header, "_a": specs}, blobs, level)


#: The parts of an F header that rarely change (the metrics' names, the processes' names and
#: steps, the threads' affinities, the arrays' shapes): sent when they change and every
#: FULL_EVERY frames, else replaced by ``"=": 1`` ("as the last full one").
STATIC = ("m", "comm", "step", "affs", "numa", "_a")
FULL_EVERY = 30


class Encoder:
    """One stream's F records, their static part sent only when it changed (STATIC)."""

    def __init__(self) -> None:
        self._last: dict[str, Any] | None = None
        self._since = 0

    def frame(self, seq: int, header: dict[str, Any], arrays: dict[str, np.ndarray],
              level: int = 6) -> bytes:
        specs, blobs = _specs(arrays)
        head = {**header, "_a": specs}
        static = {k: head[k] for k in STATIC if k in head}
        if static == self._last and self._since < FULL_EVERY:
            self._since += 1
            head = {k: v for k, v in head.items() if k not in STATIC} | {"=": 1}
        else:
            self._last, self._since = static, 0
        return _lines("F", seq, head, blobs, level)


#: A record's arrays as decoded from its header's ``_a``: (name, dtype, items, shape) each.
Layout = list[tuple[str, np.dtype, int, tuple[int, ...]]]


def _layout(specs: Any) -> Layout | None:
    """The header's array specs, checked (None when they are not the format's)."""
    if not isinstance(specs, list):
        return None
    out: Layout = []
    for spec in specs:
        try:
            name, dt, shape = spec
            if dt not in DTYPES or not isinstance(name, str):
                return None
            shape = tuple(int(s) for s in shape)
        except (TypeError, ValueError):
            return None
        if any(s < 0 for s in shape) or len(shape) > 2:
            return None
        out.append((name, _DTYPES[dt], math.prod(shape), shape))
    return out


@dataclass
class Static:
    """The last full F header's static part (STATIC) and its arrays' layout, checked once:
    what a header saying ``"=": 1`` takes."""
    header: dict[str, Any]
    layout: Layout


def decode_body(kind: str, seq: int, b64: bytes,
                static: Static | None = None) -> tuple[Record, Static | None] | None:
    """A whole record's base64 body -> (Record, the static part an F record gives the next
    ones), or None when it is not one. STATIC: the last full F record's (``"=": 1``)."""
    try:
        # parse_line let only the base64 alphabet through: strict mode checks the padding
        raw = _unbase64(b64)
        if len(raw) <= _SMALL:
            data = zlib.decompress(raw)
        else:
            d = zlib.decompressobj()
            data = d.decompress(raw, MAX_RECORD)
            if d.unconsumed_tail or not d.eof:
                return None
        head_end = data.index(b"\n")
        text = data[:head_end].decode("utf-8")
        header, end = _JSON.raw_decode(text)      # json.loads' detection of bytes costs more
        if end != len(text):
            return None
    except (binascii.Error, zlib.error, ValueError, RecursionError):
        return None
    if not isinstance(header, dict):
        return None
    if header.pop("=", None) is not None:
        if static is None or kind != "F":
            return None
        header.pop("_a", None)
        header.update(static.header)
        layout = static.layout
    else:
        got = _layout(header.pop("_a", []))
        if got is None:
            return None
        layout = got
        if kind == "F":
            static = Static({k: header[k] for k in STATIC if k in header}, layout)
    arrays: dict[str, np.ndarray] = {}
    pos = head_end + 1
    for name, dtype, count, shape in layout:
        size = dtype.itemsize * count
        if pos + size > len(data):
            return None
        # one constructor call: a view of the inflated bytes (read-only, as frombuffer's)
        arrays[name] = np.ndarray(shape, dtype, data, pos)
        pos += size
    if pos != len(data):
        return None             # arrays that do not fill the record: not what was written
    return Record(kind, seq, header, arrays), static


#: A line of the format: kind, sequence number, piece i of n, the piece (base64 characters
#: only, so that the body decodes without a second check of its alphabet).
_LINE = re.compile(rb"SJ1 ([TFE])([0-9]{1,18}) ([0-9]{1,5})/([0-9]{1,5}) ([A-Za-z0-9+/=]*)\r?\n?")


def parse_line(line: bytes) -> tuple[str, int, int, int, bytes] | None:
    """``SJ1 F12 0/3 <piece>`` -> (kind, seq, i, n, piece); None for any other line."""
    m = _LINE.fullmatch(line)
    if m is None or len(line) > MAX_LINE + 1:
        return None
    kind, seq, i_s, n_s, piece = m.groups()
    i, n = int(i_s), int(n_s)
    if not 0 <= i < n <= MAX_PIECES:
        return None
    return _KIND[kind], int(seq), i, n, piece


class Assembler:
    """One stream's lines -> its records. Pieces of one record arrive in order (one node's
    output keeps its order); a piece out of place drops the record it would belong to."""

    def __init__(self) -> None:
        self._key: tuple[str, int, int] | None = None
        self._pieces: list[bytes] = []
        self.bad = 0              # lines or records that did not parse
        self._static: Static | None = None
        self.other: list[bytes] = []   # the last few lines that were not the format's

    def feed(self, line: bytes) -> Record | None:
        p = parse_line(line)
        if p is None:
            if line.strip():
                self.bad += 1
                self.other = [*self.other[-4:], line.rstrip()[:200]]
            return None
        kind, seq, i, n, piece = p
        if i == 0:
            if self._key is not None:
                self.bad += 1                     # the previous record never ended
            self._key, self._pieces = (kind, seq, n), []
        elif self._key != (kind, seq, n) or len(self._pieces) != i:
            self.bad += 1
            self._key, self._pieces = None, []
            return None
        self._pieces.append(piece)
        if len(self._pieces) < n:
            return None
        self._key = None
        got = decode_body(kind, seq, b"".join(self._pieces), self._static)
        self._pieces = []
        if got is None:
            self.bad += 1
            return None
        rec, self._static = got
        return rec


# ---- the F record's layout: few arrays, a small header (decoding cost is per array and per
# ---- JSON byte, and the aggregator decodes every node's frame every interval) -------------

T_PID, T_TID, T_RANK, T_PU, T_AFF = range(5)      # columns of the threads array "t"
P_PID, P_RANK, P_RSS = range(3)                   # columns of "p"; memory per node after


def pack_frame(t_ns: int, wall_ns: int, dt_s: float, metrics: dict[str, np.ndarray],
               threads: list[tuple[int, int, int, int, float, str]],
               procs: list[dict[str, Any]], extra: dict[str, Any] | None = None
               ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """One interval as (header, arrays). METRICS: name -> value per topology object;
    THREADS: (pid, tid, rank or -1, last PU, CPU %, affinity as a cpulist); PROCS: {pid,
    rank, comm, step, rss, numa: {node OS index: bytes}}."""
    names = list(metrics)
    arrays: dict[str, np.ndarray] = {}
    if names:
        arrays["m"] = np.vstack([metrics[n] for n in names]).astype(np.float32)
    affs: dict[str, int] = {}
    if threads:
        arrays["t"] = np.array([(p, t, r, pu, affs.setdefault(a, len(affs)))
                                for p, t, r, pu, _c, a in threads], dtype=np.int32)
        arrays["c"] = np.array([c for *_x, c, _a in threads], dtype=np.float32)
    nodes = sorted({int(n) for p in procs for n in (p.get("numa") or {})})
    if procs:
        rows = np.full((len(procs), 3 + len(nodes)), np.nan)
        for i, p in enumerate(procs):
            rows[i, P_PID] = p["pid"]
            rows[i, P_RANK] = -1 if p.get("rank") is None else p["rank"]
            if p.get("rss") is not None:
                rows[i, P_RSS] = p["rss"]
            for n, b in (p.get("numa") or {}).items():
                rows[i, 3 + nodes.index(int(n))] = b
        arrays["p"] = rows
    head = {"t": t_ns, "wall": wall_ns, "dt": dt_s, "m": names,
            "comm": [str(p.get("comm", "?")) for p in procs],
            "step": [str(p.get("step", "")) for p in procs],
            "affs": list(affs), "numa": nodes, **(extra or {})}
    return head, arrays
