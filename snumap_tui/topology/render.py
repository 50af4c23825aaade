"""The topology as plain text lines for ``snumap topo``: pure functions over the model.

Why not lstopo's console output: it needs hwloc, and a 256-PU machine is hundreds of lines.
Here identical siblings collapse the way lstopo factorises, into one ``N x`` line whose
subtree is described once ("each"), and chains of single children (L2 > L1d > L1i > Core >
PU) share one line joined by ``+``. ``full=True`` gives every object its own line instead.
Every line is cut to ``width`` columns so the tree fits an 80-column SSH terminal.
"""

from __future__ import annotations

from collections.abc import Iterable

from snumap_tui.topology.model import Topology, TopoObject

_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")


def format_size(n: int | None) -> str:
    """Bytes in binary units as lstopo writes them: 32KB, 1.25MB, 251GB."""
    if n is None:
        return "?"
    v = float(n)
    unit = 0
    while v >= 1024 and unit < len(_UNITS) - 1:
        v /= 1024
        unit += 1
    if v >= 100 or v == int(v):
        return f"{v:.0f}{_UNITS[unit]}"
    text = f"{v:.2f}".rstrip("0").rstrip(".") if v < 10 else f"{v:.1f}".rstrip("0").rstrip(".")
    return f"{text}{_UNITS[unit]}"


def format_cpulist(cpus: Iterable[int]) -> str:
    """The kernel's cpulist format (Documentation/admin-guide/cputopology.rst): 0-3,8,10-11."""
    s = sorted(set(cpus))
    out: list[str] = []
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        out.append(str(s[i]) if i == j else f"{s[i]}-{s[j]}")
        i = j + 1
    return ",".join(out)


def _short_type(o: TopoObject) -> str:
    if o.is_cache and o.type != "MemCache":
        level = o.type[:2]
        return level + ("i" if o.cache_type == "instruction" else
                        "d" if o.cache_type == "data" else "")
    return o.type


def _kind_name(topo: Topology, o: TopoObject) -> str | None:
    """The CPU kind of a core on a hybrid machine (CoreType info, else its efficiency rank)."""
    if len(topo.cpukinds) < 2 or not o.cpuset:
        return None
    for k in topo.cpukinds:
        if o.cpuset <= k.cpuset:
            return k.info("CoreType") or f"kind {k.efficiency}"
    return None


def cpu_models(topo: Topology) -> list[str]:
    """Distinct CPU models of the packages (hwloc's CPUModel info), whitespace tidied."""
    models: list[str] = []
    for o in topo.by_type("Package") or (topo.root,):
        m = o.info("CPUModel")
        m = " ".join(m.split()) if m else None
        if m and m not in models:
            models.append(m)
    return models


def object_label(topo: Topology, o: TopoObject, with_index: bool = True) -> str:
    """One object, e.g. 'L3 32MB', 'NUMANode P#1 (64GB, HBM)', 'Core P#3 [IntelAtom]'.
    The CPU model is left to the summary unless packages differ."""
    text = _short_type(o)
    if o.type == "Group" and o.subtype:
        text = o.subtype
    if with_index and o.os_index is not None and not o.is_cache and o.type != "Machine":
        text += f" P#{o.os_index}"
    extras: list[str] = []
    if o.is_cache and o.cache_size:
        text += f" {format_size(o.cache_size)}"
    if o.type == "NUMANode":
        extras.append(format_size(o.local_memory) if o.local_memory else "size unknown")
        if o.subtype:
            extras.append(o.subtype)
    if o.type == "Machine" and o.total_memory:
        extras.append(f"{format_size(o.total_memory)} total")
    if o.type == "Package" and o.info("CPUModel") and len(cpu_models(topo)) > 1:
        extras.append(" ".join((o.info("CPUModel") or "").split()))
    if extras:
        text += f" ({', '.join(extras)})"
    kind = _kind_name(topo, o) if o.type == "Core" else None
    if kind:
        text += f" [{kind}]"
    return text


def _fit(line: str, width: int) -> str:
    return line if len(line) <= width else line[: max(width - 1, 1)] + "…"


