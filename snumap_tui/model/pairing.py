"""Frames of a recording whose sources are read at different cadences.

A recording reads some sources less often than the interval (recording/session.py and
recording/fine.py: below 10 ms every source but the per-PU counters at the loop's 100 ms
sweeps, or every 10 ms where the kernel cannot sample the counters; the I/O devices of a
recording of a command once a second). A sample between two of their reads
has none of their readings. ``derive(prev, cur)`` of two consecutive samples then has
nothing to difference for such a source, even at the sample that read it (its neighbour
did not), and every utilisation, memory and I/O rate of a 1 ms recording was lost.

Here each of ``cur``'s readings is paired with the same source's last reading instead: the
sources read at the same cadence are derived together (one ``derive`` call per distinct
previous sample: one for the common case, where all of them come from the sample just
before), and the figures of a slower source are over its own interval, from its previous
read. The frame's ``t_ns`` is ``cur``'s and its ``dt_s`` the shortest of these intervals. A
formula that combines sources read at different cadences is not available at such a frame
(never the mix of two intervals). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from snumap_tui.model.derive import derive
from snumap_tui.model.sample import Sample

if TYPE_CHECKING:
    from snumap_tui.model.frame import Frame
    from snumap_tui.model.metrics import Catalogue
    from snumap_tui.topology.model import Topology


def _only(s: Sample, names: list[str]) -> Sample:
    if len(names) == len(s.readings):
        return s
    return Sample(t_ns=s.t_ns, wall_ns=s.wall_ns,
                  readings={n: s.readings[n] for n in names if n in s.readings})


def _merge(base: Frame, other: Frame, names: list[str]) -> None:
    """Lay OTHER's figures (the sources NAMES, over their own interval) into BASE where
    BASE has none."""
    filled = set()
    for m, arr in other.values.items():
        mine = base.values.get(m)
        if mine is None:
            base.values[m] = arr
            filled.add(m)
            continue
        have = ~np.isnan(arr)
        if have.any():
            gap = np.isnan(mine) & have
            if gap.any():
                mine = mine.copy()
                mine[gap] = arr[gap]
                base.values[m] = mine
                filled.add(m)
    for m, f in other.flags.items():
        if m in filled:         # a flag goes with the figures it is about
            base.flags.setdefault(m, set()).update(f)
    if "tasks" in names:
        base.tasks = other.tasks
    if other.io and not base.io:
        base.io = other.io


def _derived(frame: Frame | None, pairs: dict[str, tuple[Sample, Sample]],
             topology: Topology, catalogue: Catalogue | None) -> Frame | None:
    """FRAME (None: a new one) with each source's figures over its own pair of reads
    (PAIRS: source -> (before, after)). The sources of one pair are derived together, the
    shortest interval first: a new frame takes its time base from it, and a longer one
    only fills what the shorter ones left empty."""
    groups: dict[tuple[int, int], tuple[Sample, Sample, list[str]]] = {}
    for name, (p, q) in pairs.items():
        groups.setdefault((id(p), id(q)), (p, q, []))[2].append(name)
    for p, q, names in sorted(groups.values(), key=lambda g: g[1].t_ns - g[0].t_ns):
        other = derive(_only(p, names), _only(q, names), topology, catalogue)
        if frame is None:
            frame = other
        else:
            _merge(frame, other, names)
    return frame


def derive_paired(last: dict[str, Sample], cur: Sample, topology: Topology,
                  catalogue: Catalogue | None = None) -> Frame | None:
    """The Frame at ``cur``: each of its readings differenced against ``last[source]``, the
    last earlier sample that had that source (None when no reading of ``cur`` has one)."""
    return _derived(None, {n: (last[n], cur) for n in cur.readings if n in last},
                    topology, catalogue)


def remember(last: dict[str, Sample], cur: Sample) -> None:
    """``cur`` is now the last reading of each of its sources."""
    for name in cur.readings:
        last[name] = cur


def paired_frames(samples: Iterable[Sample], topology: Topology,
                  catalogue: Catalogue | None = None) -> Iterator[Frame]:
    """A Frame at every sample after the first (``derive_paired``), lazily. A sample none of
    whose sources was read before gives none."""
    last: dict[str, Sample] = {}
    first = True
    for cur in samples:
        if not first:
            f = derive_paired(last, cur, topology, catalogue)
            if f is not None:
                yield f
        first = False
        remember(last, cur)


def frame_in(window: list[Sample], topology: Topology,
             catalogue: Catalogue | None = None) -> tuple[Frame | None, set[str]]:
    """The Frame at the window's last sample, each source paired with its last read in the
    window, and the names of the last sample's sources no earlier sample of the window had
    (the caller may look further back for them)."""
    if len(window) < 2:
        return None, set(window[-1].readings) if window else set()
    cur = window[-1]
    last: dict[str, Sample] = {}
    for s in window[:-1]:
        remember(last, s)
    return derive_paired(last, cur, topology, catalogue), set(cur.readings) - set(last)


def fill_across(frame: Frame | None, last: dict[str, Sample], following: dict[str, Sample],
                topology: Topology, catalogue: Catalogue | None = None) -> Frame | None:
    """FRAME with the figures of the sources its sample did not read, each over the
    interval between its reads around it (LAST[source] before, FOLLOWING[source] after):
    what the replay's cursor shows at a sample between two reads of /proc/stat."""
    return _derived(frame, {n: (last[n], q) for n, q in following.items()
                            if n in last and last[n].t_ns < q.t_ns}, topology, catalogue)


__all__ = ["derive_paired", "fill_across", "frame_in", "paired_frames", "remember"]
