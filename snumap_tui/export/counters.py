"""The recorded metrics as counter tracks, one frame at a time (Perfetto, Chrome, Parquet).

Every sample goes through the model's ``derive(prev, cur)``, the function the live view and
the replay use, against each source's previous read (model/pairing.py), so an exported counter
is the number `snumap top` showed at that moment. Frames are produced one by one: a recording
of any length needs the memory of a sample per source and one frame.

``COUNTER_TRACKS`` are the series a timeline shows by default: utilisation per PU, IPC per PU
(only where the PMU was recorded: NaN frames are left out, so a machine without counters gets
no IPC track), power per package and its DRAM (not for a domain whose counter never advanced,
as a virtual machine's power PMU reads 0: analysis/energy.py), used memory per NUMA node.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from snumap_tui.model.frame import Frame
from snumap_tui.model.pairing import paired_frames
from snumap_tui.topology.model import Topology


@dataclass(frozen=True)
class CounterSpec:
    metric: str          # a metric of the catalogue (snumap_tui.model.metrics)
    object_type: str     # where its track lives: PU, Package, NUMANode
    label: str           # the track name: "{object_type} {os_index} {label}"
    unit: str


COUNTER_TRACKS = (
    CounterSpec("util_pct", "PU", "utilisation %", "%"),
    CounterSpec("ipc", "PU", "IPC", "instructions/cycle"),
    CounterSpec("power_pkg_w", "Package", "power W", "W"),
    CounterSpec("power_dram_w", "Package", "DRAM power W", "W"),
    CounterSpec("mem_used_bytes", "NUMANode", "memory used bytes", "B"),
)
# The RAPL domain kind of each power metric (its domain at Package N: "KIND-N").
POWER_DOMAINS = {"power_pkg_w": "package", "power_dram_w": "dram"}


@dataclass(frozen=True)
class Track:
    """One counter track: a metric at one object."""

    index: int
    spec: CounterSpec
    os_index: int
    object_id: int

    @property
    def name(self) -> str:
        return f"{self.spec.object_type} {self.os_index} {self.spec.label}"


def frames(rec: Any) -> Iterator[Frame]:
    """derive() at each sample, each source against its own previous read (a recording
    reads some less often than the interval: model/pairing.py), lazily."""
    yield from paired_frames(rec.samples(), rec.topology)


def tracks(topology: Topology, specs: tuple[CounterSpec, ...] = COUNTER_TRACKS) -> list[Track]:
    out: list[Track] = []
    for spec in specs:
        for obj in topology:
            if obj.type == spec.object_type and obj.os_index is not None:
                out.append(Track(len(out), spec, int(obj.os_index), obj.id))
    return out


def counter_values(rec: Any, specs: tuple[CounterSpec, ...] = COUNTER_TRACKS
                   ) -> tuple[list[Track], Iterator[tuple[int, np.ndarray, np.ndarray]]]:
    """The tracks, and per frame ``(t_ns, track indexes, values)`` of the tracks that have a
    value in that frame (NaN, i.e. not recorded, is left out). A frame is stamped with the
    time of its later sample: the value holds over the interval ending there."""
    all_tracks = tracks(rec.topology, specs)
    dead: set[str] = set()
    if any(s.metric in POWER_DOMAINS for s in specs):
        from snumap_tui.analysis.energy import unmeasured_at_ends

        dead = unmeasured_at_ends(rec)
    by_metric: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for spec in specs:
        mine = [t for t in all_tracks if t.spec == spec and
                f"{POWER_DOMAINS.get(spec.metric)}-{t.os_index}" not in dead]
        by_metric[spec.metric] = (np.array([t.index for t in mine], dtype=np.int64),
                                  np.array([t.object_id for t in mine], dtype=np.int64))

    def gen() -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        for fr in frames(rec):
            idx_parts, val_parts = [], []
            for metric, (idx, oids) in by_metric.items():
                arr = fr.values.get(metric)
                if arr is None or not len(idx):
                    continue
                vals = np.asarray(arr, dtype=np.float64)[oids]
                ok = ~np.isnan(vals)
                idx_parts.append(idx[ok])
                val_parts.append(vals[ok])
            if idx_parts:
                yield fr.t_ns, np.concatenate(idx_parts), np.concatenate(val_parts)

    return all_tracks, gen()
