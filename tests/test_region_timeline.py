"""The region timeline under the core-vs-time view's "by region" mode: innermost region per
thread for any number of finished inner calls, the closing barrier's wait drawn as the
region's, and who ran each piece kept for the typed filter."""

from __future__ import annotations

import numpy as np

from snumap_tui.analysis.intervals import Intervals
from snumap_tui.analysis.region_timeline import (
    SERIAL,
    last_open,
    region_timeline,
    thread_segments,
)
from snumap_tui.analysis.regions import region_stats
from snumap_tui.store.regions import Regions
from snumap_tui.trace.region_catalog import BEGIN, END, REGION_DTYPE, RegionNames

MS = 1_000_000
REGION = "main._omp_fn.0 (omp.c:6)"


def _rows(rows: list[tuple[int, int, int, int, int]]) -> np.ndarray:
    return np.array(rows, dtype=[("t_ns", "<u8"), ("tid", "<i4"), ("pid", "<i4"),
                                 ("op", "u1"), ("rid", "<u4")]).astype(REGION_DTYPE)


def critical_region(n_crit: int = 1954, master: int = 100, worker: int = 101,
                    length: int = 880 * MS, worker_body: int = 600 * MS) -> Regions:
    """One parallel region of ``length`` ns (0.88 s, as the issue's program) in which both
    threads enter a critical section ``n_crit`` times; the worker's share ends early and it
    waits in the closing barrier until the master's span ends."""
    names = RegionNames()
    span = names.intern(REGION, "omp", "span")
    body = names.intern(REGION, "omp", "body")
    crit = names.intern("GOMP_critical_start", "omp", "call", wait=True)
    t0 = 1_000 * MS
    rows = [(t0, master, master, BEGIN, span), (t0 + length, master, master, END, span)]
    for tid, share in ((master, length - 2), (worker, worker_body)):
        rows += [(t0 + 1, tid, master, BEGIN, body), (t0 + 1 + share, tid, master, END, body)]
        step = share // (n_crit + 1)
        for i in range(n_crit):
            a = t0 + 1 + (i + 1) * step
            rows += [(a, tid, master, BEGIN, crit), (a + step // 10, tid, master, END, crit)]
    return Regions(_rows(rows), names.items)


def _time_by_key(seg: tuple[np.ndarray, np.ndarray, np.ndarray]) -> dict[int, int]:
    s, e, k = seg
    out: dict[int, int] = {}
    for key, d in zip(k.tolist(), (e - s).tolist()):
        out[key] = out.get(key, 0) + d
    return out


def test_a_region_holding_thousands_of_critical_sections_stays_the_region() -> None:
    """The old look-back of 8 instances lost the region after the 8th finished critical
    section: 0.88 s of region drew as a few ms."""
    segs, names, wait = thread_segments(critical_region())
    region = names.index(REGION) + 1
    crit = names.index("GOMP_critical_start") + 1
    by_key = _time_by_key(segs[100])
    inside = by_key.get(region, 0) + by_key.get(crit, 0)
    assert inside >= 880 * MS - 2                 # the whole span: body and critical sections
    assert by_key.get(crit, 0) < 0.11 * 880 * MS  # the critical sections are a tenth of it
    assert by_key.get(region, 0) > 0.85 * 880 * MS
    assert crit in wait and region not in wait
    s, e, _k = segs[100]
    assert (s[1:] >= e[:-1]).all()                # non-overlapping, sorted


def test_the_closing_barrier_is_the_regions_wait_as_in_the_report() -> None:
    """The worker's share ends 280 ms before the region: that time is the region's, drawn as
    waiting (the report's waiting time), not "no region"."""
    reg = critical_region(n_crit=50)
    segs, names, wait = thread_segments(reg)
    region = names.index(REGION) + 1
    by_key = _time_by_key(segs[101])
    waited = {k: v for k, v in by_key.items() if k in wait and k != names.index(
        "GOMP_critical_start") + 1}
    assert len(waited) == 1
    (wkey, ns), = waited.items()
    assert ns == 880 * MS - 1 - 600 * MS
    assert SERIAL not in by_key
    stats = {g["name"]: g for g in region_stats(reg)}
    per = {t["tid"]: t for t in stats[REGION]["threads"]}
    assert round(per[101]["wait_s"] * 1e9) == ns

    iv = Intervals(np.array([0, 1]), [np.array([1_000 * MS]), np.array([1_000 * MS])],
                   [np.array([1_900 * MS]), np.array([1_900 * MS])],
                   [np.array([100]), np.array([101])], 1_000 * MS, 1_900 * MS)
    tl = region_timeline(iv, reg)
    assert tl is not None
    assert tl.key_name(wkey) == REGION and tl.base(wkey) == region and wkey in tl.wait
    # Who ran each piece is kept beside the key: the typed filter selects by thread.
    assert set(tl.tids[0].tolist()) == {100} and set(tl.tids[1].tolist()) == {101}
    assert len(tl.tids[1]) == len(tl.intervals.tid[1])


def test_last_open_matches_a_plain_scan_for_any_overlaps() -> None:
    rng = np.random.default_rng(7)
    for n in (1, 2, 9, 100, 1000):
        s = np.sort(rng.integers(0, 10_000, n))
        e = s + rng.integers(1, 3_000, n)
        t = rng.integers(-10, 13_000, 500)
        got = last_open(s, e, t)
        for q, x in enumerate(t.tolist()):
            hit = [j for j in range(n) if s[j] <= x < e[j]]
            assert got[q] == (max(hit) if hit else -1)


def test_a_thread_whose_instances_all_have_no_length_is_serial() -> None:
    """Begin and end at one time (marker lines read in one drain are stamped alike): no
    segment to draw, the thread's run time is serial (this indexed an empty array)."""
    names = RegionNames()
    bar = names.intern("GOMP_barrier", "omp", "call", wait=True)
    reg = Regions(_rows([(1000 * MS + k, 101, 100, op, bar) for k in (10, 20)
                         for op in (BEGIN, END)]), names.items)
    iv = Intervals(np.array([0]), [np.array([1000 * MS])], [np.array([1001 * MS])],
                   [np.array([101], np.int32)], 1000 * MS, 1001 * MS)
    rt = region_timeline(iv, reg)
    assert rt is not None and rt.intervals.tid[0].tolist() == [SERIAL]
    assert rt.intervals.end[0].tolist() == [1001 * MS] and rt.tids[0].tolist() == [101]
