"""The topology as plain text lines for ``snumap topo``: pure functions over the model.

Why not lstopo's console output: it needs hwloc, and a 256-PU machine is hundreds of lines.
Here identical siblings collapse the way lstopo factorises, into one ``N x`` line whose
subtree is described once ("each"), and chains of single children (L2 > L1d > L1i > Core >
PU) share one line joined by ``+``. ``full=True`` gives every object its own line instead.

A collapsed line never hides how the PUs are numbered: it lists each member's cpus
(``2 x Package (cpus 0,2,…,70 | 1,3,…,71)``), with the NUMA nodes' P# when the members
differ in them. Inside a collapsed subtree the numbering of the first instance is given
(``first Package: ...``) unless every instance splits its parent's cpus into consecutive
blocks in order, which is what a reader assumes when nothing is said. Sizes follow lstopo's
convention (binary units written KB/MB/GB, integers: 7002MB, 1024KB) so the numbers match
``lstopo`` on the same input. Tree lines are cut to ``width``; annotations that do not fit
go on their own lines instead of being cut.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence

from snumap_tui.topology.model import Topology, TopoObject


def format_size(n: int | None) -> str:
    """Bytes as lstopo prints them (hwloc's hwloc_memory_size_printf_value/unit): powers of
    1024 written KB/MB/GB/TB, rounded to an integer, the unit chosen so the number stays
    below 10240: 32KB, 1024KB, 3072KB, 7002MB, 126GB."""
    if n is None:
        return "?"
    if n < 10 << 20:
        shift, unit = 10, "KB"
    elif n < 10 << 30:
        shift, unit = 20, "MB"
    elif n < 10 << 40:
        shift, unit = 30, "GB"
    else:
        shift, unit = 40, "TB"
    return f"{((n >> (shift - 1)) + 1) >> 1}{unit}"


def format_cpulist(cpus: Iterable[int]) -> str:
    """The kernel's cpulist format (Documentation/admin-guide/cputopology.rst): 0-3,8,10-11."""
    return _cpulist(cpus, None)


# An arithmetic progression of single cpus is written "a,b,…,z" once it has this many terms
# (two shown terms give the step, the last one the end; shorter ones are written out).
_PROGRESSION_MIN = 5


def compact_cpulist(cpus: Iterable[int]) -> str:
    """A cpulist a person reads at a glance: ranges as the kernel writes them, and strided
    single cpus (SMT siblings or packages numbered round-robin) as ``0,4,…,92``."""
    return _cpulist(cpus, _PROGRESSION_MIN)


def _cpulist(cpus: Iterable[int], progression_min: int | None) -> str:
    s = sorted(set(cpus))
    out: list[str] = []
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        if j > i:
            out.append(f"{s[i]}-{s[j]}")
            i = j + 1
            continue
        k = i
        if progression_min is not None and i + 1 < len(s):
            step = s[i + 1] - s[i]
            # Extend while the step holds and the next term is not the start of a range.
            while k + 1 < len(s) and s[k + 1] - s[k] == step and \
                    not (k + 2 < len(s) and s[k + 2] == s[k + 1] + 1):
                k += 1
        if progression_min is not None and k - i + 1 >= progression_min:
            out.append(f"{s[i]},{s[i + 1]},…,{s[k]}")
            i = k + 1
        else:
            out.append(str(s[i]))
            i += 1
    return ",".join(out)


def wrap_words(text: str, width: int, later: int | None = None) -> list[str]:
    """Lines of at most ``width`` columns (``later`` for the lines after the first), broken
    at spaces only; a word longer than a line (a path) is broken after one of its slashes,
    and cut only if it has none."""
    room = [width, later if later is not None else width]
    pieces: list[tuple[str, str]] = []   # (text, separator before it)
    for word in text.split():
        parts = re.findall(r"[^/]*/|[^/]+", word) if len(word) > min(room) else [word]
        pieces.extend((p, " " if n == 0 else "") for n, p in enumerate(parts))
    lines: list[str] = []
    cur = ""
    for piece, sep in pieces:
        limit = room[1 if lines else 0]
        if cur and len(cur) + len(sep) + len(piece) <= limit:
            cur += sep + piece
            continue
        if cur:
            lines.append(cur)
            cur = ""
        limit = room[1 if lines else 0]
        while len(piece) > limit:           # no slash to break at: cut (last resort)
            lines.append(piece[:limit])
            piece = piece[limit:]
            limit = room[1]
        cur = piece
    if cur:
        lines.append(cur)
    return lines


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


def memory_kind(o: TopoObject) -> str | None:
    """What memory a NUMA node is (DRAM, HBM, NVM, ...): hwloc's subtype, else the
    MemoryTier or DAXType info it puts on nodes of heterogeneous memory."""
    return o.subtype or o.info("MemoryTier") or o.info("DAXType")


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
        kind = memory_kind(o)
        if kind:
            extras.append(kind)
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


def _shift(sets: Sequence[frozenset[int]]) -> int | None:
    """The constant step d when every set is the previous one moved by d (d > 0), else None."""
    if len(sets) < 3:
        return None
    d = min(sets[1]) - min(sets[0]) if sets[0] and sets[1] else 0
    if d <= 0:
        return None
    for a, b in itertools.pairwise(sets):
        if len(a) != len(b) or frozenset(x + d for x in a) != b:
            return None
    return d


def member_lists(sets: Sequence[frozenset[int]], what: str) -> list[str]:
    """Ways to write which cpus (or NUMA nodes) each member of a collapsed run has, longest
    first; every one is exact. ``what`` is the noun after "each next" ("Core")."""
    parts = [compact_cpulist(s) for s in sets]
    ways = [" | ".join(parts)]
    d = _shift(sets)
    if d is not None:
        if len(parts) > 3:
            ways.append(f"{parts[0]} | {parts[1]} | … | {parts[-1]}")
        ways.append(f"{parts[0]}, each next {what} +{d}")
    return ways


def splits_in_order(parent: frozenset[int], sets: Sequence[frozenset[int]]) -> bool:
    """True when the sets are consecutive blocks of the parent's sorted cpus, in order (what
    a reader assumes of a collapsed line that gives no numbering)."""
    order = sorted(parent)
    pos = 0
    for s in sets:
        block = order[pos:pos + len(s)]
        if frozenset(block) != s or len(block) != len(s):
            return False
        pos += len(s)
    return True


def _numa_note(nodesets: Sequence[frozenset[int]], what: str) -> list[str]:
    """'NUMA P#0-3' when members differ in their NUMA nodes (one each, ascending), else
    per member; nothing when they all share the same nodes."""
    if len(set(nodesets)) <= 1 or not all(nodesets):
        return []
    firsts = [min(s) for s in nodesets]
    if all(len(s) == 1 for s in nodesets) and firsts == sorted(firsts):
        return [f"NUMA P#{format_cpulist(firsts)}"]
    return [f"NUMA P#{w}" for w in member_lists(nodesets, what)]


class _Renderer:
    """Walks the tree once; signatures (what a subtree looks like without indexes) decide
    which siblings are identical and may collapse.

    A run is rendered with its *instances*: the same run of siblings in every copy of the
    enclosing collapsed subtree (one instance when nothing above collapsed), so what is
    said about "each" can be checked against all of them."""

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

    def chain_len(self, o: TopoObject) -> int:
        """How many objects share o's line: o and its only-child descendants (a memory child
        always breaks the chain)."""
        n = 1
        while not self.full:
            kids = self.topo.children_of(o)
            if len(kids) != 1 or kids[0].is_memory:
                break
            o = kids[0]
            n += 1
        return n

    def descend(self, o: TopoObject, n: int) -> TopoObject:
        for _ in range(n - 1):
            o = self.topo.children_of(o)[0]
        return o

    def emit(self, depth: int, text: str) -> None:
        self.lines.append(_fit("  " * depth + text, self.width))

    def emit_note(self, depth: int, text: str, notes: list[list[str]], prefix: str) -> None:
        """The line, with its notes (each a list of exact ways to write it, longest first)
        in parentheses after it when they fit, else on lines of their own below it."""
        if not notes:
            self.emit(depth, text)
            return
        pad = "  " * depth
        inline = self._pick(notes, self.width - len(pad + text) - 3 - len(prefix))
        if inline is not None:
            self.emit(depth, f"{text} ({prefix}{inline})")
            return
        self.emit(depth, text)
        sub = "  " * (depth + 1)
        below = self._pick(notes, self.width - len(sub) - 2 - len(prefix))
        if below is not None:
            self.lines.append(f"{sub}({prefix}{below})")
            return
        # Nothing fits on one line: the shortest exact forms, wrapped at spaces.
        body = prefix + "; ".join(ways[-1] for ways in notes)
        wrapped = wrap_words(f"({body})", self.width - len(sub), self.width - len(sub) - 1)
        self.lines.extend([sub + wrapped[0]] + [sub + " " + w for w in wrapped[1:]])

    @staticmethod
    def _pick(notes: list[list[str]], room: int) -> str | None:
        """The longest form of every note such that all of them together fit in ``room``."""
        chosen = [ways[-1] for ways in notes]
        for i, ways in enumerate(notes):
            for w in ways:              # longest first: keep the first that still fits
                trial = chosen[:i] + [w] + chosen[i + 1:]
                if len("; ".join(trial)) <= room:
                    chosen = trial
                    break
        text = "; ".join(chosen)
        return text if len(text) <= room else None

    def render_run(self, instances: list[list[TopoObject]], depth: int, outer: str | None,
                   parents: list[TopoObject]) -> None:
        run = instances[0]
        o = run[0]
        count = len(run)
        single = len(instances) == 1
        n = self.chain_len(o)
        chain = [self.descend(o, k) for k in range(1, n + 1)]
        last = chain[-1]
        kids = self.topo.children_of(last)
        labels = [object_label(self.topo, c, with_index=single and count == 1) for c in chain]
        # Leaf PUs fold into the line: "Core P#0 + 2 PU (P#0,64)".
        pu_leaves = (not self.full and len(kids) > 1
                     and all(k.type == "PU" and not k.children for k in kids))
        if pu_leaves:
            labels.append(f"{len(kids)} PU")
        text = " + ".join(labels)
        notes: list[list[str]] = []
        what = o.subtype if o.type == "Group" and o.subtype else _short_type(o)
        if count > 1:
            text = f"{count} x {text}"
            sets = [m.cpuset for m in run]
            told = single or not all(
                splits_in_order(p.cpuset, [m.cpuset for m in inst])
                for p, inst in zip(parents, instances))
            if told and any(sets):
                notes.append([f"cpus {w}" for w in member_lists(sets, what)])
            numa = _numa_note([m.nodeset for m in run], what)
            if numa:
                notes.append(numa)
        elif pu_leaves and single:
            text += f" (P#{','.join(str(k.os_index) for k in kids)})"
        self.emit_note(depth, text, notes, "" if single else f"first {outer}: ")
        if pu_leaves:
            return
        inner = outer if count == 1 else what
        lasts = [self.descend(m, n) for inst in instances for m in inst]
        self.render_children([self.topo.children_of(x) for x in lasts], depth + 1, inner, lasts)
        if self.full and self.topo.io:     # folded, the I/O is a section after the tree
            from snumap_tui.topology.render_io import tree_lines

            self.lines.extend(tree_lines(self.topo, last.id, depth + 1, self.width))

    def render_children(self, kid_lists: list[list[TopoObject]], depth: int,
                        outer: str | None, parents: list[TopoObject]) -> None:
        kids = kid_lists[0]
        i = 0
        while i < len(kids):
            j = i + 1
            if not self.full:
                sig = self.signature(kids[i])
                while j < len(kids) and self.signature(kids[j]) == sig:
                    j += 1
            self.render_run([kl[i:j] for kl in kid_lists], depth, outer, parents)
            i = j


def _memory_line(topo: Topology) -> str:
    """'Memory: 504GB in 4 NUMA nodes: 4 x 126GB', or by kind on heterogeneous memory:
    'Memory: 6090MB in 7 NUMA nodes: DRAM 3914MB (2935MB + 979MB), HBM 1024MB (2 x 512MB)'."""
    nodes = topo.numa_nodes
    plural = "s" if len(nodes) != 1 else ""
    mem = sum(x.local_memory or 0 for x in nodes)
    if not mem:
        return f"Memory: {len(nodes)} NUMA node{plural}, sizes unknown (not in the input)"

    def sizes(group: Sequence[TopoObject]) -> str:
        counts: dict[str, int] = {}
        for x in group:
            key = format_size(x.local_memory or 0) if x.local_memory else "size unknown"
            counts[key] = counts.get(key, 0) + 1
        if len(counts) > 1 and all(c == 1 for c in counts.values()):
            return " + ".join(counts)
        return ", ".join(f"{c} x {k}" for k, c in counts.items())

    kinds: dict[str | None, list[TopoObject]] = {}
    for x in nodes:
        kinds.setdefault(memory_kind(x), []).append(x)
    head = f"Memory: {format_size(mem)} in {len(nodes)} NUMA node{plural}: "
    if len(nodes) == 1:
        kind = memory_kind(nodes[0])
        return head[:-2] + (f" ({kind})" if kind else "")
    if list(kinds) == [None]:
        return head + sizes(nodes)
    parts = []
    for kind, group in kinds.items():
        total = format_size(sum(x.local_memory or 0 for x in group))
        per = f"{len(group)} x {format_size(group[0].local_memory or 0)}" \
            if len({x.local_memory for x in group}) == 1 and len(group) > 1 else sizes(group)
        parts.append(f"{kind or 'unlabelled'} {total}" + ("" if len(group) == 1 else f" ({per})"))
    return head + ", ".join(sorted(parts))


def summary_lines(topo: Topology, width: int = 80) -> list[str]:
    """A few lines above the tree: CPU model, counts, memory, CPU kinds, NUMA distances.
    Long lines wrap (indented) rather than being cut."""
    lines: list[str] = []
    n = {t: len(topo.by_type(t)) for t in ("Package", "Core", "PU", "NUMANode")}
    models = cpu_models(topo)
    head = f"{n['Package']} package{'s' if n['Package'] != 1 else ''}, {n['Core']} cores, " \
           f"{n['PU']} PUs"
    lines.append(f"Machine: {head}" + (f"; {' / '.join(models)}" if models else ""))
    lines.append(_memory_line(topo))
    if len(topo.cpukinds) > 1:
        for k in sorted(topo.cpukinds, key=lambda k: -k.efficiency):
            name = k.info("CoreType") or "unnamed kind"
            lines.append(f"CPU kind: {name}, efficiency {k.efficiency}, {len(k.cpuset)} PUs "
                         f"(cpus {compact_cpulist(k.cpuset)})")
    dist = topo.distance_matrix()
    table: list[str] = []     # not wrapped: a matrix is cut rather than broken
    if dist is not None and 1 < len(dist.nodes) <= 16:
        cell = max(3, max(len(str(v)) for row in dist.values for v in row) + 1)
        lines.append(f"NUMA distances ({dist.name or 'latency'}):")
        table.append("  node" + "".join(f"{x:>{cell}}" for x in dist.nodes))
        for node, row in zip(dist.nodes, dist.values):
            table.append(f"  {node:>4}" + "".join(f"{v:>{cell}}" for v in row))
    elif dist is not None:
        lines.append(f"NUMA distances: {len(dist.nodes)} x {len(dist.nodes)} matrix "
                     "(see --json)")
    out: list[str] = []
    for ln in lines:
        wrapped = wrap_words(ln, width, width - 2)
        out.extend([wrapped[0]] + ["  " + w for w in wrapped[1:]])
    out.extend(_fit(ln, width) for ln in table)
    src = topo.meta.get("source")
    if src:
        wrapped = wrap_words(f"Source: {src}", width, width - 2)
        out.extend([wrapped[0]] + ["  " + w for w in wrapped[1:]])
    return out


def render_tree(topo: Topology, full: bool = False, width: int = 80) -> list[str]:
    """The tree, one line per (collapsed group of) object(s), each at most ``width`` wide."""
    r = _Renderer(topo, full, width)
    r.render_run([[topo.root]], 0, None, [topo.root])
    return r.lines


def render(topo: Topology, full: bool = False, width: int = 80) -> str:
    from snumap_tui.topology.render_io import folded_lines

    io = [] if full or not topo.io else [""] + folded_lines(topo, width)
    return "\n".join(summary_lines(topo, width) + [""] + render_tree(topo, full, width)
                     + io) + "\n"
