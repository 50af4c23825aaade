"""I/O in the views: rows under their NUMA node in the topology tree, the heatmap's I/O strip,
and the words for a device's rates. Headless (no textual, no rich): the widgets style it and
``snumap top --batch`` prints it.

Which devices get a row: the topology's OS devices a user watches (NICs, InfiniBand HCAs,
disks, GPUs and coprocessors; one row per GPU even when hwloc lists several OS devices of it:
``cuda0``, ``nvml0``, ``card0``). Each sits under its NUMA node (the node of its locality),
else under the object hwloc attaches it to. Per place there is one summary row ("I/O" with the
totals), folded by default; unfolded, a row per device.

The numbers come from the Frame's ``io`` rows (``model.iorates``): a device row shows the
rows whose ``io`` index is its own (or its PCI device's, for GPUs that NVML names by bus id).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from snumap_tui.textsafe import safe_text
from snumap_tui.ui.metricspec import fmt_bytes, view_for

if TYPE_CHECKING:
    from snumap_tui.model.frame import Frame
    from snumap_tui.model.iorates import IoRow
    from snumap_tui.topology.io import IoObject
    from snumap_tui.topology.model import Topology
    from snumap_tui.ui.metricspec import MetricView
    from snumap_tui.ui.tree_rows import TreeRow

WATCHED = ("Network", "OpenFabrics", "Block", "GPU", "CoProc")
_ONE_PER_PCI = ("GPU", "CoProc")
# Summary rows' keys: below every TopoObject id (ids are >= 0), one per place.
SUMMARY_BASE = -1
DEVICE_BASE = -1_000_000


def summary_key(anchor: int) -> int:
    return SUMMARY_BASE - anchor


def device_key(io_index: int) -> int:
    return DEVICE_BASE - io_index


def is_io_key(key: int) -> bool:
    return key < 0


def watched_devices(topo: Topology) -> list[IoObject]:
    """The OS devices that get a row, in hwloc's order."""
    out: list[IoObject] = []
    seen_pci: set[int] = set()
    for o in topo.io:
        if o.type != "OSDev" or o.osdev_type not in WATCHED:
            continue
        if o.osdev_type in _ONE_PER_PCI and o.io_parent is not None:
            if o.io_parent in seen_pci:
                continue
            seen_pci.add(o.io_parent)
        out.append(o)
    return out


def anchor_of(topo: Topology, o: IoObject) -> int:
    """The TopoObject id a device is shown under: its NUMA node, else its locality."""
    if o.numa is not None:
        node = topo.find("NUMANode", o.numa)
        if node is not None:
            return node.id
    return o.attach


def default_io_collapsed(topo: Topology) -> set[int]:
    """Every place's I/O summary starts folded."""
    return {summary_key(anchor_of(topo, o)) for o in watched_devices(topo)}


def with_io_rows(topo: Topology, rows: list[TreeRow], collapsed: Iterable[int]) -> list[TreeRow]:
    """``rows`` with the I/O rows inserted after the row of each place (its NUMA node's row,
    or the row of the object hwloc attaches the devices to) when that row shows its children."""
    devices = watched_devices(topo)
    if not devices:
        return rows
    coll = set(collapsed)
    by_anchor: dict[int, list[IoObject]] = {}
    for o in devices:
        by_anchor.setdefault(anchor_of(topo, o), []).append(o)
    out: list[TreeRow] = []
    placed: set[int] = set()
    for r in rows:
        out.append(r)
        anchor = next((a for a in (r.numa_id, r.key, r.obj_id)
                       if a is not None and a in by_anchor and a not in placed), None)
        if anchor is None or (r.expandable and not r.expanded):
            continue
        placed.add(anchor)
        devs = by_anchor[anchor]
        key = summary_key(anchor)
        open_ = key not in coll
        out.append(dataclasses.replace(
            r, key=key, obj_id=anchor, numa_id=None, indent=r.indent + 1, label="I/O",
            note=device_counts(devs), expandable=True, expanded=open_,
            io=tuple(o.index for o in devs)))
        if open_:
            out.extend(dataclasses.replace(
                r, key=device_key(o.index), obj_id=anchor, numa_id=None, indent=r.indent + 2,
                label=o.label().replace('"', ""), note="", expandable=False, expanded=False,
                io=(o.index,)) for o in devs)
    return out


def device_counts(devs: Sequence[IoObject]) -> str:
    """'2 NICs · 1 HCA · 1 disk'."""
    words = {"Network": "NIC", "OpenFabrics": "HCA", "Block": "disk", "GPU": "GPU",
             "CoProc": "coprocessor"}
    counts: dict[str, int] = {}
    for o in devs:
        w = words.get(o.osdev_type or "", "device")
        counts[w] = counts.get(w, 0) + 1
    return " · ".join(f"{n} {w}{'s' if n != 1 else ''}" for w, n in counts.items())


def rows_for(frame: Frame | None, topo: Topology, io: Iterable[int]) -> list[IoRow]:
    """The frame's device rows for these Topology.io indexes (GPUs: by their PCI device)."""
    if frame is None or not frame.io:
        return []
    want = set()
    for i in io:
        want.add(i)
        parent = topo.io[i].io_parent
        if parent is not None and topo.io[i].osdev_type in _ONE_PER_PCI:
            want.add(parent)
    return [r for r in frame.io if r.io is not None and r.io in want]


