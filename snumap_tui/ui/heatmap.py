"""The heatmap: every PU of the machine at once, as a Rich renderable (no App needed to test).

Layout, chosen so a 384-PU, 2-socket machine fits 120x40 and stays readable at 80x24:
- one *band* per NUMA node (or per package when the package has no NUMA node of its own), with
  a short label ``P0 N1`` on the left;
- inside a band, one *block* per shared cache (the L3 of a CCX, the L2 of a KNL tile; 8-core
  chunks when there is no shared cache), blocks separated by a space and wrapped to the width;
- inside a block, one column per core and one row per hardware thread: SMT siblings are folded
  vertically, so a core is always a column and a cache is always a rectangle;
- each cell is a glyph whose height *and* colour give the value, so it reads in 16 colours and
  under NO_COLOR; ``·`` is "not available". Cells widen (1-3 columns) while everything fits the
  height it is given, and the widget scrolls when even 1-column cells do not.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, RenderResult
from rich.style import Style
from rich.text import Text

from snumap_tui.topology.model import Topology, TopoObject
from snumap_tui.ui.metricspec import MetricView
from snumap_tui.ui.palette import GLYPHS, NA_STYLE, level_glyph, scale_style

LABEL_W = 6


@dataclass(frozen=True)
class Block:
    cores: tuple[tuple[int, ...], ...]   # per core, the PU positions (index into topo.pus)


@dataclass(frozen=True)
class Band:
    label: str
    package: int | None
    blocks: tuple[Block, ...]
    threads: int                          # rows per block (max SMT width)


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
    band_label: dict[tuple[int, int], tuple[str, int | None]] = {}
    for core in _cores(topo):
        first = min(core.cpuset) if core.cpuset else None
        pkg = topo.ancestor_of_type(core, "Package") if core.type != "Package" else core
        numa = topo.numa_of(first) if first is not None else None
        if numa is not None and pkg is not None and not numa.cpuset <= pkg.cpuset:
            numa = None          # the NUMA node spans packages: band by package
        if numa is not None and numa.cpuset == topo.root.cpuset:
            numa = None          # one node for the whole machine: nothing to tell apart
        key = (pkg.logical_index if pkg else -1, numa.logical_index if numa is not None else -1)
        parts = []
        if pkg is not None:
            parts.append(f"P{pkg.os_index if pkg.os_index is not None else pkg.logical_index}")
        if numa is not None:
            parts.append(f"N{numa.os_index}")
        band_label[key] = (" ".join(parts) or "PUs", pkg.logical_index if pkg else None)
        by_band.setdefault(key, []).append(core)
    out = []
    for key in sorted(by_band):
        cores = by_band[key]
        groups: dict[object, list[TopoObject]] = {}
        for c in cores:
            cache = _shared_cache(topo, c)
            gk: object = cache.id if cache is not None else ("loose",)
            groups.setdefault(gk, []).append(c)
        blocks: list[Block] = []
        for gk, members in groups.items():
            if isinstance(gk, tuple):
                continue
            blocks.append(_block(members, pos))
        loose = [c for gk, m in groups.items() if isinstance(gk, tuple) for c in m]
        for i in range(0, len(loose), 8):
            blocks.append(_block(loose[i:i + 8], pos))
        threads = max((len(c) for b in blocks for c in b.cores), default=1)
        label, pkg_li = band_label[key]
        out.append(Band(label, pkg_li, tuple(blocks), threads))
    return out


def _block(cores: Sequence[TopoObject], pos: dict[int | None, int]) -> Block:
    return Block(tuple(tuple(sorted(pos[c] for c in core.cpuset if c in pos)) for core in cores))


def _band_lines(band: Band, cell_w: int, width: int) -> int:
    """How many block-rows the band needs at a cell width."""
    avail = max(1, width - LABEL_W)
    rows, x = 1, 0
    for b in band.blocks:
        w = len(b.cores) * cell_w
        if x and x + w > avail:
            rows, x = rows + 1, 0
        x += w + 1
    return rows


def layout(bs: Sequence[Band], width: int, height: int | None) -> tuple[int, bool]:
    """Pick the cell width (3, 2 or 1) and whether packages get a blank line between them:
    the roomiest layout that fits ``height`` lines (1-column cells when none does: scroll)."""
    npk = len({b.package for b in bs})
    for cell_w in (3, 2, 1):
        for gap in (True, False):
            h = sum(_band_lines(b, cell_w, width) * b.threads for b in bs)
            h += (npk - 1) if gap else 0
            if height is None or h <= height:
                return cell_w, gap
    return 1, False


def heatmap_lines(topo: Topology, values: Sequence[float] | None, view: MetricView,
                  width: int, height: int | None = None,
                  highlight: Iterable[int] = (), mark: int | None = None) -> list[Text]:
    """The grid as lines of Text. ``values`` is indexed by TopoObject.id (a Frame's array);
    ``highlight`` are PU OS indexes (a selected process's affinity), ``mark`` the PU it last
    ran on."""
    hl = set(highlight)
    pus = topo.pus
    bs = bands(topo)
    legend = legend_line(view, width)
    cell_w, gap = layout(bs, width, None if height is None else height - 1)
    lines: list[Text] = [legend]
    prev_pkg: object = object()
    avail = max(1, width - LABEL_W)
    for band in bs:
        if gap and prev_pkg is not None and band.package != prev_pkg and len(lines) > 1:
            lines.append(Text(""))
        prev_pkg = band.package
        rows: list[list[Block]] = [[]]
        x = 0
        for b in band.blocks:
            w = len(b.cores) * cell_w
            if x and x + w > avail:
                rows.append([])
                x = 0
            rows[-1].append(b)
            x += w + 1
        for ri, row_blocks in enumerate(rows):
            for t in range(band.threads):
                label = band.label if ri == 0 and t == 0 else ""
                line = Text(f"{label:<{LABEL_W - 1}} "[:LABEL_W], style="bold")
                for bi, b in enumerate(row_blocks):
                    if bi:
                        line.append(" ")
                    for core in b.cores:
                        if t >= len(core):
                            line.append(" " * cell_w)
                            continue
                        p = pus[core[t]]
                        v = None if values is None else float(values[p.id])
                        line.append(_cell(view, v, cell_w, p.os_index in hl, p.os_index == mark))
                lines.append(line)
    return lines


def _cell(view: MetricView, v: float | None, cell_w: int, hl: bool, mark: bool) -> Text:
    n = view.norm(None if v is None or math.isnan(v) else v)
    if n is None:
        glyph, style = "·", NA_STYLE
    else:
        glyph, style = level_glyph(n), scale_style(n)
    if mark:
        glyph = "◆"
    if hl or mark:
        style = style + Style(bgcolor="grey35", underline=True)
    body = glyph * cell_w if cell_w < 3 else glyph * 2 + " "
    return Text(body, style=style)


def legend_line(view: MetricView, width: int) -> Text:
    """``CPU %  0 ▁▂▃▄▅▆▇█ 100  · n/a  ◆ last PU``: the scale the cells are read against."""
    t = Text(f"{view.label} {view.unit}".strip() + (" (log)" if view.log else ""), style="bold")
    t.append(f"  {_num(view.lo)} ")
    for i, g in enumerate(GLYPHS):
        t.append(g, style=scale_style(i / (len(GLYPHS) - 1)))
    t.append(f" {_num(view.hi)}")
    t.append("  · n/a", style=NA_STYLE)
    if width >= 60:
        t.append("  ◆ last PU  ")
        t.append("▄", style=Style(bgcolor="grey35", underline=True))
        t.append(" affinity")
    t.truncate(width)
    return t


def _num(v: float) -> str:
    return f"{v:g}" if v < 1e4 else f"{v:.0e}"


class Heatmap:
    """Rich renderable wrapper: renders ``heatmap_lines`` at the width Rich offers."""

    def __init__(self, topo: Topology, values: Sequence[float] | None, view: MetricView,
                 height: int | None = None, highlight: Iterable[int] = (),
                 mark: int | None = None) -> None:
        self.topo, self.values, self.view = topo, values, view
        self.height, self.highlight, self.mark = height, tuple(highlight), mark

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from heatmap_lines(self.topo, self.values, self.view, options.max_width,
                                 self.height, self.highlight, self.mark)