class _Renderer:
    """Walks the tree once; signatures (what a subtree looks like without indexes) decide
    which siblings are identical and may collapse."""

    def __init__(self, topo: Topology, full: bool, width: int) -> None:
        self.topo = topo
        self.full = full
        self.width = width
        self.lines: list[str] = []
        self._sig: dict[int, tuple[object, ...]] = {}

    def signature(self, o: TopoObject) -> tuple[object, ...]:
        sig = self._sig.get(o.id)
        if sig is None:
            sig = (object_label(self.topo, o, with_index=False),
                   tuple(self.signature(c) for c in self.topo.children_of(o)))
            self._sig[o.id] = sig
        return sig

    def chain(self, o: TopoObject) -> list[TopoObject]:
        """o and its only-child descendants (a memory child always breaks the chain)."""
        out = [o]
        while not self.full:
            kids = self.topo.children_of(out[-1])
            if len(kids) != 1 or kids[0].is_memory:
                break
            out.append(kids[0])
        return out

    def emit(self, depth: int, text: str) -> None:
        self.lines.append(_fit("  " * depth + text, self.width))

    def render(self, o: TopoObject, depth: int, indexed: bool, count: int = 1,
               group: list[TopoObject] | None = None) -> None:
        chain = self.chain(o)
        last = chain[-1]
        kids = self.topo.children_of(last)
        labels = [object_label(self.topo, c, with_index=indexed and count == 1) for c in chain]
        # Leaf PUs fold into the line: "Core P#0 + 2 PU (P#0,64)".
        pu_leaves = (not self.full and len(kids) > 1
                     and all(k.type == "PU" and not k.children for k in kids))
        if pu_leaves:
            labels.append(f"{len(kids)} PU")
        text = " + ".join(labels)
        if count > 1:
            cpus = frozenset().union(*(g.cpuset for g in group or ()))
            text = f"{count} x {text}"
            if indexed and cpus:
                text += f"  (cpus {format_cpulist(cpus)})"
        elif pu_leaves and indexed:
            text += f" ({','.join(str(k.os_index) for k in kids)})"
        self.emit(depth, text)
        if pu_leaves:
            return
        self.render_children(kids, depth + 1, indexed and count == 1)

    def render_children(self, kids: list[TopoObject], depth: int, indexed: bool) -> None:
        i = 0
        while i < len(kids):
            j = i + 1
            if not self.full:
                sig = self.signature(kids[i])
                while j < len(kids) and self.signature(kids[j]) == sig:
                    j += 1
            run = kids[i:j]
            self.render(run[0], depth, indexed, count=len(run), group=run)
            i = j


def summary_lines(topo: Topology, width: int = 80) -> list[str]:
    """A few lines above the tree: CPU model, counts, memory, CPU kinds, NUMA distances."""
    lines: list[str] = []
    n = {t: len(topo.by_type(t)) for t in ("Package", "Core", "PU", "NUMANode")}
    models = cpu_models(topo)
    head = f"{n['Package']} package{'s' if n['Package'] != 1 else ''}, {n['Core']} cores, " \
           f"{n['PU']} PUs"
    lines.append(f"Machine: {head}" + (f"; {' / '.join(models)}" if models else ""))
    nodes = topo.numa_nodes
    mem = sum(x.local_memory or 0 for x in nodes)
    plural = "s" if len(nodes) != 1 else ""
    if not mem:
        lines.append(f"Memory: {len(nodes)} NUMA node{plural}, sizes unknown (not in the input)")
    else:
        # Identical nodes grouped: "120GB in 8 NUMA nodes: 7 x 16GB, 1 x 8GB".
        groups: dict[str, int] = {}
        for x in nodes:
            key = format_size(x.local_memory or 0) + (f" {x.subtype}" if x.subtype else "")
            groups[key] = groups.get(key, 0) + 1
        per = ", ".join(f"{c} x {k}" for k, c in groups.items())
        lines.append(f"Memory: {format_size(mem)} in {len(nodes)} NUMA node{plural}: {per}")
    if len(topo.cpukinds) > 1:
        for k in sorted(topo.cpukinds, key=lambda k: -k.efficiency):
            name = k.info("CoreType") or "unnamed kind"
            lines.append(f"CPU kind: {name}, efficiency {k.efficiency}, {len(k.cpuset)} PUs "
                         f"(cpus {format_cpulist(k.cpuset)})")
    dist = topo.distance_matrix()
    if dist is not None and 1 < len(dist.nodes) <= 16:
        cell = max(3, max(len(str(v)) for row in dist.values for v in row) + 1)
        lines.append(f"NUMA distances ({dist.name or 'latency'}):")
        lines.append("  node" + "".join(f"{x:>{cell}}" for x in dist.nodes))
        for node, row in zip(dist.nodes, dist.values):
            lines.append(f"  {node:>4}" + "".join(f"{v:>{cell}}" for v in row))
    elif dist is not None:
        lines.append(f"NUMA distances: {len(dist.nodes)} x {len(dist.nodes)} matrix "
                     "(see --json)")
    src = topo.meta.get("source")
    if src:
        lines.append(f"Source: {src}")
    return [_fit(ln, width) for ln in lines]


def render_tree(topo: Topology, full: bool = False, width: int = 80) -> list[str]:
    """The tree, one line per (collapsed group of) object(s), each at most ``width`` wide."""
    r = _Renderer(topo, full, width)
    r.render(topo.root, 0, indexed=True)
    return r.lines


def render(topo: Topology, full: bool = False, width: int = 80) -> str:
    return "\n".join(summary_lines(topo, width) + [""] + render_tree(topo, full, width)) + "\n"
