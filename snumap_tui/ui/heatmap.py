"""The heatmap: every PU of the machine at once, as a Rich renderable (no App needed to test).

Layout, chosen to use the space it is given (``plan``):
- one *band* per NUMA node (or per package when the package has no NUMA node of its own); its
  left column says which (``P0 N1``), the band's mean of the metric and the node's memory
  used/total;
- inside a band, one *block* per shared cache (the L3 of a CCX, the L2 of a KNL tile; 8-core
  chunks when there is no shared cache), blocks separated by a space and wrapped to the width;
- a *cell* is one PU when there is room; else SMT siblings are folded into one cell per core,
  then 2, 3, 4... cores per cell, always within one cache block. A folded cell shows the
  *maximum* of its PUs (a core with one busy thread is busy); the legend says what a cell is;
- cells are as wide (1-8 columns) and as tall (1-5 lines) as the room allows; a cell of 5+
  columns prints its value next to its glyph (a 2-PU machine reads as numbers);
- a small machine (up to BAR_MAX_PUS PUs) gets one horizontal bar per PU instead, its value
  printed (``bar_grid``);
- each cell is a glyph whose height *and* colour give the value, so it reads in 16 colours and
  under NO_COLOR; ``·`` is "not available". When even one column per 16 cores does not fit,
  the panel scrolls.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from rich.console import Console, ConsoleOptions, RenderResult
from rich.style import Style
from rich.text import Text

from snumap_tui.topology.model import Topology, TopoObject
from snumap_tui.ui.metricspec import MetricView, fmt_bytes
from snumap_tui.ui.palette import GLYPHS, NA_STYLE, bar, level_glyph, scale_style

# Per-object values, indexed by TopoObject.id: a Frame's array, or a list (tests, demos).
Values = Sequence[float] | np.ndarray
Unit = tuple[int, ...]                   # the PU positions (index into topo.pus) of one cell
MemFn = Callable[[int], tuple[float | None, float | None]]


@dataclass(frozen=True)
class Block:
    cores: tuple[tuple[int, ...], ...]   # per core, the PU positions (index into topo.pus)


@dataclass(frozen=True)
class Band:
    label: str
    package: int | None
    blocks: tuple[Block, ...]
    threads: int                          # max SMT width
    numa_id: int | None = None            # the node whose memory the band shows (TopoObject.id)


def _cores(topo: Topology) -> list[TopoObject]:
    cores = list(topo.by_type("Core"))
    if cores:
        return cores
    return list(topo.pus)        # no Core objects (some ARM XML): a PU is its own core


def _shared_cache(topo: Topology, core: TopoObject) -> TopoObject | None:
    for a in topo.ancestors(core):
        if a.is_cache and len(a.cpuset) > len(core.cpuset):
            return a
        if a.type in ("NUMANode", "Package", "Machine", "Group", "Die"):
            return None
    return None


def bands(topo: Topology) -> list[Band]:
    """Group the machine's cores into labelled bands of cache blocks (see module docstring)."""
    pos = {p.os_index: i for i, p in enumerate(topo.pus)}
    by_band: dict[tuple[int, int], list[TopoObject]] = {}
    meta: dict[tuple[int, int], tuple[str, int | None, int | None]] = {}
    for core in _cores(topo):
        first = min(core.cpuset) if core.cpuset else None
        pkg = topo.ancestor_of_type(core, "Package") if core.type != "Package" else core
        numa = topo.numa_of(first) if first is not None else None
        mem_node = numa
        if numa is not None and pkg is not None and not numa.cpuset <= pkg.cpuset:
            numa, mem_node = None, None   # the NUMA node spans packages: band by package
        if numa is not None and numa.cpuset == topo.root.cpuset:
            numa = None          # one node for the whole machine: nothing to tell apart
        key = (pkg.logical_index if pkg else -1, numa.logical_index if numa is not None else -1)
        parts = []
        if pkg is not None:
            parts.append(f"P{pkg.os_index if pkg.os_index is not None else pkg.logical_index}")
        if numa is not None:
            parts.append(f"N{numa.os_index}")
        meta[key] = (" ".join(parts) or "PUs", pkg.logical_index if pkg else None,
                     mem_node.id if mem_node is not None else None)
        by_band.setdefault(key, []).append(core)
    out = []
    for key in sorted(by_band):
        groups: dict[object, list[TopoObject]] = {}
        for c in by_band[key]:
            cache = _shared_cache(topo, c)
            groups.setdefault(cache.id if cache is not None else ("loose",), []).append(c)
        blocks = [_block(m, pos) for gk, m in groups.items() if not isinstance(gk, tuple)]
        loose = [c for gk, m in groups.items() if isinstance(gk, tuple) for c in m]
        blocks += [_block(loose[i:i + 8], pos) for i in range(0, len(loose), 8)]
        threads = max((len(c) for b in blocks for c in b.cores), default=1)
        label, pkg_li, numa_id = meta[key]
        out.append(Band(label, pkg_li, tuple(blocks), threads, numa_id))
    return out


