"""The views' pure parts, without an App: tree folding, heatmap layout, formatting, processes."""

from __future__ import annotations

import math

from rich.console import Console

from snumap_tui.model.frame import TaskRow
from snumap_tui.sources.cpuinfo import parse_cpu_model
from snumap_tui.ui.demo import demo_frame, synthetic_topology
from snumap_tui.ui.heatmap import Heatmap, bands, heatmap_grid, heatmap_lines
from snumap_tui.ui.hostinfo import format_uptime, parse_loadavg, parse_uptime
from snumap_tui.ui.metricspec import fmt_bytes, heatmap_metrics, view_for
from snumap_tui.ui.palette import GLYPHS, bar, level_glyph, sparkline
from snumap_tui.ui.panels import spark_bars
from snumap_tui.ui.processes import affinity_label, group_tasks, matches, sort_tasks
from snumap_tui.ui.tree_rows import default_collapsed, node_memory, plain_tree, visible_rows


def big() -> object:
    """2 sockets x 4 NUMA x 3 CCX x 8 cores x 2 threads = 384 PUs."""
    return synthetic_topology(2, 4, 3, 8, 2)


def _check_grid(topo, w: int, h: int) -> tuple[list, object]:  # type: ignore[no-untyped-def]
    """Lay the heatmap out in w x h: every PU in exactly one cell, nothing past the edges."""
    frame = demo_frame(topo, 2)
    lines, drawn = heatmap_grid(topo, frame.values["util_pct"], view_for("util_pct"), w, h,
                                mem=lambda n: node_memory(frame, n))
    assert len(lines) <= h, (w, h, len(lines))
    assert max(x.cell_len for x in lines) <= w
    assert sorted(p for u in drawn for p in u) == list(range(len(topo.pus)))
    return lines, drawn


# The heatmap panel's height in a terminal: minus the header (2 lines) and the footer (1).
def test_heatmap_384_pus_use_120x40_and_fit_80x24() -> None:
    lines, drawn = _check_grid(big(), 120, 37)
    assert len(drawn) == 384                              # one cell per PU: nothing folded
    assert max(x.cell_len for x in lines) >= 110          # the width is used, not a third
    assert len(lines) >= 30                               # and the height (taller cells)
    assert "cell: 1 PU" in lines[0].plain and "32.0G/64.0G" in lines[1].plain
    assert lines[1].plain.startswith("P0 N0 93%")         # band label and its mean
    lines, drawn = _check_grid(big(), 80, 21)
    assert len(drawn) == 384 and len(lines) >= 17


def test_heatmap_768_pus_fit_80x24_without_scrolling() -> None:
    topo = synthetic_topology(2, 8, 2, 12, 2)
    assert len(topo.pus) == 768
    lines, _ = _check_grid(topo, 80, 21)
    assert len(lines) <= 21 and sum(x.plain.startswith("P1 N15") for x in lines) == 1
    lines, drawn = _check_grid(topo, 50, 21)               # narrower: SMT siblings fold
    assert len(drawn) < 768 and "(2 PUs, max)" in " ".join(x.plain for x in lines[:2])


def test_heatmap_tiny_machine_gets_one_bar_per_pu_with_values() -> None:
    topo = synthetic_topology(1, 1, 1, 2, 1)
    for w, h in ((120, 37), (80, 21)):
        lines, drawn = _check_grid(topo, w, h)
        assert len(drawn) == 2 and len(lines) == 4          # legend, band, one row per PU
        for pu, line in zip((0, 1), lines[2:], strict=True):
            assert line.plain.lstrip().startswith(f"PU{pu}")
            assert line.plain.rstrip().endswith("%")          # its value printed at the end
            assert "█" in line.plain or "▏" in line.plain
    # A small machine that does not fit one row per PU falls back to the grid.
    topo = synthetic_topology(1, 1, 1, 16, 1)
    lines, drawn = _check_grid(topo, 80, 10)
    assert len(drawn) == 16 and not any(x.plain.lstrip().startswith("PU0 ") for x in lines)


def test_heatmap_groups_by_package_numa_and_l3() -> None:
    bs = bands(big())
    assert [b.label for b in bs[:2]] == ["P0 N0", "P0 N1"]
    assert len(bs) == 8
    assert all(len(b.blocks) == 3 and b.threads == 2 for b in bs)
    assert all(len(blk.cores) == 8 for b in bs for blk in b.blocks)


