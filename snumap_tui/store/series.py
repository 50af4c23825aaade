"""Metrics of a recording over time, for analysis in Python (numpy, or pandas when installed).

The store keeps raw Samples; this runs the same ``derive(prev, cur)`` as the live view over
each pair of consecutive samples, so a notebook sees exactly the numbers `snumap top` and
`snumap replay` show::

    import snumap_tui.store as store
    with store.open("run.rec") as rec:
        s = store.metric_series(rec)            # numpy: s.values["util_pct"][frame, object id]
        df = s.to_dataframe()                   # pandas long form: t_s, object, metric, value
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from snumap_tui.extras import pip_install
from snumap_tui.model.pairing import (
    derive_paired,
    fill_across,
    frame_in,
    paired_frames,
    remember,
)

if TYPE_CHECKING:
    from snumap_tui.model.frame import Frame
    from snumap_tui.model.sample import Sample
    from snumap_tui.store.reader import Recording
    from snumap_tui.topology.model import Topology


@dataclass
class MetricSeries:
    """One row per frame (pair of consecutive samples), one column per topology object."""

    topology: Topology
    t_ns: np.ndarray                       # CLOCK_MONOTONIC end of each frame
    wall_ns: np.ndarray                    # wall-clock end of each frame
    dt_s: np.ndarray                       # length of each frame
    values: dict[str, np.ndarray] = field(default_factory=dict)  # metric -> [frames, objects]

    def object_keys(self) -> list[str]:
        """'Type:os_index' (or 'Type#logical' for objects without an OS index), by object id."""
        return [f"{o.type}:{o.os_index}" if o.os_index is not None and not o.is_cache
                else f"{o.type}#{o.logical_index}" for o in self.topology]

    def of(self, metric: str, type_name: str, os_index: int) -> np.ndarray:
        """The series of one metric at one object (NaN where not available)."""
        arr = self.values.get(metric)
        if arr is None:
            raise KeyError(f"no metric {metric!r} in this recording "
                           f"(have: {', '.join(sorted(self.values))})")
        return arr[:, self.topology.get(type_name, os_index).id]

    def to_dataframe(self) -> Any:
        """A pandas DataFrame in long form (t_s, wall_ns, object, type, os_index, metric,
        value), without the not-available cells. Needs pandas."""
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise ImportError(f"to_dataframe() needs pandas: {pip_install('pandas')}") from exc
        keys = np.array(self.object_keys(), dtype=object)
        types = np.array([o.type for o in self.topology], dtype=object)
        osidx = np.array([-1 if o.os_index is None else o.os_index for o in self.topology])
        t0 = int(self.t_ns[0]) if len(self.t_ns) else 0
        parts = []
        for metric, arr in self.values.items():
            f, o = np.nonzero(~np.isnan(arr))
            parts.append(pd.DataFrame({
                "t_s": (self.t_ns[f].astype(np.int64) - t0) / 1e9,
                "wall_ns": self.wall_ns[f],
                "object": keys[o], "type": types[o], "os_index": osidx[o],
                "metric": metric, "value": arr[f, o],
            }))
        if not parts:
            return pd.DataFrame(columns=["t_s", "wall_ns", "object", "type", "os_index",
                                         "metric", "value"])
        return pd.concat(parts, ignore_index=True)


def metric_series(rec: Recording, metrics: Iterable[str] | None = None) -> MetricSeries:
    """Derive every frame of a recording (or only the named metrics), each source over the
    interval since its own previous read."""
    topo = rec.topology
    wanted = set(metrics) if metrics is not None else None
    times: list[int] = []
    walls: list[int] = []
    dts: list[float] = []
    cols: dict[str, list[np.ndarray]] = {}
    # each source against its own previous read: a recording reads some less often than
    # the interval (model/pairing.py)
    for frame in paired_frames(rec.samples(), topo):
        times.append(frame.t_ns)
        walls.append(frame.wall_ns)
        dts.append(frame.dt_s)
        n = len(times) - 1
        for name, arr in frame.values.items():
            if wanted is not None and name not in wanted:
                continue
            col = cols.setdefault(name, [])
            # A metric that first appears later is NaN in the frames before it.
            col.extend(np.full(len(topo), np.nan) for _ in range(n - len(col)))
            col.append(np.asarray(arr, dtype=np.float64))
    n = len(times)
    values = {}
    for name, col in cols.items():
        col.extend(np.full(len(topo), np.nan) for _ in range(n - len(col)))
        values[name] = np.vstack(col) if col else np.empty((0, len(topo)))
    return MetricSeries(topology=topo, t_ns=np.array(times, dtype=np.uint64),
                        wall_ns=np.array(walls, dtype=np.uint64),
                        dt_s=np.array(dts, dtype=np.float64), values=values)


# How far frame_before and frame_around look for a source's reads around a sample: at most
# LOOKBACK_SAMPLES samples and LOOK_NS of time (the slowest cadence a recording reads a
# source at is 1 s: the I/O devices of a command's recording).
LOOKBACK_SAMPLES = 1 << 14
LOOK_NS = 2_000_000_000


def _around(rec: Recording, times: np.ndarray, i: int, forward: bool,
            enough: Callable[[list[Sample]], bool]) -> list[Sample]:
    """The samples from sample ``i`` back (or forward) over a window of 2, then 16, 256 ...
    samples, until ENOUGH(window) or the window reaches the recording's end, LOOKBACK_SAMPLES
    or LOOK_NS; in time order."""
    span = 1
    limit = int(times[i]) + (LOOK_NS if forward else -LOOK_NS)
    edge = int(np.searchsorted(times, limit, side="right" if forward else "left"))
    # at least the next (or previous) sample, however far it is
    edge = min(max(edge, i + 1), len(times) - 1) if forward else max(min(edge, i - 1), 0)
    while True:
        j = min(i + span, edge) if forward else max(i - span, edge)
        lo, hi = (i, j) if forward else (j, i)
        window = list(rec.samples(int(times[lo]), int(times[hi]) + 1))
        if enough(window) or j == edge or span >= LOOKBACK_SAMPLES:
            return window
        span = min(span * 16, LOOKBACK_SAMPLES)


def _sources(samples: list[Sample]) -> set[str]:
    return {n for smp in samples for n in smp.readings}


def frame_before(rec: Recording, times: np.ndarray, i: int, topology: Topology
                 ) -> Frame | None:
    """The Frame at sample ``i`` (``times`` is ``rec.sample_times``), each of its sources
    against its own previous read: the sample before it, or as far back as that source's
    last read (model/pairing.py)."""
    if not 1 <= i < len(times):
        return None
    window = _around(rec, times, i, False,
                     lambda w: set(w[-1].readings) <= _sources(w[:-1]) if w else True)
    return frame_in(window, topology)[0]


def frame_around(rec: Recording, times: np.ndarray, i: int, topology: Topology
                 ) -> Frame | None:
    """``frame_before``, and the sources sample ``i`` did not read over the interval
    between their reads around it (model/pairing.py ``fill_across``): the replay's cursor
    on a 1 ms recording shows the utilisation of the 100 ms around it, not n/a."""
    if not 1 <= i < len(times):
        return None

    def found(w: list[Sample]) -> bool:      # cur's sources, and one it did not read
        have = _sources(w[:-1])
        return bool(w) and set(w[-1].readings) <= have and bool(have - set(w[-1].readings))

    window = _around(rec, times, i, False, found)
    if not window:
        return None
    cur = window[-1]
    last: dict[str, Sample] = {}
    for smp in window[:-1]:
        remember(last, smp)
    frame = derive_paired(last, cur, topology)
    others = {n for n in last if n not in cur.readings}
    if not others:
        return frame
    ahead = _around(rec, times, i, True, lambda w: others <= _sources(w[1:]))
    following: dict[str, Sample] = {}
    for smp in ahead[1:]:
        for n in smp.readings:
            if n in others and n not in following:
                following[n] = smp
    return fill_across(frame, last, following, topology)
