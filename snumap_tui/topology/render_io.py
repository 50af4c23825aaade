"""I/O objects as text for ``snumap topo``: folded by locality, or hwloc's full PCI tree.

Folded (the default): a section after the tree, one heading per place devices attach to
(``Package P#1 (NUMA P#1)``), one line per PCI device with its OS devices after a colon, and
the OS devices that hang on no PCI device (NVDIMMs, DAX) grouped by kind; bridges are only
counted. ``--full``: every bridge, PCI device and OS device on its own line, under the object
it attaches to in the tree, the way lstopo prints them.
"""

from __future__ import annotations

from snumap_tui.topology.io import IoObject
from snumap_tui.topology.model import Topology
from snumap_tui.topology.render import object_label, wrap_words


def io_counts(topo: Topology) -> str:
    n = {t: sum(o.type == t for o in topo.io) for t in ("Bridge", "PCIDev", "OSDev")}

    def s(k: int, word: str) -> str:
        return f"{k} {word}{'s' if k != 1 else ''}"

    return (f"{s(n['Bridge'], 'bridge')}, {s(n['PCIDev'], 'PCI device')}, "
            f"{s(n['OSDev'], 'OS device')}")


def place_label(topo: Topology, attach: int) -> str:
    """Where devices attach: 'Package P#1 (NUMA P#1)', 'Machine (NUMA P#0)'."""
    obj = topo[attach]
    text = object_label(topo, obj).split(" (")[0]
    if obj.os_index is None and obj.type not in ("Machine",):
        text += f" L#{obj.logical_index}"
    numa = next((o.numa for o in topo.io if o.attach == attach), None)
    return text + (f" (NUMA P#{numa})" if numa is not None else "")


def _osdev_words(devs: list[IoObject]) -> str:
    """'Net "ib0", OpenFabrics "mlx4_0"'; several of one kind share it: 'Block(NVM) "a", "b"'."""
    groups: dict[str, list[str]] = {}
    for d in devs:
        label = d.label()
        kind, _, name = label.partition(" ")
        groups.setdefault(kind, []).append(name)
    return ", ".join(f"{k} {', '.join(n for n in names if n)}".rstrip()
                     for k, names in groups.items())


def _below(topo: Topology, o: IoObject) -> list[IoObject]:
    """The OS devices below a PCI device (through any further PCI functions)."""
    out: list[IoObject] = []
    for c in o.children:
        child = topo.io[c]
        if child.type == "OSDev":
            out.append(child)
        out.extend(_below(topo, child))
    return out


def folded_lines(topo: Topology, width: int = 80) -> list[str]:
    if not topo.io:
        return []
    head = wrap_words(f"I/O: {io_counts(topo)} (--full: the PCI tree)", width, width - 2)
    lines = [head[0]] + ["  " + w for w in head[1:]]
    places: dict[int, list[IoObject]] = {}
    for o in topo.io:
        places.setdefault(o.attach, []).append(o)
    for attach, objs in places.items():
        lines.append(f"  {place_label(topo, attach)}:")
        loose: list[IoObject] = []
        for o in objs:
            if o.type == "PCIDev":
                devs = _below(topo, o)
                text = o.label() + (f": {_osdev_words(devs)}" if devs else "")
            elif o.type == "OSDev" and o.io_parent is None:
                loose.append(o)
                continue
            else:
                continue
            wrapped = wrap_words(text, width - 4, width - 6)
            lines.extend(["    " + wrapped[0]] + ["      " + w for w in wrapped[1:]])
        if loose:
            wrapped = wrap_words(_osdev_words(loose), width - 4, width - 6)
            lines.extend(["    " + wrapped[0]] + ["      " + w for w in wrapped[1:]])
    return lines


def tree_lines(topo: Topology, attach: int, depth: int, width: int) -> list[str]:
    """The I/O children of one normal object, every object on its own line (``--full``)."""
    out: list[str] = []

    def emit(o: IoObject, d: int) -> None:
        text = o.label()
        if o.vendor_id is not None and o.device_id is not None and o.type == "PCIDev":
            text += f" [{o.vendor_id:04x}:{o.device_id:04x}]"
            model = " ".join(v for v in (o.info("PCIVendor"), o.info("PCIDevice")) if v)
            if model:
                text += f" {model}"
        if o.type == "Bridge" and o.buses:
            text += f" (buses {o.buses})"
        line = "  " * d + text
        out.append(line if len(line) <= width else line[:width - 1] + "…")
        for c in o.children:
            emit(topo.io[c], d + 1)

    for o in topo.io:
        if o.attach == attach and o.io_parent is None:
            emit(o, depth)
    return out