def _count(v: float) -> str:
    """12, 3.4k, 1.2M, 2.0G: a count per second as the eye compares them."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= scale:
            return f"{v / scale:.1f}{unit}"
    return f"{v:.0f}"


def _rate(v: float | None) -> str:
    return "n/a" if v is None else fmt_bytes(v)


def device_text(r: IoRow) -> str:
    """A device's numbers: NIC/HCA '↓1.2M ↑30K/s 1.2k pkt/s', disk 'r 3.0M w 1.0M/s 25%',
    GPU '90% 30G/40G 250W'."""
    if r.kind in ("net", "ib"):
        text = f"↓{_rate(r.rx_bps)} ↑{_rate(r.tx_bps)}/s"
        if r.rx_pps is not None and r.tx_pps is not None:
            text += f" {_count(r.rx_pps + r.tx_pps)} pkt/s"
        return text
    if r.kind == "disk":
        util = "n/a" if r.util_pct is None else f"{r.util_pct:.0f}%"
        return f"r {_rate(r.rx_bps)} w {_rate(r.tx_bps)}/s {util}"
    util = "n/a" if r.util_pct is None else f"{r.util_pct:.0f}%"
    mem = f" {fmt_bytes(r.mem_used)}/{fmt_bytes(r.mem_total)}" if r.mem_total else ""
    power = f" {r.power_w:.0f}W" if r.power_w is not None else ""
    return f"{util}{mem}{power}"


def summary_text(rows: Sequence[IoRow]) -> str:
    """Totals per kind: 'net ↓1.2M ↑30K/s · ib ↓4.0G ↑1.0G/s · disk r 3.0M w 1.0M/s 25%'."""
    parts: list[str] = []
    for kind, word in (("net", "net"), ("ib", "ib"), ("disk", "disk"), ("gpu", "gpu")):
        ks = [r for r in rows if r.kind == kind]
        if not ks:
            continue

        def tot(vals: Iterable[float | None]) -> float | None:
            got = [v for v in vals if v is not None]
            return sum(got) if got else None

        if kind in ("net", "ib"):
            parts.append(f"{word} ↓{_rate(tot(r.rx_bps for r in ks))} "
                         f"↑{_rate(tot(r.tx_bps for r in ks))}/s")
        elif kind == "disk":
            utils = [r.util_pct for r in ks if r.util_pct is not None]
            util = f" {max(utils):.0f}%" if utils else ""
            parts.append(f"disk r {_rate(tot(r.rx_bps for r in ks))} "
                         f"w {_rate(tot(r.tx_bps for r in ks))}/s{util}")
        else:
            utils = [r.util_pct for r in ks if r.util_pct is not None]
            parts.append(f"gpu {sum(utils) / len(utils):.0f}%" if utils else "gpu n/a")
    return " · ".join(parts)


def io_row_text(frame: Frame | None, topo: Topology, row: TreeRow) -> str:
    """The numbers of an I/O row of the tree ('' before the first frame, 'n/a' when the
    frame has no numbers for its devices: no I/O source here, or another machine's tree)."""
    rows = rows_for(frame, topo, row.io)
    if not rows:
        return "n/a" if frame is not None else ""
    return summary_text(rows) if len(row.io) > 1 or row.key > DEVICE_BASE else \
        device_text(rows[0])


def gpus_only(topo: Topology, io: Iterable[int]) -> bool:
    """Whether every device of an I/O row is a GPU or coprocessor (no bytes to count)."""
    return all(topo.io[i].osdev_type in _ONE_PER_PCI for i in io)


def io_row_value(frame: Frame | None, topo: Topology, io: Sequence[int]) -> float | None:
    """What an I/O row's history line follows, one number a frame: the bytes a second its
    NICs, HCAs and disks move (in and out together), or for a row of GPUs only their mean
    utilisation. None where the frame has no numbers for them."""
    rows = rows_for(frame, topo, io)
    if gpus_only(topo, io):
        utils = [r.util_pct for r in rows if r.util_pct is not None]
        return sum(utils) / len(utils) if utils else None
    got = [v for r in rows if r.kind != "gpu" for v in (r.rx_bps, r.tx_bps) if v is not None]
    return sum(got) if got else None


def io_row_view(topo: Topology, io: Sequence[int]) -> MetricView:
    """The scale and words of that number: bytes a second on the catalogue's log scale of
    NIC rates ("bytes in + out/s"), or the GPUs' utilisation."""
    if gpus_only(topo, io):
        return view_for("gpu_util_pct")
    return dataclasses.replace(view_for("net_rx_bytes_per_s"), key="io_in_out_bytes_per_s",
                               label="bytes in + out/s")


def io_row_problem(frame: Frame | None, topo: Topology, row: TreeRow) -> bool:
    """Whether a device of the row crosses its metric's threshold (a disk busy over 90 % of
    the time: ``disk_util_pct`` in the catalogue)."""
    disk = view_for("disk_util_pct")
    return any(r.kind == "disk" and disk.is_problem(r.util_pct)
               for r in rows_for(frame, topo, row.io))


def strip_lines(frame: Frame | None, topo: Topology, width: int) -> list[str]:
    """The heatmap's I/O strip: a line per place with physical devices, each device with its
    numbers ('I/O N0: eth0 ↓1.0M ↑195K/s · nvme0n1 r 2.9M w 977K/s 25%'), cut to ``width``."""
    if frame is None or not frame.io:
        return []
    places: dict[int, list[IoRow]] = {}
    for r in frame.io:
        if r.physical:
            places.setdefault(r.attach, []).append(r)
    lines = []
    for anchor, rs in places.items():
        obj = topo[anchor]
        where = f"N{obj.os_index}" if obj.type == "NUMANode" else obj.label().replace(" ", "")
        text = f"I/O {where}: " + " · ".join(f"{safe_text(r.name)} {device_text(r)}" for r in rs)
        lines.append(text if len(text) <= width else text[:max(1, width - 1)] + "…")
    return lines