def test_heatmap_marks_na_and_highlight_without_colour() -> None:
    topo = synthetic_topology(1, 1, 1, 2, 1)
    frame = demo_frame(topo, 0, pmu=False)
    lines = heatmap_lines(topo, frame.values["ipc"], view_for("ipc"), 40, 10)
    assert "··" in str(lines[2])          # no PMU: n/a, never a low value
    lines = heatmap_lines(topo, frame.values["util_pct"], view_for("util_pct"), 40, 10,
                          highlight=[0, 1], mark=1)
    assert any("◆" in str(x) for x in lines)
    c = Console(width=40, no_color=True, force_terminal=True, record=True)
    c.print(Heatmap(topo, frame.values["util_pct"], view_for("util_pct"), height=10))
    # Without colour the bars' lengths and the printed values still tell the levels apart.
    plain = c.export_text()
    assert any(g in plain for g in GLYPHS + "▏▎▍▌▋▊▉") and plain.count("%") >= 3


def test_tree_folds_levels_that_add_nothing() -> None:
    topo = synthetic_topology(1, 1, 1, 2, 1)       # like this VM: NUMA under Package, 1 L3
    rows = visible_rows(topo, ())
    labels = [r.label for r in rows]
    assert labels[0] == "Machine 0"
    assert labels[1] == "Package 0 · NUMA 0"       # node folded onto its package's row
    assert "Core 0 · PU 0" in labels               # L2 > L1 > Core > PU is one row
    core_row = next(r for r in rows if r.label.startswith("Core 0"))
    assert "L2 1M" in core_row.note and "L1 48K" in core_row.note
    assert rows[1].note == "L3 32M"                # the only L3 folded too
    assert len(rows) == 4                          # Machine, Package, 2 cores


def test_tree_collapse_defaults_scale() -> None:
    topo = big()
    rows = visible_rows(topo, default_collapsed(topo))
    assert len(rows) < 40                          # packages, NUMA nodes, L3s
    assert sum(r.label.startswith("NUMA") for r in rows) == 8
    small = synthetic_topology(1, 1, 1, 4, 2)
    rows = visible_rows(small, default_collapsed(small))
    assert [r.label for r in rows if r.label.startswith("Core")] == [f"Core {i}" for i in range(4)]
    assert all(not r.expanded for r in rows if r.label.startswith("Core"))


def test_plain_tree_has_numbers_and_na() -> None:
    topo = synthetic_topology(1, 2, 1, 2, 1)
    lines = plain_tree(demo_frame(topo, 1, pmu=False))
    assert lines[0].split()[:5] == ["object", "CPU", "IPC", "GHz", "Watt"]
    numa = next(x for x in lines if x.strip().startswith("NUMA 0"))
    assert "n/a" in numa and "G/64.0G" in numa and "%" in numa


def test_metric_format_and_scale() -> None:
    util = view_for("util_pct")
    assert util.fmt(None) == "  n/a" and util.fmt(math.nan) == "  n/a"
    assert util.fmt(95.4) == "  95%"
    ipc = view_for("ipc")
    assert ipc.is_problem(0.3) and not ipc.is_problem(1.5)
    mpki = view_for("mpki")
    assert mpki.log and mpki.norm(mpki.lo) == 0.0 and mpki.norm(mpki.hi) == 1.0
    assert fmt_bytes(1.5 * 2**30) == "1.5G" and fmt_bytes(None) == "n/a"
    frame = demo_frame(synthetic_topology(1, 1, 1, 2, 1), 0, pmu=False)
    keys = [m.key for m in heatmap_metrics(frame.values, [p.id for p in frame.topology.pus])]
    assert keys[0] == "util_pct" and "ipc" not in keys   # all-NaN metrics are not offered


def test_palette() -> None:
    assert level_glyph(0.0) == "▁" and level_glyph(1.0) == "█"
    assert bar(0.5, 4) == ("██", "  ")
    assert bar(None, 3) == ("", "···")
    assert sparkline([0, 50, 100, None], 4, lambda v: v / 100) == "▁▅█ "


def test_sparkline_follows_the_metrics_log_scale() -> None:
    """Page faults from 10 to 100,000 a second on the catalogue's log scale climb through the
    blocks; a linear 0..max mapping drew them all ``▁`` but the last."""
    from snumap_tui.ui.metricspec import use_catalogue, view_for

    use_catalogue(None)
    view = view_for("faults_per_s")
    assert view.log
    history: list[float | None] = [10.0, 100.0, 1e3, 1e4, 1e5]
    line = sparkline(history, 5, view.norm)
    assert len(set(line)) == 5 and line == "".join(sorted(line, key=GLYPHS.index))
    text = "".join(seg.text for seg in spark_bars(line))
    assert text.strip() == line


def _task(pid: int, comm: str, user: str, cpu: float, aff: set[int], job: str | None = None
          ) -> TaskRow:
    return TaskRow(pid, pid, comm, user, "R", cpu, min(aff), frozenset(aff), job=job,
                   cmdline=comm)


