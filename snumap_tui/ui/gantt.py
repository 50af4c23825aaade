"""The core-vs-time (Gantt) view, as SnuMAP drew it, in the terminal: one row per PU grouped by
package > NUMA node > core, time left to right, each cell coloured by who ran there most.

``render_gantt`` is pure: (data, view state, width, height) -> lines of Rich Segments, so tests
and the benchmark draw it without an App, and the widget only turns lines into Strips. Only the
visible rows and columns are binned (``bin_rows``), so a redraw costs what is on screen.

A cell's glyph gives how busy the PU was in that time bin (``█`` >= 75 %, ``▓`` >= 50 %, ``▒`` >=
25 %, ``░`` less, blank idle), its colour who ran most; without colours (NO_COLOR, a
16-colour terminal) the glyph is the legend's letter of who ran most (``A`` at least half
busy, ``a`` less); a column where every row goes blank at
once is a synchronisation point, a row that stays blank an idle PU. Under a filter other work is
a grey ``·``, and so is work outside the traced tree of a command's recording ("other" in
the legend). The time cursor is a highlighted column, the selected cell is reversed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from rich.segment import Segment
from rich.style import Style

from snumap_tui.analysis.binning import IDLE, OTHER, GanttBins, bin_rows, utilisation
from snumap_tui.analysis.intervals import UNTRACED, Intervals
from snumap_tui.analysis.noderows import fold_bins
from snumap_tui.analysis.region_timeline import DENSITY_LEVELS, SERIAL
from snumap_tui.analysis.textcols import fit_name
from snumap_tui.ui import counter_rows
from snumap_tui.ui.palette import level_glyph
from snumap_tui.ui.replay_data import ReplayData, Series
from snumap_tui.ui.timeaxis import resolution_label, ticks

LABEL_W = 15
# 12 colours of one chroma at two lightnesses (OKLCH L 0.62 / 0.72), hues 150 degrees apart
# from one to the next: every one at least 4.7:1 against black and 2.3:1 against white, so a
# block reads on dark and light backgrounds alike; none is grey (grey is "other" and "no
# region"). By thread or process a key's colour is stable (hashed); by region the regions
# take them in order, so the first twelve never share one.
PALETTE = ("#da534f", "#06bfa0", "#b75cbd", "#a2af10", "#537feb", "#f3821d", "#0698a4",
           "#f471aa", "#2f9f3d", "#ad8dfd", "#a87f09", "#12b2f4")
NO_REGION_COLOUR = "#969696"      # a traced thread outside every region: blocks, not dots
OTHER_STYLE = Style(color="grey42")
LABEL_STYLES = (Style(color="grey70"), Style(color="grey70", bgcolor="grey19"))
AXIS_STYLE = Style(color="grey62")
CURSOR = Style(bgcolor="grey30")
SELECTED = Style(reverse=True)
MAX_MIG = 32
MIG_LOOKBACK_NS = 1_000_000_000   # how far back a switch-in looks for where its thread ran


def key_colour(key: int) -> str:
    return PALETTE[(int(key) * 2654435761 >> 7) % len(PALETTE)]


def cell_colour(data: ReplayData, st: GanttState, key: int) -> str:
    """A key's colour in the chart and legend; by region a wait key has its region's."""
    if counter_rows.region_on(data, st):
        return counter_rows.level_colour(key)
    if st.mode == "region" and data.regions is not None:
        base = data.regions.base(key)
        return NO_REGION_COLOUR if base == SERIAL else PALETTE[(base - 1) % len(PALETTE)]
    return key_colour(key)


def busy_glyph(b: float) -> str:
    return "█" if b >= 0.75 else "▓" if b >= 0.5 else "▒" if b >= 0.25 else "░" if b > 0 else " "


def fmt_time(ns: float) -> str:
    """Seconds from the recording's start, with the precision the span needs."""
    s = ns / 1e9
    if s == 0:
        return "0"
    if abs(s) >= 100:
        return f"{s:.0f}s"
    if abs(s) >= 1:
        return f"{s:.2f}s"
    if abs(s) >= 1e-3:
        return f"{s * 1e3:.2f}ms"
    return f"{s * 1e6:.1f}us"