def _block(cores: Sequence[TopoObject], pos: dict[int | None, int]) -> Block:
    return Block(tuple(tuple(sorted(pos[c] for c in core.cpuset if c in pos)) for core in cores))


# ---- layout ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """How the grid is drawn: what a cell is (``fold``: 0 one PU, k>=1 k cores), its size, and
    what the band column says (``mem``: the node's memory too)."""
    fold: int
    cell_w: int
    cell_h: int
    label_w: int
    mem: bool
    gap: bool                 # a blank line between packages


def units(band: Band, fold: int) -> list[list[Unit]]:
    """The band's cells, per block: one per PU (fold 0) or per ``fold`` cores."""
    out: list[list[Unit]] = []
    for b in band.blocks:
        if fold == 0:
            out.append([(p,) for core in b.cores for p in core])
        else:
            out.append([tuple(p for core in b.cores[i:i + fold] for p in core)
                        for i in range(0, len(b.cores), fold)])
    return out


def _rows(blocks: list[list[Unit]], cell_w: int, avail: int) -> list[list[list[Unit]]]:
    """Blocks packed into rows of ``avail`` columns (a space between blocks); a block wider
    than a row is cut into row-wide pieces."""
    per_row = max(1, avail // cell_w)
    pieces = [blk[i:i + per_row] for blk in blocks for i in range(0, len(blk), per_row)]
    rows: list[list[list[Unit]]] = [[]]
    x = 0
    for pc in pieces:
        w = len(pc) * cell_w
        if x and x + w > avail:
            rows.append([])
            x = 0
        rows[-1].append(pc)
        x += w + 1
    return rows


def _summary(band: Band, values: Values | None, pus: Sequence[TopoObject],
             view: MetricView, mem: MemFn | None) -> tuple[str, str]:
    """The band's mean of the metric (over its PUs, n/a left out) and its memory used/total."""
    vs = []
    if values is not None:
        for b in band.blocks:
            for core in b.cores:
                for p in core:
                    v = float(values[pus[p].id])
                    if not math.isnan(v):
                        vs.append(v)
    mean = view.fmt(sum(vs) / len(vs), 0).strip() if vs else "n/a"
    mem_s = ""
    if mem is not None and band.numa_id is not None:
        used, total = mem(band.numa_id)
        if total is not None:
            mem_s = f"{fmt_bytes(used)}/{fmt_bytes(total)}"
    return mean, mem_s


def _folds(bs: Sequence[Band]) -> list[int]:
    smt = any(b.threads > 1 for b in bs)
    widest = max((len(blk.cores) for b in bs for blk in b.blocks), default=1)
    out = [0] if smt else []
    k = 1
    while True:
        out.append(k)
        if k >= widest:
            return out
        k = k + 1 if k < 4 else k * 2


def plan(bs: Sequence[Band], width: int, height: int | None,
         labels: Sequence[tuple[str, str, str]]) -> Plan:
    """The roomiest layout that fits ``width`` x ``height``: fold as little as possible; at
    that fold, the largest cells (width x height), then bands on fewer rows, the memory in
    the band column, a gap between packages, wider cells. ``labels`` are each band's (name,
    mean, memory) texts. When nothing fits the height, the densest layout (the panel scrolls).
    """
    name_w = max(len(n) for n, _, _ in labels)
    mean_w = max(len(m) for _, m, _ in labels)
    mem_w = max(len(m) for _, _, m in labels)
    npk = len({b.package for b in bs})
    total_cells = sum(len(c) for b in bs for blk in b.blocks for c in blk.cores)
    max_w, max_h = (16, 8) if total_cells <= 16 else (4, 4)
    best: Plan | None = None
    for fold in _folds(bs):
        cells = [units(b, fold) for b in bs]
        fits: list[tuple[tuple[int, ...], Plan]] = []
        for cell_w in range(max_w, 0, -1):
            for mem in ((True, False) if mem_w else (False,)):
                label_w = name_w + 1 + mean_w + 1 + ((mem_w + 1) if mem else 0)
                if width - label_w < cell_w:
                    continue
                nrows = [len(_rows(c, cell_w, width - label_w)) for c in cells]
                best = Plan(fold, cell_w, 1, label_w, mem, False)
                for gap in (True, False):
                    gap_h = (npk - 1) if gap else 0
                    if height is None:
                        cell_h = 1
                    else:
                        cell_h = min(max_h, (height - gap_h) // sum(nrows))
                        if cell_h < 1:
                            continue
                    score = (cell_w * cell_h, -max(nrows), mem, gap, cell_w)
                    fits.append((score, Plan(fold, cell_w, cell_h, label_w, mem, gap)))
        if fits:
            return max(fits, key=lambda f: f[0])[1]
    return best or Plan(_folds(bs)[-1], 1, 1, name_w + mean_w + 2, False, False)


# ---- drawing -----------------------------------------------------------------------------------
def heatmap_lines(topo: Topology, values: Values | None, view: MetricView,
                  width: int, height: int | None = None,
                  highlight: Iterable[int] = (), mark: int | None = None,
                  mem: MemFn | None = None) -> list[Text]:
    """The grid as lines of Text. ``values`` is indexed by TopoObject.id (a Frame's array);
    ``highlight`` are PU OS indexes (a selected process's affinity), ``mark`` the PU it last
    ran on; ``mem(numa_id)`` gives a node's (used, total) bytes for the band column."""
    lines, _ = heatmap_grid(topo, values, view, width, height, highlight, mark, mem)
    return lines


def heatmap_grid(topo: Topology, values: Values | None, view: MetricView,
                 width: int, height: int | None = None, highlight: Iterable[int] = (),
                 mark: int | None = None, mem: MemFn | None = None
                 ) -> tuple[list[Text], list[Unit]]:
    """``heatmap_lines`` and the cells drawn, in order (tests check every PU is in one)."""
    hl = set(highlight)
    pus = topo.pus
    bs = bands(topo)
    if values is not None and not _any_finite(values, [p.id for p in pus]):
        owned = object_grid(topo, values, view, width, bs)
        if owned is not None:
            return owned, []
    labels = [(b.label, *_summary(b, values, pus, view, mem)) for b in bs]
    if len(pus) <= BAR_MAX_PUS and (height is None or len(pus) + len(bs) + 1 <= height):
        return bar_grid(topo, values, view, width, bs, labels, hl, mark)
    p0 = plan(bs, width, None if height is None else max(1, height - 2), labels)
    legend = legend_lines(view, width, p0, bs)
    p = plan(bs, width, None if height is None else max(1, height - len(legend)), labels)
    if p != p0:
        legend = legend_lines(view, width, p, bs)
    name_w = max(len(n) for n, _, _ in labels)
    mean_w = max(len(m) for _, m, _ in labels)
    lines: list[Text] = list(legend)
    drawn: list[Unit] = []
    prev_pkg: object = object()
    for band, (name, mean, mem_s) in zip(bs, labels, strict=True):
        if p.gap and band.package != prev_pkg and len(lines) > len(legend):
            lines.append(Text(""))
        prev_pkg = band.package
        head = Text(f"{name:<{name_w}} ", style="bold")
        head.append(f"{mean:>{mean_w}} ", style=scale_style(_norm0(view, values, band, pus)))
        if p.mem:
            head.append(f"{mem_s:>{p.label_w - name_w - mean_w - 3}} ")
        side = [head]
        rows = _rows(units(band, p.fold), p.cell_w, width - p.label_w)
        for row in rows:
            for lh in range(p.cell_h):
                line = side.pop(0) if side else Text("")
                line.pad_right(p.label_w - line.cell_len)
                value_line = lh == p.cell_h - 1
                level = p.cell_h - 1 - lh         # tall cells are vertical bars: 0 = bottom
                for bi, piece in enumerate(row):
                    if bi:
                        line.append(" ")
                    for u in piece:
                        if lh == 0:
                            drawn.append(u)
                        line.append_text(_cell(view, values, pus, u, p.cell_w, value_line,
                                               (level, p.cell_h),
                                               any(pus[i].os_index in hl for i in u),
                                               mark is not None and
                                               any(pus[i].os_index == mark for i in u)))
                lines.append(line)
    return lines, drawn


# Up to this many PUs (a laptop, a small VM), one horizontal bar per PU with its value printed
# reads better than a grid of a few big cells (two tall bars on a 2-PU machine, where a low
# value was a sliver at the bottom): the tree's bars, at the heatmap's scale.
BAR_MAX_PUS = 16


def bar_grid(topo: Topology, values: Values | None, view: MetricView, width: int,
             bs: Sequence[Band], labels: Sequence[tuple[str, str, str]], hl: set[int],
             mark: int | None) -> tuple[list[Text], list[Unit]]:
    """The small-machine heatmap: a legend line, then per band its label, mean and memory,
    and under it one row per PU: ``  PU3 ◆ ███████▍        42%`` (``◆`` the selected
    process's last PU, the PU name underlined on a grey ground when in its affinity)."""
    pus = topo.pus
    legend = Text(f"{view.label} {view.unit}".strip() + (" (log)" if view.log else ""),
                  style="bold")
    legend.append(f" {_num(view.lo)}–{_num(view.hi)} · one row per PU")
    legend.append(" · ·n/a", style=NA_STYLE)
    legend.append(" ◆last PU ")
    legend.append("PU", style=Style(bgcolor="grey35", underline=True))
    legend.append(" affinity")
    legend.truncate(width)
    lines: list[Text] = [legend]
    drawn: list[Unit] = []
    name_w = max(len(f"PU{p.os_index}") for p in pus)
    val_w = max(6, max((len(view.fmt(float(values[p.id]), 0).strip()) for p in pus
                        if values is not None and not math.isnan(float(values[p.id]))),
                       default=0) + 1)
    bar_w = max(4, min(60, width - (2 + name_w + 3 + val_w)))
    for band, (name, mean, mem_s) in zip(bs, labels, strict=True):
        head = Text(name, style="bold")
        head.append(f"  {mean}", style=scale_style(_norm0(view, values, band, pus)))
        if mem_s:
            head.append(f"  memory {mem_s}")
        head.truncate(width)
        lines.append(head)
        for u in (pu for blk in band.blocks for core in blk.cores for pu in core):
            p = pus[u]
            v = None if values is None else float(values[p.id])
            v = None if v is None or math.isnan(v) else v
            n = view.norm(v)
            line = Text("  ")
            line.append(f"PU{p.os_index}".ljust(name_w),
                        style=Style(bgcolor="grey35", underline=True) if p.os_index in hl else "")
            line.append(" ◆ " if mark is not None and p.os_index == mark else "   ")
            filled, rest = bar(n, bar_w)
            line.append(filled, style=scale_style(n or 0.0))
            line.append(rest, style=NA_STYLE)
            line.append(view.fmt(v, val_w), style="" if v is not None else NA_STYLE)
            line.truncate(width)
            lines.append(line)
            drawn.append((u,))
    return lines, drawn


def _any_finite(values: Values, ids: Sequence[int]) -> bool:
    arr = np.asarray(values, dtype=np.float64)
    return bool(len(arr)) and bool(np.isfinite(arr[np.asarray(ids, dtype=np.int64)]).any())


def band_owner(topo: Topology, band: Band, values: Values) -> TopoObject | None:
    """The object a metric without per-PU values has its value on, for one band: the band's
    NUMA node (memory, NUMA miss), else its package (power), else the machine."""
    cands: list[TopoObject] = []
    if band.numa_id is not None:
        cands.append(topo[band.numa_id])
    pkgs = list(topo.by_type("Package"))
    if band.package is not None and band.package < len(pkgs):
        cands.append(pkgs[band.package])
    cands.append(topo.root)
    for o in cands:
        if not math.isnan(float(values[o.id])):
            return o
    return None


def object_grid(topo: Topology, values: Values, view: MetricView, width: int,
                bs: Sequence[Band]) -> list[Text] | None:
    """A metric measured on NUMA nodes or packages, not PUs (memory used, NUMA miss, package
    power): one bar per object where it belongs, named, instead of n/a on every PU. None
    when no band's object has a value either."""
    owners: list[TopoObject] = []
    for b in bs:
        o = band_owner(topo, b, values)
        if o is not None and o not in owners:
            owners.append(o)
    if not owners:
        return None
    where = sorted({o.type for o in owners})
    legend = Text(f"{view.label} {view.unit}".strip() + (" (log)" if view.log else ""),
                  style="bold")
    legend.append(f" {_num(view.lo)}–{_num(view.hi)} · measured per "
                  + " / ".join("NUMA node" if w == "NUMANode" else w.lower() for w in where)
                  + ", not per PU")
    legend.truncate(width)
    lines = [legend]
    names = [o.label() for o in owners]
    name_w = max(len(n) for n in names)
    vals = [float(values[o.id]) for o in owners]
    val_w = max(6, max(len(view.fmt(v, 0).strip()) for v in vals) + 1)
    bar_w = max(4, min(60, width - (2 + name_w + 3 + val_w)))
    for name, v in zip(names, vals, strict=True):
        n = view.norm(v)
        line = Text("  ")
        line.append(name.ljust(name_w), style="bold")
        line.append("   ")
        filled, rest = bar(n, bar_w)
        line.append(filled, style=scale_style(n or 0.0))
        line.append(rest, style=NA_STYLE)
        line.append(view.fmt(v, val_w))
        line.truncate(width)
        lines.append(line)
    return lines


def _norm0(view: MetricView, values: Values | None, band: Band,
           pus: Sequence[TopoObject]) -> float:
    if values is None:
        return 0.0
    vs = [float(values[pus[p].id]) for b in band.blocks for c in b.cores for p in c]
    vs = [v for v in vs if not math.isnan(v)]
    return view.norm(sum(vs) / len(vs)) or 0.0 if vs else 0.0


def _cell(view: MetricView, values: Values | None, pus: Sequence[TopoObject],
          u: Unit, cell_w: int, value_line: bool, level: tuple[int, int], hl: bool,
          mark: bool) -> Text:
    """One line of a cell: the glyph (the max of its PUs), padded with a space from 3 columns.
    A cell of several lines is a vertical bar (``level``: this line's height from the bottom,
    of how many); from 5 columns the bottom line carries the value."""
    v = None
    if values is not None:
        got = [float(values[pus[i].id]) for i in u]
        got = [x for x in got if not math.isnan(x)]
        v = max(got) if got else None
    n = view.norm(v)
    glyph, style = ("·", NA_STYLE) if n is None else (level_glyph(n), scale_style(n))
    lv, of = level
    if n is not None and of > 1:
        eighths = max(1, round(n * of * 8)) - lv * 8      # what this line holds of the bar
        glyph = " " if eighths <= 0 else "█" if eighths >= 8 else GLYPHS[eighths - 1]
    if mark:
        glyph = "◆"
    if hl or mark:
        style = style + Style(bgcolor="grey35", underline=True)
    inner = cell_w if cell_w < 3 else cell_w - 1
    body = glyph * inner
    if cell_w >= 5 and value_line:
        num = view.fmt(v, 0).strip()
        first, last = pus[u[0]].os_index, pus[u[-1]].os_index
        name = f"PU{first}" if len(u) == 1 else f"PU{first}-{last}"
        if len(name) + len(num) + 2 <= inner:
            num = f"{name} {num}"        # big cells (a small machine): which PU, and its value
        if len(num) <= inner - 1:
            body = glyph + num.rjust(inner - 1)
    return Text(body + " " * (cell_w - inner), style=style)


def what_a_cell_is(p: Plan, bs: Sequence[Band]) -> str:
    threads = max((b.threads for b in bs), default=1)
    if p.fold == 0:
        return "cell: 1 PU"
    if p.fold == 1:
        return "cell: 1 core" + (f" ({threads} PUs, max)" if threads > 1 else " (1 PU)")
    return f"cell: {p.fold} cores ({p.fold * threads} PUs, max)"


def legend_lines(view: MetricView, width: int, p: Plan, bs: Sequence[Band]) -> list[Text]:
    """``CPU %  0 ▁▂▃▄▅▆▇█ 100  · n/a  cell: 1 core (2 PUs, max)  left: node mean mem`` on
    one line, or two when the width asks: the scale the cells are read against."""
    t = Text(f"{view.label} {view.unit}".strip() + (" (log)" if view.log else ""), style="bold")
    t.append(f" {_num(view.lo)} ")
    for i, g in enumerate(GLYPHS):
        t.append(g, style=scale_style(i / (len(GLYPHS) - 1)))
    t.append(f" {_num(view.hi)}")
    t.append(" ·n/a", style=NA_STYLE)
    t.append(" ◆last PU ")
    t.append("▄", style=Style(bgcolor="grey35", underline=True))
    t.append("affinity")
    second = Text(what_a_cell_is(p, bs), style="bold")
    second.append(" │ left: node, mean" + (", mem used/total" if p.mem else ""))
    if t.cell_len + 2 + second.cell_len <= width:
        t.append("  ")
        t.append_text(second)
        return [t]
    t.truncate(width)
    second.truncate(width)
    return [t, second]


def _num(v: float) -> str:
    return f"{v:g}" if v < 1e4 else f"{v:.0e}"


class Heatmap:
    """Rich renderable wrapper: renders ``heatmap_lines`` at the width Rich offers."""

    def __init__(self, topo: Topology, values: Values | None, view: MetricView,
                 height: int | None = None, highlight: Iterable[int] = (),
                 mark: int | None = None, mem: MemFn | None = None) -> None:
        self.topo, self.values, self.view = topo, values, view
        self.height, self.highlight, self.mark, self.mem = height, tuple(highlight), mark, mem

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from heatmap_lines(self.topo, self.values, self.view, options.max_width,
                                 self.height, self.highlight, self.mark, self.mem)