def test_processes_filter_sort_group_affinity() -> None:
    topo = synthetic_topology(2, 1, 1, 2, 2)        # PUs 0-3 package 0, 4-7 package 1
    ts = [_task(1, "solver", "alice", 300, {0, 1, 2, 3}, "slurm:7"),
          _task(2, "solver", "alice", 100, {4}, "slurm:7"),
          _task(3, "sshd", "root", 1, set(range(8)))]
    assert affinity_label(topo, {0, 1, 2, 3}) == "Package 0"
    assert affinity_label(topo, {4}) == "PU 4"
    assert affinity_label(topo, {0, 1, 2}) == "Package 0 (3/4)"
    assert affinity_label(topo, set(range(8))) == "Machine 0"
    assert [t.pid for t in ts if matches(t, "user:alice")] == [1, 2]
    assert [t.pid for t in ts if matches(t, "SSH")] == [3]
    assert [t.pid for t in ts if matches(t, "job:slurm solver")] == [1, 2]
    assert [t.pid for t in sort_tasks(ts, "cpu")] == [1, 2, 3]
    assert [t.pid for t in sort_tasks(ts, "name")] == [3, 1, 2] or \
        [t.comm for t in sort_tasks(ts, "name")] == ["solver", "solver", "sshd"]
    g = group_tasks(ts, "job")
    assert (g[0].key, g[0].nprocs, g[0].cpu_pct) == ("slurm:7", 2, 400)
    assert g[0].affinity == frozenset({0, 1, 2, 3, 4})
    assert g[1].key == "(no job)"
    assert [x.key for x in group_tasks(ts, "user")] == ["alice", "root"]


def test_hostinfo_parsers() -> None:
    assert parse_uptime("12345.67 2345.00\n") == 12345.67
    assert parse_loadavg("0.52 0.40 0.33 1/123 4567\n") == (0.52, 0.40, 0.33)
    assert parse_cpu_model("processor\t: 0\nmodel name\t: AMD EPYC  7763 64-Core\n") == \
        "AMD EPYC 7763 64-Core"
    assert format_uptime(3 * 86400 + 4 * 3600 + 5 * 60) == "3d 4h"
    assert format_uptime(16 * 60 + 5) == "16m"          # not "00:16", which reads as a time
    assert format_uptime(2 * 3600 + 7 * 60) == "2h 07m"
    assert format_uptime(None) == "n/a"


def test_a_tree_row_marks_with_its_marker_only() -> None:
    """The yellow of a marked row (a selected process's PUs) is its ● alone: the label and
    the numbers keep their own styles (the marker's style once spread over the whole row)."""
    from snumap_tui.ui.topology_view import MARK_STYLE, row_text

    topo = synthetic_topology(1, 1, 1, 2, 2)
    frame = demo_frame(topo, 2)
    rows = visible_rows(topo, default_collapsed(topo))
    console = Console(width=120)
    for row in rows:
        for marked in (False, True):
            text = row_text(frame, row, 120, marked)
            cells = [(ch, seg.style) for seg in text.render(console) for ch in seg.text]
            assert cells[0][0] == ("●" if marked else " ")
            assert (cells[0][1] == MARK_STYLE) is marked
            at = text.plain.index(row.label)
            for ch, style in cells[at:at + len(row.label)]:
                assert style is None or style.color is None, (row.label, style)
                assert bool(style and style.bold) is (row.indent <= 1)
            pct = text.plain.index("%")
            assert all(style is None or style.color != MARK_STYLE.color
                       for _, style in cells[pct - 3:pct + 1])


def test_a_tree_label_fills_its_width_in_cells() -> None:
    """A label is its name and, where it fits, its note, in exactly the name column's cells
    (wide characters counted as two), padded in the label's own style (a cursor row shows
    the padding reversed like the name)."""
    from rich.cells import cell_len

    from snumap_tui.ui.topology_view import label_segments
    from snumap_tui.ui.tree_rows import TreeRow

    def row(label: str, note: str, indent: int = 2) -> TreeRow:
        return TreeRow(key=1, obj_id=1, numa_id=None, indent=indent, label=label, note=note,
                       expandable=True, expanded=False, pu_range=(0, 2))

    for r in (row("L3 #0 32M", "L2 1M · L1 48K"), row("Core 0", ""),
              row("节点节点节点节点节点", "note"), row("x" * 40, "note"),
              row("节点", "cache notes that are long", indent=1)):
        for name_w in (12, 20, 34):
            segs = label_segments(r, name_w)
            assert sum(cell_len(s.text) for s in segs) == name_w, (r.label, name_w, segs)
            assert segs[0].style == segs[-1].style          # the padding: the label's style
            shown = "".join(s.text for s in segs)
            if r.note and r.note in shown:
                assert shown.index(r.note) > shown.index(r.label)
