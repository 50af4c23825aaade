"""The rows of the topology view: which objects get a row, folded how, with which numbers.

Why folding: hwloc gives every core its own L2 and L1d, and every NUMA node of a synthetic or
AMD machine a Group; showing them as separate rows triples the tree without telling anything.
A chain of objects with the same cpuset (L2 > L1d > Core, Core > its only PU) becomes one row,
and a NUMA node whose parent covers exactly its PUs is shown on its parent's row (with the
node's memory). Pure functions over a Topology and a Frame: the widget styles the result and
``snumap top --batch`` prints it as plain text. Headless: no textual, no rich.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from snumap_tui.model.frame import Frame
from snumap_tui.textsafe import safe_text
from snumap_tui.topology.model import Topology, TopoObject
from snumap_tui.ui.io_rows import default_io_collapsed, with_io_rows
from snumap_tui.ui.metricspec import fmt_bytes, resolve


@dataclass(frozen=True)
class TreeRow:
    key: int                  # id of the first object of the chain: the row's identity
    obj_id: int               # the object whose CPU metrics the row shows (deepest of the chain)
    numa_id: int | None       # a NUMA node shown on this row (memory columns)
    indent: int
    label: str
    note: str                 # folded caches etc., shown dim: "L2 1M · L1 48K"
    expandable: bool
    expanded: bool
    pu_range: tuple[int, int]
    # I/O rows (ui/io_rows.py): the Topology.io indexes of the devices the row stands for.
    io: tuple[int, ...] = ()


def _size(n: int | None) -> str:
    return fmt_bytes(n).replace(".0", "") if n else ""


def _chain(topo: Topology, obj: TopoObject) -> list[TopoObject]:
    """Obj and the objects below it that add nothing: a single normal child with the same
    cpuset and no memory child of its own."""
    chain = [obj]
    cur = obj
    while True:
        kids = topo.children_of(cur)
        normal = [k for k in kids if not k.is_memory]
        memory = [k for k in kids if k.is_memory]
        if cur is not obj and memory:
            break
        if len(normal) != 1 or normal[0].cpuset != cur.cpuset or cur.type == "Machine":
            break
        if memory and cur is obj and not _numa_folds(topo, cur):
            break
        nxt = normal[0]
        if any(k.is_memory for k in topo.children_of(nxt)):
            break
        chain.append(nxt)
        cur = nxt
    return chain


def _numa_folds(topo: Topology, obj: TopoObject) -> bool:
    mem = [k for k in topo.children_of(obj) if k.type == "NUMANode"]
    return len(mem) == 1 and mem[0].cpuset == obj.cpuset and obj.type != "Machine"


def _label(chain: list[TopoObject], numa: TopoObject | None) -> tuple[str, str]:
    skip = ("Group", "Die") if numa is not None else ()
    main = [o for o in chain if not o.is_cache and o.type not in skip]
    caches = [o for o in chain if o.is_cache]
    parts = [o.label() for o in main]
    if numa is not None:
        parts.append(numa.label())
    if not parts:           # a pure cache row: "L3 #2 32M"
        c, caches = caches[0], caches[1:]
        parts.append(f"{c.label()} {_size(c.cache_size)}".strip())
    note = " · ".join(f"{c.label().split(' #')[0]} {_size(c.cache_size)}".strip() for c in caches)
    return " · ".join(parts), note


def default_collapsed(topo: Topology) -> set[int]:
    """Start readable: cores folded (their PUs hidden); on machines with more than 32 cores,
    the L3s / NUMA groups folded too, so the first screen shows packages and NUMA nodes."""
    keys = set()
    cores = topo.by_type("Core")
    for c in cores:
        if len(c.cpuset) > 1:
            keys.add(c.id)
    if len(cores) > 32:
        for o in topo:
            if o.type in ("L3Cache", "L2Cache", "L1Cache") and len(o.cpuset) > 1 and any(
                    k.type == "Core" for k in topo.walk(o)):
                keys.add(o.id)
    return keys | default_io_collapsed(topo)


def visible_rows(topo: Topology, collapsed: Iterable[int] = ()) -> list[TreeRow]:
    """The rows to draw, in tree order; a row whose ``key`` (or any object of its chain) is
    in ``collapsed`` hides its descendants."""
    coll = set(collapsed)
    rows: list[TreeRow] = []

    def visit(obj: TopoObject, indent: int) -> None:
        chain = _chain(topo, obj)
        last = chain[-1]
        numa = None
        if _numa_folds(topo, chain[0]):
            numa = next(k for k in topo.children_of(chain[0]) if k.type == "NUMANode")
        kids = [k for k in topo.children_of(last) if k.type in ("NUMANode",) or not k.is_memory]
        if numa is not None:
            kids = [k for k in kids if k.id != numa.id]
        is_coll = any(o.id in coll for o in chain)
        label, note = _label(chain, numa)
        rows.append(TreeRow(key=obj.id, obj_id=last.id,
                            numa_id=numa.id if numa else (obj.id if obj.type == "NUMANode"
                                                          else None),
                            indent=indent, label=label, note=note, expandable=bool(kids),
                            expanded=bool(kids) and not is_coll, pu_range=last.pu_range))
        if is_coll:
            return
        for k in kids:
            if k.type == "NUMANode":
                rows.append(TreeRow(key=k.id, obj_id=k.id, numa_id=k.id, indent=indent + 1,
                                    label=k.label(), note=_memkind(k), expandable=False,
                                    expanded=False, pu_range=k.pu_range))
            elif k.type not in ("Misc", "Bridge", "PCIDev", "OSDev"):
                visit(k, indent + 1)

    visit(topo.root, 0)
    return with_io_rows(topo, rows, coll)


def _memkind(n: TopoObject) -> str:
    return safe_text(n.subtype or (n.info("MemoryTier") or ""))


def chain_ids(topo: Topology, key: int) -> list[int]:
    """Every object id folded into the row ``key`` (what collapsing toggles); an I/O row's
    key is its own."""
    if key < 0:
        return [key]
    return [o.id for o in _chain(topo, topo[key])]


def refold_level(topo: Topology, collapsed: Iterable[int], step: int) -> set[int]:
    """``collapsed`` after ``+`` (``step`` > 0: the shallowest folded rows unfold) or ``-``
    (the deepest unfolded rows fold; the machine's row stays open). I/O rows are left as
    they are: ``o`` folds those."""
    out = set(collapsed)
    rows = [r for r in visible_rows(topo, out) if r.key >= 0 and r.expandable]
    if step > 0:
        pick = [r for r in rows if not r.expanded]
        level = min((r.indent for r in pick), default=None)
        for r in pick:
            if r.indent == level:
                out.difference_update(chain_ids(topo, r.key))
    else:
        pick = [r for r in rows if r.expanded and r.indent > 0]
        level = max((r.indent for r in pick), default=None)
        out.update(r.key for r in pick if r.indent == level)
    return out


COLUMNS = ("util", "ipc", "ghz", "power_w")


def row_cells(frame: Frame | None, row: TreeRow) -> dict[str, float | None]:
    """The numbers of a row: the CPU metrics of its object, and memory of its NUMA node."""
    out: dict[str, float | None] = {}
    if frame is None:
        return {c: None for c in (*COLUMNS, "mem_used", "mem_total")}
    for c in COLUMNS:
        name = resolve(frame.values, c)
        out[c] = frame.get(name, row.obj_id) if name else None
    target = row.numa_id if row.numa_id is not None else (
        row.obj_id if frame.topology[row.obj_id].type == "Machine" else None)
    out["mem_used"], out["mem_total"] = node_memory(frame, target)
    return out


def node_memory(frame: Frame | None, obj_id: int | None) -> tuple[float | None, float | None]:
    """(used without page cache, total) bytes of a NUMA node (or the Machine): the tree's
    memory column and the heatmap's band summary say the same thing."""
    if frame is None or obj_id is None:
        return None, None
    # Used without the page cache: the catalogue's mem_used_bytes, the one place computing it.
    got = {c: frame.get(name, obj_id) if (name := resolve(frame.values, c)) else None
           for c in ("mem_used", "mem_total")}
    return got["mem_used"], got["mem_total"]


def memory_text(used: float | None, total: float | None) -> str:
    if total is None:
        return ""
    return f"{fmt_bytes(used)}/{fmt_bytes(total)}"


#: The memory heading of the plain tree (80 columns leave no room to say "without page cache":
#: batch mode says it once under the tree).
MEM_HEAD = "mem used/total"


def plain_tree(frame: Frame, collapsed: Iterable[int] | None = None) -> list[str]:
    """The tree as plain text lines (batch mode): label, CPU %, IPC, GHz, W, memory."""
    from snumap_tui.ui.io_rows import io_row_text
    from snumap_tui.ui.metricspec import view_for

    topo = frame.topology
    rows = visible_rows(topo, default_collapsed(topo) if collapsed is None else collapsed)
    views = {c: view_for(c) for c in COLUMNS}
    lines = [f"{'object':<34} {'CPU':>5} {'IPC':>5} {'GHz':>5} {'Watt':>5}  {MEM_HEAD}"]
    for r in rows:
        name = ("  " * r.indent + r.label + (f" {r.note}" if r.io else ""))[:34]
        if r.io:
            lines.append(f"{name:<34} {io_row_text(frame, topo, r)}".rstrip())
            continue
        cells = row_cells(frame, r)
        nums = " ".join(views[c].fmt(cells[c]) for c in COLUMNS)
        lines.append(f"{name:<34} {nums}  {memory_text(cells['mem_used'], cells['mem_total'])}"
                     .rstrip())
    return lines
