"""Columnar encoding of scheduling events (docs/format.md, "Events chunk").

An EVENT_DTYPE row is 37 bytes; stored plainly and compressed it still costs ~15 bytes. The
target is at most 12 bytes per event on disk, so each column is transformed into something
mostly made of zeros and small numbers before zstd sees it:

- events are sorted by time inside a chunk (stable, so same-time events keep their order) and
  ``t_ns`` becomes deltas from the chunk's first time: microsecond gaps need 2-3 bytes, not 8;
- every column is stored in the narrowest integer type that holds it, byte-shuffled;
- a SWITCH's ``tid`` (the task leaving the CPU) is nearly always the ``tid2`` (the task that came
  in) of the previous SWITCH on the same CPU, so it is stored as the difference from that
  prediction: almost always 0;
- ``pid``/``pid2`` (tgids) are functions of the tids: stored as the difference from a small
  per-chunk table tid -> pid, again almost always 0.

All transforms are exact (lossless for any input, including unsorted batches, unknown pids
of -1 and inconsistent switch chains); only the size depends on the data being realistic.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from snumap_tui.trace.events import EVENT_DTYPE, SWITCH

EVENT_FIELDS = EVENT_DTYPE.names or ()
_UNSIGNED = (np.uint8, np.uint16, np.uint32, np.uint64)
_SIGNED = (np.int8, np.int16, np.int32, np.int64)


def narrow(a: np.ndarray) -> np.ndarray:
    """``a`` in the narrowest integer dtype that holds every value exactly."""
    if a.size == 0:
        return a.astype(np.uint8)
    lo, hi = int(a.min()), int(a.max())
    for t in (_UNSIGNED if lo >= 0 else _SIGNED):
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return a.astype(t, copy=False)
    raise OverflowError("value does not fit 64 bits")  # unreachable for int64/uint64 input


def time_order(t: np.ndarray) -> np.ndarray | None:
    """Indexes that sort ``t`` (stable), or None when it is already in order."""
    if t.size < 2 or bool(np.all(t[1:] >= t[:-1])):
        return None
    return np.argsort(t, kind="stable")


def _switch_prediction(cpu: np.ndarray, kind: np.ndarray, tid2: np.ndarray) -> np.ndarray:
    """Predicted ``tid`` per event: for a SWITCH, the ``tid2`` of the previous SWITCH on the same
    CPU in this chunk; 0 otherwise. Depends only on cpu, kind and tid2, so the reader can
    recompute it before it knows ``tid``."""
    pred = np.zeros(cpu.size, dtype=np.int64)
    sw = np.flatnonzero(kind == SWITCH)
    if sw.size < 2:
        return pred
    key = cpu[sw]
    if int(key.max()) < 65536:      # a radix sort: several times faster than a merge sort
        key = key.astype(np.uint16)
    order = sw[np.argsort(key, kind="stable")]  # by cpu, time order kept within a cpu
    del sw, key
    c = cpu[order]
    same = c[1:] == c[:-1]
    del c
    pred[order[1:][same]] = tid2[order[:-1][same]]
    return pred


# A dense lookup table is used when the tids of a chunk span at most this many values; else a
# binary search. The tables are kept per thread and only the entries a call set are cleared
# after it (``_scratch``): a system-wide chunk spans from idle's 0 to a node's newest tid,
# ~4 M once its pids have gone round, and a fresh 16 MB table for each of a chunk's three
# lookups (zeroed pages faulted in, then unmapped) was a third of the Writer's time.
_DENSE_SPAN = 1 << 23
_tables = threading.local()


def _scratch(n: int, dtype: type) -> np.ndarray:
    """N zeros of DTYPE kept for this thread (the caller clears what it sets)."""
    key = np.dtype(dtype).str
    have = getattr(_tables, "arrays", None)
    if have is None:
        have = _tables.arrays = {}
    a = have.get(key)
    if a is None or a.size < n:
        # calloc'd: the pages no tid touches are never faulted in
        a = have[key] = np.zeros(max(n, 1 << 16), dtype=dtype)
    return a[:n]


def _pid_table(tids: np.ndarray, pids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A table tid -> pid, sorted by tid: one of the pids seen with each tid (the table is
    stored, so which one does not matter for correctness; tids map to one pid in practice):
    the last one."""
    if tids.size == 0:
        return np.zeros(0, np.int32), np.zeros(0, np.int32)
    lo, hi = int(tids.min()), int(tids.max())
    if hi - lo < _DENSE_SPAN:
        last = _scratch(hi - lo + 1, np.intp)
        off = (tids.astype(np.int64) - lo).astype(np.intp)
        at = np.arange(1, off.size + 1, dtype=np.intp)
        last[off] = at                               # each tid's last row (1-based)
        keys = np.sort(off[last[off] == at])         # one row per tid, without a span scan
        table_pid = pids[last[keys] - 1].astype(np.int32)
        last[off] = 0
        return (keys + lo).astype(np.int32), table_pid
    # Unsigned keys: (tid + 2^31) << 32 passes 2^63 for every tid >= 0, and signed keys then
    # sorted the negative tids (idle's partners, unknown) after the others.
    key = ((tids.astype(np.int64) + 2**31).astype(np.uint64) << np.uint64(32)) | \
        (pids.astype(np.int64) + 2**31).astype(np.uint64)
    u = np.unique(key)
    k = (u >> np.uint64(32)).astype(np.int64) - 2**31
    last_k = np.ones(u.size, dtype=bool)
    last_k[:-1] = k[1:] != k[:-1]
    return k[last_k].astype(np.int32), \
        ((u[last_k] & np.uint64(0xFFFFFFFF)).astype(np.int64) - 2**31).astype(np.int32)


