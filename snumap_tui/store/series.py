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

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from snumap_tui.extras import pip_install
from snumap_tui.model.pairing import fill_across, frame_in, paired_frames, remember

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


LOOKBACK_SAMPLES = 1 << 14      # how far frame_before and frame_around look for a source


def _back(rec: Recording, times: np.ndarray, i: int, topology: Topology
          ) -> tuple[Frame | None, list[Sample]]:
    span = 1
    while True:
        lo = max(0, i - span)
        window = list(rec.samples(int(times[lo]), int(times[i]) + 1))
        frame, missing = frame_in(window, topology)
        if not missing or lo == 0 or span >= LOOKBACK_SAMPLES:
            return frame, window
        span *= 16


def frame_before(rec: Recording, times: np.ndarray, i: int, topology: Topology
                 ) -> Frame | None:
    """The Frame at sample ``i`` (``times`` is ``rec.sample_times``), each of its sources
    against its own previous read: the sample before it, or as far back as that source's
    last read (model/pairing.py) -- a window of 2, then 16, 256 ... samples is decoded until
    every source is found or LOOKBACK_SAMPLES were looked at."""
    if not 1 <= i < len(times):
        return None
    return _back(rec, times, i, topology)[0]


def frame_around(rec: Recording, times: np.ndarray, i: int, topology: Topology
                 ) -> Frame | None:
    """``frame_before``, and the sources sample ``i`` did not read over the interval
    between their reads around it (model/pairing.py ``fill_across``): the replay's cursor
    on a 1 ms recording shows the utilisation of the 100 ms around it, not n/a."""
    if not 1 <= i < len(times):
        return None
    frame, window = _back(rec, times, i, topology)
    if not window:
        return frame
    cur = window[-1]
    span = max(1, len(window) - 1)
    while True:     # back far enough to meet a sample with a source CUR did not read
        last: dict[str, Sample] = {}
        for smp in window[:-1]:
            remember(last, smp)
        others = {n for n in last if n not in cur.readings}
        lo = max(0, i - span)
        if others or lo == 0 or span >= LOOKBACK_SAMPLES:
            break
        span *= 16
        window = list(rec.samples(int(times[max(0, i - span)]), int(times[i]) + 1))
    if not others:
        return frame
    following: dict[str, Sample] = {}
    span = 16
    while True:
        hi = min(len(times) - 1, i + span)
        for smp in rec.samples(int(times[i]) + 1, int(times[hi]) + 1):
            for n in smp.readings:
                if n in others and n not in following:
                    following[n] = smp
        if len(following) == len(others) or hi == len(times) - 1 or span >= LOOKBACK_SAMPLES:
            break
        span *= 16
    return fill_across(frame, last, following, topology)