@dataclass
class GanttState:
    """What the user chose: time range, first visible row, selection, colouring, filter."""

    t0: int
    t1: int
    row0: int = 0
    sel_row: int = 0
    sel_col: int = 0
    mode: str = "process"
    only_key: int | None = None
    only_tids: np.ndarray | None = None      # a typed filter's threads (replay's /)
    filter_text: str = ""
    wall_ns: int | None = None     # wall-clock time of the recording's t0 (w: axis in UTC)
    figure: int = 0                # the counter figure shown (X cycles: IPC, each event)
    by_figure: bool = False        # by region: region intervals coloured by it (x)

    @property
    def span(self) -> int:
        return max(self.t1 - self.t0, 1)

    def col_of(self, t: int, cols: int) -> int:
        """The column of time ``t`` in a chart of ``cols`` columns (clamped to the chart)."""
        return max(0, min(cols - 1, int((t - self.t0) * cols // self.span)))


@dataclass
class Layout:
    cols: int
    rows: int               # PU rows drawn
    strips: int
    legend: int


def layout(data: ReplayData, width: int, height: int) -> Layout:
    """PU rows first; the metric strips get what is left, at most a quarter of the height
    when the PUs do not all fit."""
    cols = max(1, width - LABEL_W - 1)
    avail = max(1, height - 3)           # axis, legend, detail
    want = 1 + len(data.series)
    npu = len(data.labels)
    if npu + want <= avail:
        rows, strips = npu, want
    else:
        strips = min(want, avail // 4)
        rows = max(1, min(npu, avail - strips))
    return Layout(cols, rows, strips, 1)


def bins_for(data: ReplayData, st: GanttState, lay: Layout) -> GanttBins:
    rows = data.row_iv[st.row0:st.row0 + lay.rows]
    if (rows < 0).any():              # folded nodes: bin their PUs, one row per node
        return _folded_bins(data, st, lay, rows)
    return bin_rows(_mode_intervals(data, st), rows, st.t0, st.t1, lay.cols,
                    keymap=data.keymaps.get(st.mode), only_key=st.only_key,
                    only_tids=st.only_tids, prefer_traced=st.mode == "region",
                    owners=data.owners_for(st.mode))


def _mode_intervals(data: ReplayData, st: GanttState) -> Intervals:
    """The intervals the mode colours; by region with ``x``: keyed by the figure's step."""
    if counter_rows.region_on(data, st):
        got = counter_rows.region_levels(data, st)
        if got is not None:
            return got[0]
    return data.intervals_for(st.mode)


WAIT_GLYPH = "┄"        # time inside a barrier / MPI wait, in its region's colour
# Calls summed in the kernel (critical sections): the share of the stretch spent inside them,
# lighter to denser (analysis/region_timeline.py DENSITY_LEVELS).
SUMMED_GLYPHS = "░▒▓"


def _summed(data: ReplayData, st: GanttState, key: int) -> str | None:
    """The hatch of a summed key (by region), None for any other."""
    if st.mode != "region" or data.regions is None or counter_rows.region_on(data, st):
        return None
    level = data.regions.summed.get(key)
    return SUMMED_GLYPHS[level - 1] if level else None


def _clip_mark(data: ReplayData, st: GanttState, key: int) -> str:
    """By region: "<" / ">" / "<>" when ``key``'s region had an instance open at the
    recording's start / end (drawn clipped to it), "" otherwise."""
    if st.mode != "region" or data.regions is None or counter_rows.region_on(data, st):
        return ""
    return data.regions.clip_mark(key)


def _is_wait(data: ReplayData, st: GanttState, key: int) -> bool:
    return st.mode == "region" and data.regions is not None and key in data.regions.wait \
        and not counter_rows.region_on(data, st)


def _folded_bins(data: ReplayData, st: GanttState, lay: Layout, rows: np.ndarray) -> GanttBins:
    labs = data.labels[st.row0:st.row0 + len(rows)]
    groups: list[list[int]] = []
    flat: list[int] = []
    for r, lab in zip(rows.tolist(), labs):
        members = list(lab.members) if r < 0 else [r]
        groups.append(list(range(len(flat), len(flat) + len(members))))
        flat += members
    g = bin_rows(_mode_intervals(data, st), np.array(flat, dtype=np.int64), st.t0, st.t1,
                 lay.cols, keymap=data.keymaps.get(st.mode), only_key=st.only_key,
                 only_tids=st.only_tids, prefer_traced=st.mode == "region",
                 owners=data.owners_for(st.mode))
    return fold_bins(g, groups, np.array([r if r >= 0 else (lab.members or (0,))[0]
                                          for r, lab in zip(rows.tolist(), labs)]))


def _node_label(data: ReplayData, i: int) -> tuple[str, Style]:
    lab = data.labels[i]
    prev = data.labels[i - 1] if i > 0 else None
    style = LABEL_STYLES[data.nodes.index(lab.node) % 2 if lab.node in data.nodes else 0]
    if lab.members:
        text = f"▸ {lab.node} ({len(lab.members)} PUs)"
        return text.ljust(LABEL_W)[:LABEL_W], style + Style(bold=True)
    first = prev is None or prev.node != lab.node
    node = str(lab.node)
    if first and len(node) > 4:
        # A name too long for its 5 columns (node-a, cn0123) takes its first row whole (up
        # to LABEL_W - 4, cut in the middle past that): `node` told two nodes apart from
        # nothing. Its package and NUMA node go on the next row.
        return f"{fit_name('▾' + node, LABEL_W - 4):<{LABEL_W - 4}}{lab.pu:>4}", style
    # The row after a long name's: its package and NUMA node, as a node's first row has.
    opened = first or (prev is not None and len(str(prev.node)) > 4 and (
        i < 2 or data.labels[i - 2].node != lab.node))
    name = f"▾{node}" if first else ""
    pk = f"P{lab.package}" if lab.package is not None and (
        opened or prev is None or prev.package != lab.package) else ""
    nd = f"N{lab.numa}" if lab.numa is not None and (
        opened or prev is None or prev.numa != lab.numa or pk) else ""
    text = f"{name:<5}{pk:<3}{nd:<3}{lab.pu:>4}"
    return text.ljust(LABEL_W)[:LABEL_W], style


def _label(data: ReplayData, i: int) -> tuple[str, Style]:
    lab = data.labels[i]
    if lab.node is not None:
        return _node_label(data, i)
    prev = data.labels[i - 1] if i > 0 else None
    pk = f"P{lab.package}" if lab.package is not None and (
        prev is None or prev.package != lab.package) else ""
    nd = f"N{lab.numa}" if lab.numa is not None and (
        prev is None or prev.numa != lab.numa or pk) else ""
    core = f"c{lab.core}" if lab.core is not None and (
        prev is None or prev.core != lab.core) else ""
    text = f"{pk:<3}{nd:<4}{core:>4}{lab.pu:>4}"
    return text.ljust(LABEL_W)[:LABEL_W], LABEL_STYLES[(lab.numa or 0) % 2]


MARKER_GLYPH = "▼"


def _axis(st: GanttState, data: ReplayData, cols: int) -> list[Segment]:
    """Ticks on round 1-2-5 steps from the recording's start (or the wall clock: ``w``),
    with the digits the span needs (timeaxis.py)."""
    line = [" "] * cols
    for c, text in ticks(st.t0 - data.t0, st.span, cols, st.wall_ns):
        for j, ch in enumerate("|" + text):
            if c + j < cols:
                line[c + j] = ch
    # Markers as ticks, over the labels (a marker says more than a time label does).
    for t, _text in data.ticks:
        if st.t0 <= t < st.t1:
            line[int((t - st.t0) * cols // st.span)] = MARKER_GLYPH
    head = f"{'Pk NUMA core':<{LABEL_W - 3}}{'PU':>3}"
    if data.labels and data.labels[0].node is not None:
        head = f"{'Node Pk N':<{LABEL_W - 3}}{'PU':>3}"
    return [Segment(head[:LABEL_W].ljust(LABEL_W), AXIS_STYLE), Segment(" "),
            Segment("".join(line), AXIS_STYLE)]


def _runs(cells: list[tuple[str, Style]]) -> list[Segment]:
    """Merge neighbouring cells of one style into one Segment (fewer segments, faster paint)."""
    out: list[Segment] = []
    buf: list[str] = []
    cur: Style | None = None
    for ch, sty in cells:
        if sty is not cur and buf:
            out.append(Segment("".join(buf), cur))
            buf = []
        cur = sty
        buf.append(ch)
    if buf:
        out.append(Segment("".join(buf), cur))
    return out


def _strip(name: str, vals: np.ndarray, cols: int, fmt: str, hi: float) -> list[Segment]:
    """One metric as a row of block heights over 0..hi (the series' maximum over the whole
    recording, so zooming in keeps the scale); the label shows the visible maximum."""
    finite = vals[np.isfinite(vals)]
    glyphs = "".join(" " if not math.isfinite(v) else level_glyph(v / hi if hi > 0 else 0)
                     for v in vals.tolist())
    label = f"{name} {fmt.format(float(finite.max())) if len(finite) else 'n/a'}"
    return [Segment(label[:LABEL_W].ljust(LABEL_W), AXIS_STYLE), Segment(" "),
            Segment(glyphs[:cols], Style(color="cyan"))]


def _series_cols(s: Series, st: GanttState, cols: int) -> np.ndarray:
    """A sample series resampled to the columns: the last sample at or before each centre."""
    t, v = s.t, s.v
    centres = st.t0 + (np.arange(cols) + 0.5) * st.span / cols
    if not len(t):
        return np.full(cols, np.nan)
    idx = np.searchsorted(t, centres, "right") - 1
    out = np.where(idx >= 0, v[np.clip(idx, 0, len(v) - 1)], np.nan)
    return np.asarray(out, dtype=np.float64)


@dataclass
class Rendered:
    lines: list[list[Segment]]
    bins: GanttBins
    legend: list[tuple[int, float]]      # (key, share of visible busy time)


def render_gantt(data: ReplayData, st: GanttState, width: int, height: int,
                 cursor_t: int | None = None, letters: bool = False) -> Rendered:
    """The chart's lines. ``letters``: a terminal without colours (NO_COLOR, 16 colours),
    where who ran must show in the glyph itself: each key in the legend gets a letter, the
    cell shows it upper-case when the PU was at least half busy, lower-case below."""
    lay = layout(data, width, height)
    st.row0 = max(0, min(st.row0, len(data.labels) - lay.rows))
    g = bins_for(data, st, lay)
    cols = lay.cols
    legend = _legend_keys(g)
    letter = {k: LETTERS[i] for i, (k, _) in enumerate(legend)} if letters else {}
    if letters and counter_rows.region_on(data, st):     # a step of the scale: its digit
        letter = dict(counter_rows.STEP_LETTERS)
    cur_col = None
    if cursor_t is not None and st.t0 <= cursor_t < st.t1:
        cur_col = int((cursor_t - st.t0) * cols // st.span)
    styles: dict[int, Style] = {}
    combos: dict[tuple[int, Style], Style] = {}

    def plus(sty: Style, extra: Style) -> Style:
        key = (id(extra), sty)
        got = combos.get(key)
        if got is None:
            got = combos[key] = sty + extra
        return got
    lines: list[list[Segment]] = [_axis(st, data, cols)]
    # A region open at the recording's start or end runs to the chart's edge: marked there.
    edge = {c: m for c, m, on in ((0, "<", st.t0 <= data.t0), (cols - 1, ">", st.t1 >= data.t1))
            if on}
    for i in range(g.key.shape[0]):
        r = st.row0 + i
        text, lsty = _label(data, r)
        if r == st.sel_row:
            lsty = lsty + Style(bold=True, reverse=True)
        cells: list[tuple[str, Style]] = []
        keys = g.key[i].tolist()
        busy = g.busy[i].tolist()
        for c in range(cols):
            k, b = keys[c], busy[c]
            if k == IDLE:
                ch, sty = " ", Style()
            elif k == OTHER:
                ch, sty = "·", OTHER_STYLE
            else:
                known = styles.get(k)
                if known is None:
                    known = styles[k] = Style(color=cell_colour(data, st, k))
                sty = known
                hatch = _summed(data, st, k)
                if hatch is not None:
                    ch = hatch
                elif _is_wait(data, st, k):
                    ch = WAIT_GLYPH
                elif letters:
                    ch = letter.get(k, "+")
                    ch = ch if b >= 0.5 else ch.lower() if b > 0 else " "
                else:
                    ch = busy_glyph(b)
                if c in edge and edge[c] in _clip_mark(data, st, k):
                    ch = edge[c]
            if c == cur_col:
                sty = plus(sty, CURSOR)
            if r == st.sel_row and c == st.sel_col:
                sty = plus(sty, SELECTED)
                ch = ch if ch != " " else "·"
            cells.append((ch, sty))
        lines.append([Segment(text, lsty), Segment(" "), *_runs(cells)])
    # Metric strips: utilisation of all PUs, then power per package, memory per node.
    if lay.strips:
        ukey = (st.t0, st.t1, cols)
        util = data.cache.get(ukey)
        if util is None:
            data.cache.clear()
            util = data.cache[ukey] = utilisation(data.intervals, st.t0, st.t1, cols)
        lines.append(_strip("util", util, cols, "{:.0%}", 1.0))
        for s in data.series[:lay.strips - 1]:
            finite = s.v[np.isfinite(s.v)]
            hi = float(finite.max()) if len(finite) else 0.0
            hi = float(s.full) if s.full else hi
            if s.unit == "B":
                lines.append(_strip(s.name, _series_cols(s, st, cols) / 2**30, cols, "{:.1f}G",
                                    hi / 2**30))
            else:
                lines.append(_strip(s.name, _series_cols(s, st, cols), cols, "{:.0f}W", hi))
    if counter_rows.region_on(data, st):      # by a counter figure: its scale
        lines.append(counter_rows.legend(data, st, width, letters))
        return Rendered(lines, g, legend)
    # Legend: the keys with the most cells on screen.
    leg: list[Segment] = [Segment(" ")]
    used = 1
    room = 30 if st.mode == "region" else 18     # a region's name carries its file:line
    for k, _share in legend:
        name = data.key_name(st.mode, k)
        hatch = _summed(data, st, k)
        mark = hatch or (WAIT_GLYPH if _is_wait(data, st, k) else letter.get(k, "█"))
        # A hatch: calls summed in the kernel, drawn as their density (the detail says more).
        name = name[:room] + (" summed" if hatch is not None else "")
        clip = _clip_mark(data, st, k)      # open at the recording's start / end: clipped
        name += f" {clip}" if clip else ""
        piece = f"{mark} {name}  "
        if used + len(piece) > width:
            break
        leg += [Segment(f"{mark} ", Style(color=cell_colour(data, st, k))),
                Segment(f"{name}  ")]
        used += len(piece)
    if letters and used + len("+ more") <= width and len(legend) < len(np.unique(
            g.key[g.key >= 0])):
        leg.append(Segment("+ more"))
    # Work hidden by the filter or outside the traced tree: one grey, one legend entry.
    if (g.key == OTHER).any() and used + len("· other") <= width:
        leg += [Segment("· ", OTHER_STYLE), Segment("other")]
    lines.append(leg)
    return Rendered(lines, g, legend)


#: The letters of the legend's keys when colours cannot tell them apart.
LETTERS = "ABCDEFGHJKLMNPQRSTUVWXYZ"


def _legend_keys(g: GanttBins, n: int = 12) -> list[tuple[int, float]]:
    """The keys with the most cells on screen (key, share of the busy cells)."""
    flat = g.key[g.key >= 0]
    if not len(flat):
        return []
    u, cnt = np.unique(flat, return_counts=True)
    order = np.argsort(-cnt, kind="stable")
    return [(int(u[j]), float(cnt[j]) / len(flat)) for j in order[:n]]


def cell_detail(data: ReplayData, st: GanttState, bins: GanttBins,
                width: int | None = None) -> str:
    """Who ran in the selected cell, for how long, how many switch-ins and migrations in.

    With ``width`` the line fits it: the entries that do not fit whole are dropped and
    counted (``… +N more``), never one cut mid-word."""
    i = st.sel_row - st.row0
    if not (0 <= i < len(bins.rows)) or not (0 <= st.sel_col < len(bins.edges) - 1):
        return ""
    r = int(bins.rows[i])
    a, b = int(bins.edges[st.sel_col]), int(bins.edges[st.sel_col + 1])
    if data.labels[st.sel_row].members:
        lab = data.labels[st.sel_row]
        busy = float(bins.busy[i, st.sel_col])
        return (f"node {lab.node} ({len(lab.members)} PUs, folded) "
                f"{fmt_time(a - data.t0)}..{fmt_time(b - data.t0)}: busy {busy:.0%}; "
                "n unfolds it")
    if st.mode == "region" and data.regions is not None:
        return region_detail(data, st, r, a, b, width)
    iv = data.intervals
    lo = int(np.searchsorted(iv.end[r], a, "right"))
    hi = int(np.searchsorted(iv.start[r], b, "left"))
    pu = data.labels[st.sel_row].pu
    head = (f"PU {pu} {resolution_label(a - data.t0, b - a, st.wall_ns)}.."
            f"{resolution_label(b - data.t0, b - a, st.wall_ns)}: ")
    if hi <= lo:
        return fit_detail(head, ["idle"], 1, "", width)
    s = np.maximum(iv.start[r][lo:hi], a)
    e = np.minimum(iv.end[r][lo:hi], b)
    tids = iv.tid[r][lo:hi]
    ins = (iv.start[r][lo:hi] >= a)
    u, inv = np.unique(tids, return_inverse=True)
    ns = np.bincount(inv, weights=(e - s))
    sw = np.bincount(inv, weights=ins)
    task_in = ins & (tids != UNTRACED)      # "other" is no one thread: it does not migrate
    ins_tid = tids[task_in][:MAX_MIG]
    mig = migrations_in(iv, r, ins_tid, iv.start[r][lo:hi][task_in][:MAX_MIG])
    mig_s = f"{mig}{'+' if int(ins.sum()) > MAX_MIG else ''}"
    order = np.argsort(-ns)
    shown = MAX_DETAIL if width is None else min(len(u), 4 * MAX_DETAIL)
    parts = [(f"other (not traced) {fmt_time(float(ns[j]))}" if int(u[j]) == UNTRACED else
              f"{data.names.get(int(u[j]), '?')} {int(u[j])} {fmt_time(float(ns[j]))} "
              f"({int(sw[j])} in)") for j in order[:shown]]
    busy = float(ns.sum()) / max(b - a, 1)
    return fit_detail(head, parts, len(u), f"; busy {busy:.0%}, {mig_s} migr in", width,
                      f"; busy {busy:.0%}")


def region_detail(data: ReplayData, st: GanttState, r: int, a: int, b: int,
                  width: int | None) -> str:
    """The selected cell by region: which regions ran there and how long (waits marked)."""
    assert data.regions is not None
    iv = data.regions.intervals
    pu = data.labels[st.sel_row].pu
    head = f"PU {pu} {fmt_time(a - data.t0)}..{fmt_time(b - data.t0)}: "
    lo = int(np.searchsorted(iv.end[r], a, "right"))
    hi = int(np.searchsorted(iv.start[r], b, "left"))
    if hi <= lo:
        return fit_detail(head, ["idle"], 1, "", width)
    s = np.maximum(iv.start[r][lo:hi], a)
    e = np.minimum(iv.end[r][lo:hi], b)
    keys = iv.tid[r][lo:hi]
    u, inv = np.unique(keys, return_inverse=True)
    ns = np.bincount(inv, weights=(e - s))
    order = np.argsort(-ns)
    parts = []
    for j in order.tolist():
        k = int(u[j])
        name = "other (not traced)" if k < 0 else data.key_name("region", k)
        wait = " (wait)" if k in data.regions.wait else ""
        level = data.regions.summed.get(k)
        if level:
            wait = (f" (calls summed in the kernel, {100 * (level - 1) // DENSITY_LEVELS}-"
                    f"{100 * level // DENSITY_LEVELS}% of the stretch inside; not drawn one "
                    "by one)")
        clip = data.regions.clip_mark(k)
        clip = f" ({clip} clipped to the recording)" if clip else ""
        parts.append(f"{name}{wait}{clip} {fmt_time(float(ns[j]))}")
    busy = float(ns.sum()) / max(b - a, 1)
    fig = counter_rows.cell_figure(data, st, r, a, b) if counter_rows.region_on(data, st) \
        else ""
    return fit_detail(head, parts, len(u), f"{fig}; busy {busy:.0%}", width)


#: Entries of the cell detail when no width is given (a caller that cuts the line itself).
MAX_DETAIL = 3


def fit_detail(head: str, parts: list[str], total: int, tail: str,
               width: int | None, short_tail: str | None = None) -> str:
    """``head`` + as many whole ``parts`` as fit + ``tail`` in ``width`` columns; the dropped
    ones (of ``total``) said as ``… +N more``. Who ran matters most: when not even the first
    entry fits with ``tail``, it is tried with ``short_tail``; then no entry; then the line is
    cut and ends in an ellipsis."""
    def line(k: int, end: str) -> str:
        rest = total - k
        more = (", " if k else "") + f"\u2026 +{rest} more" if rest else ""
        return head + ", ".join(parts[:k]) + more + end

    if width is None:
        return line(min(len(parts), MAX_DETAIL), tail)
    tries = [(k, tail) for k in range(len(parts), 0, -1)]
    if short_tail is not None and parts:
        tries.append((1, short_tail))
    for k, end in (*tries, (0, tail)):
        text = line(k, end)
        if len(text) <= width:
            return text
    text = line(0, tail)
    return text[:max(0, width - 1)] + "\u2026"


def migrations_in(iv: Intervals, r: int, tids: np.ndarray, times: np.ndarray,
                  lookback: int = 4096, lookback_ns: int = MIG_LOOKBACK_NS) -> int:
    """How many of the switch-ins (tids[i] at times[i] on row r) are migrations: the thread's
    previous interval (the last one that started before, on any PU) was on another PU.

    One pass over every PU's recent intervals (at most ``lookback`` intervals and
    ``lookback_ns`` before the first switch-in): a thread seen on no PU in that window counts
    as no migration. The candidates of those threads are gathered once and each switch-in
    looks at its thread's latest one, so the cost is a couple of searchsorted per PU, not per
    PU per switch-in (which made a zoomed-out redraw cost a quarter of a second)."""
    if not len(tids):
        return 0
    t_lo, t_hi = int(times.min()) - lookback_ns, int(times.max())
    rows, starts, ctids = [], [], []
    for rr, st in enumerate(iv.start):
        hi = int(np.searchsorted(st, t_hi, "left"))
        lo = max(hi - lookback, int(np.searchsorted(st, t_lo, "left")))
        if hi > lo:
            rows.append(np.full(hi - lo, rr, dtype=np.int32))
            starts.append(st[lo:hi])
            ctids.append(iv.tid[rr][lo:hi])
    if not rows:
        return 0
    c_tid = np.concatenate(ctids)
    keep = np.isin(c_tid, tids)
    c_tid, c_start, c_row = c_tid[keep], np.concatenate(starts)[keep], np.concatenate(rows)[keep]
    mig = 0
    for tid, t in zip(tids.tolist(), times.tolist()):
        m = (c_tid == tid) & (c_start < t)
        if m.any():
            j = np.flatnonzero(m)
            mig += int(c_row[j[np.argmax(c_start[j])]] != r)
    return mig