def _lookup(table_tid: np.ndarray, table_pid: np.ndarray, tids: np.ndarray) -> np.ndarray:
    """table(tid) for every tid (0 where the tid is not in the table), as int64."""
    if table_tid.size == 0 or tids.size == 0:
        return np.zeros(tids.size, dtype=np.int64)
    lo, hi = int(table_tid[0]), int(table_tid[-1])
    if hi - lo < _DENSE_SPAN:
        lut = _scratch(hi - lo + 1, np.int32)
        t_off = table_tid.astype(np.int64) - lo
        lut[t_off] = table_pid
        off = tids.astype(np.int64) - lo
        inside = (off >= 0) & (off <= hi - lo)
        if inside.all():
            out = lut[off].astype(np.int64)
        else:
            out = np.where(inside, lut[np.clip(off, 0, hi - lo)], 0).astype(np.int64)
        lut[t_off] = 0
        return out
    idx = np.searchsorted(table_tid, tids).clip(0, table_tid.size - 1)
    return np.where(table_tid[idx] == tids, table_pid[idx], 0).astype(np.int64)


def encode_events(events: np.ndarray, index: np.ndarray | slice | None = None
                  ) -> tuple[dict[str, Any], int, int]:
    """The payload value of an events chunk, with its t_min and t_max.

    ``index`` selects (and orders) rows of ``events``: indexes, or a slice when the rows are
    already in order (a strided copy per column, cheaper than a gather); it must put them in
    time order. Without it, all rows are taken, sorted by time if needed. Columns are gathered
    one by one (much faster than reordering 37-byte records)."""
    if events.dtype != EVENT_DTYPE:
        events = np.asarray(events, dtype=EVENT_DTYPE)
    if index is None:
        index = time_order(events["t_ns"])

    def col(name: str) -> np.ndarray:
        c = events[name]
        if index is None:
            return np.ascontiguousarray(c)
        if isinstance(index, slice):
            return np.ascontiguousarray(c[index])
        return c[index]

    return encode_columns(col)


