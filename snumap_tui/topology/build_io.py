"""hwloc's I/O objects (bridges, PCI devices, OS devices) as the plain dicts of ``Topology.io``.

Called by ``build.walk_hwloc`` with the normal objects that have I/O children (hwloc's
``io_arity``) and their model ids; walks each one's I/O subtree depth first, in hwloc's order,
so the list reads like lstopo's output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from snumap_tui.topology.io import OSDEV_TYPES, local_numa

# enum hwloc_obj_bridge_type_e
_BRIDGE_TYPES = {0: "host", 1: "pci"}


def _pci(d: dict[str, Any], p: Any) -> None:
    d["busid"] = f"{int(p.domain):04x}:{int(p.bus):02x}:{int(p.dev):02x}.{int(p.func):x}"
    d["class_id"] = int(p.class_id)
    d["vendor_id"] = int(p.vendor_id)
    d["device_id"] = int(p.device_id)
    speed = float(p.linkspeed)
    if speed > 0:
        d["linkspeed"] = round(speed, 3)


def io_dict(hw: Any, o: Any) -> dict[str, Any]:
    """One I/O object's fields (without its place: ``attach``/``io_parent`` are set by the
    walk)."""
    t = int(o.type)
    d: dict[str, Any] = {"type": hw.type_string(t), "logical_index": int(o.logical_index)}
    name, subtype = hw.decode(o.name), hw.decode(o.subtype)
    if name is not None:
        d["name"] = name
    if subtype is not None:
        d["subtype"] = subtype
    if o.infos_count:
        d["infos"] = hw.infos(o.infos, o.infos_count)
    if not o.attr:
        return d
    attr = o.attr.contents
    if t == hw.OBJ_PCI_DEVICE:
        _pci(d, attr.pcidev)
    elif t == hw.OBJ_BRIDGE:
        b = attr.bridge
        d["bridge"] = _BRIDGE_TYPES.get(int(b.upstream_type), str(int(b.upstream_type)))
        if int(b.upstream_type) == 1:
            _pci(d, b.upstream.pci)
        if int(b.downstream_type) == 1:
            dn = b.downstream.pci
            d["buses"] = (f"{int(dn.domain):04x}:[{int(dn.secondary_bus):02x}-"
                          f"{int(dn.subordinate_bus):02x}]")
    elif t == hw.OBJ_OS_DEVICE:
        d["osdev_type"] = OSDEV_TYPES.get(int(attr.osdev.type), f"type{int(attr.osdev.type)}")
    return d


def walk_io(hw: Any, roots: Sequence[tuple[int, Any]], raw: Sequence[dict[str, Any]]
            ) -> list[dict[str, Any]]:
    """Every I/O object below the given normal objects ((model id, hwloc object) pairs),
    depth first, each with ``attach`` (the model id), ``io_parent`` and ``numa``."""
    numa = [(int(d["os_index"]), frozenset(d.get("cpuset", ())))
            for d in raw if d["type"] == "NUMANode" and d.get("os_index") is not None]
    out: list[dict[str, Any]] = []
    for attach, obj in roots:
        nodeset = frozenset(raw[attach].get("nodeset", ()))
        local = local_numa([(os, cpus) for os, cpus in numa if os in nodeset])
        stack: list[tuple[Any, int | None]] = [(c, None) for c in
                                                reversed(list(hw.io_children(obj)))]
        while stack:
            o, parent = stack.pop()
            d = io_dict(hw, o)
            d["attach"] = attach
            if parent is not None:
                d["io_parent"] = parent
            if local is not None:
                d["numa"] = local
            me = len(out)
            out.append(d)
            stack.extend((c, me) for c in reversed(list(hw.io_children(o))))
    return out