def encode_columns(col: Callable[[str], np.ndarray]) -> tuple[dict[str, Any], int, int]:
    """``encode_events`` of the rows whose EVENT_DTYPE columns ``col(name)`` gives (contiguous,
    in time order). Each column is asked for once and its temporaries go as soon as it is
    narrowed: a chunk of 65536 events made about 6 MB of them when all lived together."""
    t = col("t_ns")
    n = int(t.size)
    if n == 0:
        return {"n": 0}, 0, 0
    if n > 1 and not bool(np.all(t[1:] >= t[:-1])):
        raise ValueError("encode_events: index does not put events in time order")
    t0, t1 = int(t[0]), int(t[-1])
    dt = np.empty(n, dtype=np.uint64)
    dt[0] = 0
    np.subtract(t[1:], t[:-1], out=dt[1:])
    del t
    value: dict[str, Any] = {"n": n, "t0": t0, "dt": narrow(dt)}
    del dt
    cpu, kind, tid2 = col("cpu"), col("kind"), col("tid2")
    value.update(cpu=narrow(cpu), kind=kind, tid2=narrow(tid2))
    tid = col("tid")
    pred = _switch_prediction(cpu, kind, tid2)
    del cpu, kind
    np.subtract(tid, pred, out=pred)
    value["tid"] = narrow(pred)
    del pred
    pid, pid2 = col("pid"), col("pid2")
    table_tid, table_pid = _pid_table(np.concatenate([tid, tid2]), np.concatenate([pid, pid2]))
    value.update(pid_table_tid=narrow(table_tid), pid_table_pid=narrow(table_pid))
    value["pid"] = narrow(_minus_lookup(pid, table_tid, table_pid, tid))
    del pid, tid
    value["pid2"] = narrow(_minus_lookup(pid2, table_tid, table_pid, tid2))
    del pid2, tid2
    value["arg"] = narrow(col("arg"))
    return value, t0, t1


def _minus_lookup(pid: np.ndarray, table_tid: np.ndarray, table_pid: np.ndarray,
                  tids: np.ndarray) -> np.ndarray:
    """``pid - table(tid)`` as int64 (in place in the lookup's own array)."""
    out = _lookup(table_tid, table_pid, tids)
    np.subtract(pid, out, out=out)
    return out


def decode_event_columns(value: dict[str, Any], fields: tuple[str, ...] = EVENT_FIELDS
                         ) -> dict[str, np.ndarray]:
    """The columns named in ``fields`` (EVENT_DTYPE names and dtypes) of one events chunk.

    Only what is asked for is rebuilt, so a view that needs t_ns, cpu and tid2 does not pay for
    the pid columns."""
    n = int(value["n"])
    out: dict[str, np.ndarray] = {}
    if n == 0:
        return {f: np.zeros(0, dtype=EVENT_DTYPE[f]) for f in fields}
    want = set(fields)
    # What each asked-for column is rebuilt from: tid needs cpu, kind and tid2 (the switch
    # prediction); pid and pid2 need tid and tid2 (the table lookup).
    need_tid = bool(want & {"tid", "pid"})
    if "t_ns" in want:
        t = np.cumsum(value["dt"], dtype=np.uint64)
        t += np.uint64(value["t0"])
        out["t_ns"] = t
    if need_tid or "cpu" in want:
        cpu = value["cpu"].astype(np.uint32)
    if need_tid or "kind" in want:
        kind = value["kind"].astype(np.uint8, copy=False)
    if need_tid or want & {"tid2", "pid2"}:
        tid2 = value["tid2"].astype(np.int32)
    if need_tid:
        tid = (value["tid"].astype(np.int64) + _switch_prediction(cpu, kind, tid2)).astype(np.int32)
    if want & {"pid", "pid2"}:
        table_tid = value["pid_table_tid"].astype(np.int32)
        table_pid = value["pid_table_pid"].astype(np.int32)
    if "pid" in want:
        out["pid"] = (value["pid"].astype(np.int64)
                      + _lookup(table_tid, table_pid, tid)).astype(np.int32)
    if "pid2" in want:
        out["pid2"] = (value["pid2"].astype(np.int64)
                       + _lookup(table_tid, table_pid, tid2)).astype(np.int32)
    if "cpu" in want:
        out["cpu"] = cpu
    if "kind" in want:
        out["kind"] = kind
    if "tid" in want:
        out["tid"] = tid
    if "tid2" in want:
        out["tid2"] = tid2
    if "arg" in want:
        out["arg"] = value["arg"].astype(np.int64)
    for f in fields:
        if out[f].size != n:
            raise ValueError(f"column {f} has {out[f].size} values, expected {n}")
    return {f: out[f] for f in fields}

