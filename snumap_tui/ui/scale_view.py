"""`snumap scale view STUDY`: a study's efficiency diagrams in the terminal.

Left, the regions (the whole program first); right, the selected region's efficiency diagram
(configurations by threads, each cell its parallel efficiency, coloured red below 0.5, yellow
below 0.8, green above, the number printed so it reads without colour), then its table of
times, speedup and efficiency per configuration, and its model and extrapolation.
Keys: up/down (or j/k) choose the region, q quits, h/F1/? help.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Footer, Header, OptionList, Static

from ..study.aggregate import PERTURBED, serial_text
from ..study.plots import config_label, efficiency_grid, regions_of, varying_dims
from ..textsafe import safe_text

HELP = ("up/down or j/k: region   q: quit   h, F1, ?: this help\n"
        "cells: parallel efficiency = T(1) / (p * T(p)) at the same placement and input; "
        "red < 0.5, yellow < 0.8, green >= 0.8")


def _cell_style(e: float) -> str:
    if math.isnan(e):
        return "grey50"
    if e < 0.5:
        return "bold white on rgb(170,30,40)"
    if e < 0.8:
        return "black on rgb(220,190,40)"
    return "black on rgb(60,170,70)"


def diagram(rows: Sequence[Mapping], region: str, cell: int = 7) -> Text:
    """The efficiency diagram of one region as styled text (pure: also used by tests)."""
    labels, threads, grid = efficiency_grid(rows, region)
    out = Text()
    if not labels:
        out.append("no completed runs of this region\n", style="italic")
        return out
    width = max(len(lab) for lab in labels + ["threads"]) + 1
    out.append("threads".rjust(width))
    for t in threads:
        out.append(str(t).center(cell))
    out.append("\n")
    for lab, line in zip(labels, grid):
        out.append(safe_text(lab).rjust(width))
        for e in line:
            txt = "n/a" if math.isnan(e) else f"{e:.2f}"
            out.append(" " + txt.center(cell - 2) + " ", style=_cell_style(e))
        out.append("\n")
    return out


def table(rows: Sequence[Mapping], region: str) -> Text:
    """Times, speedup, efficiency, serial fraction and energy per configuration (fits 84
    columns: the detail pane of a 120-column terminal)."""
    mine = [r for r in rows if r.get("region") == region]
    dims = varying_dims(rows)
    out = Text(no_wrap=True, overflow="ellipsis")
    out.append(f"{'configuration':<18}{'thr':>4}{'median':>9}{'min':>8}{'max':>8}"
               f"{'speedup':>8}{'eff':>6}{'serial':>7}{'energy J':>10}\n", style="bold")

    def num(v, fmt: str) -> str:
        return fmt.format(v) if isinstance(v, (int, float)) and math.isfinite(v) else "n/a"

    for r in sorted(mine, key=lambda r: (config_label(r, dims), int(r["threads"]))):
        eff = r.get("efficiency")
        out.append(f"{safe_text(config_label(r, dims))[:17]:<18}{int(r['threads']):>4}"
                   f"{num(r.get('time_median_s'), '{:.4f}'):>9}"
                   f"{num(r.get('time_min_s'), '{:.4f}'):>8}"
                   f"{num(r.get('time_max_s'), '{:.4f}'):>8}"
                   f"{num(r.get('speedup'), '{:.2f}'):>8}")
        e = num(eff, "{:.2f}")
        out.append(f"{e:>6}", style=_cell_style(float(eff)).split(" on ")[-1]
                   if isinstance(eff, (int, float)) and math.isfinite(eff) else "")
        out.append(f"{serial_text(r.get('karp_flatt')):>7}"
                   f"{num(r.get('energy_j'), '{:.1f}'):>10}"
                   f"{' *' if r.get('perturbed') else ''}\n")
    out.append_text(perturbation_text(mine, dims))
    return out


def perturbation_text(mine: Sequence[Mapping], dims: Sequence[str]) -> Text:
    """Under a region's table: the program's time untraced and the recorder's perturbation
    per configuration, and what its speedup is computed from; a region's rows measured in
    perturbed runs are marked * (the report's words)."""
    out = Text(no_wrap=True, overflow="ellipsis")
    prog = [r for r in mine if r.get("untraced_n")]
    if prog:
        over = any(r.get("basis") == "untraced" for r in mine)
        out.append("\nthe recorder's perturbation (program time recorded / untraced - 1):\n",
                   style="bold")
        for r in sorted(prog, key=lambda r: (config_label(r, dims), int(r["threads"]))):
            p = float(r["perturbation"])
            out.append(f"{safe_text(config_label(r, dims))[:17]:<18}{int(r['threads']):>4}"
                       f"{float(r['untraced_median_s']):>9.4f} s untraced{100 * p:>+8.1f} %")
            out.append(" !\n" if p > PERTURBED else "\n",
                       style="bold red" if p > PERTURBED else "")
        if over:
            out.append(f"over {100 * PERTURBED:.0f} %: speedup, eff and serial are from the "
                       "untraced times\n", style="italic")
    elif any(r.get("perturbed") for r in mine):
        out.append(f"\n* recorded in runs the recorder slowed by more than "
                   f"{100 * PERTURBED:.0f} %: times as recorded\n", style="italic")
    return out


class ScaleViewApp(App):
    """The study viewer; rows are the aggregated rows, models {region: text lines}."""

    TITLE = "snumap scale view"
    # The table keeps one line per configuration however narrow the terminal (80x24 wrapped
    # each row onto two): it is as wide as its text, and the detail pane scrolls sideways.
    CSS = """
    #regions { width: 34; }
    #detail { padding: 0 1; overflow-x: auto; }
    #table { width: auto; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("q", "quit", "quit"), Binding("j", "down", show=False),
                Binding("k", "up", show=False), Binding("h", "help", "help"),
                Binding("f1", "help", show=False), Binding("question_mark", "help", show=False)]

    def __init__(self, rows: Sequence[Mapping], models: Mapping[str, Sequence[str]],
                 title: str = "") -> None:
        super().__init__()
        self.rows = list(rows)
        self.models = dict(models)
        self.regions = regions_of(self.rows)
        self.sub_title = safe_text(title)
        self._help = False

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal():
            yield OptionList(*[safe_text(r) for r in self.regions] or ["(no regions)"],
                             id="regions")
            with VerticalScroll(id="detail"):
                yield Static(id="diagram")
                yield Static(id="table")
                yield Static(id="model")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#regions", OptionList).highlighted = 0
        self._show(0)
        self.on_resize()

    def on_resize(self) -> None:
        """The region list: 34 columns on a wide terminal, a quarter of a narrow one (the
        detail pane needs the room)."""
        w = self.size.width
        self.query_one("#regions", OptionList).styles.width = 34 if w >= 120 else \
            max(16, w // 4)

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self._show(event.option_index)

    def action_down(self) -> None:
        self.query_one("#regions", OptionList).action_cursor_down()

    def action_up(self) -> None:
        self.query_one("#regions", OptionList).action_cursor_up()

    def action_help(self) -> None:
        self._help = not self._help
        idx = self.query_one("#regions", OptionList).highlighted or 0
        self._show(idx)

    def _show(self, index: int) -> None:
        if not self.regions:
            self.query_one("#diagram", Static).update("this study has no completed runs yet")
            return
        region = self.regions[min(index, len(self.regions) - 1)]
        head = Text(f"parallel efficiency: {safe_text(region)}\n", style="bold")
        if self._help:
            head.append(HELP + "\n\n", style="italic")
        head.append_text(diagram(self.rows, region))
        self.query_one("#diagram", Static).update(head)
        self.query_one("#table", Static).update(table(self.rows, region))
        lines = self.models.get(region) or ["model: n/a (no model for this region)"]
        self.query_one("#model", Static).update(
            Text("\n" + "\n".join(safe_text(x) for x in lines)))


def model_lines(report: Mapping) -> dict[str, list[str]]:
    """{region: text lines} of the study report's models (formula and extrapolations)."""
    models = report.get("models") or {}
    if not models.get("available"):
        why = models.get("why", "no models")
        return {"": [f"model: n/a ({why})"]}
    out: dict[str, list[str]] = {}
    for region, m in (models.get("models") or {}).items():
        lines = [f"model (PMNF, time in s, p = threads): {m['formula']}"]
        for key in ("at_cores", "at_predict"):
            if key in m:
                lines.append(f"  extrapolated to p = {m[key]['p']}: {m[key]['time_s']:.4f} s")
        out[region] = lines
    return out


def run_view(data: Any, screenshot: str | None = None, size: str = "120x40",
             force: bool = False) -> int:
    """Open the view of a loaded study (snumap_tui.study.load); with screenshot, write the
    screen as SVG instead and return."""
    from .screenshot import save_screenshot

    report = data.report(None)
    app = ScaleViewApp(data.aggregated(), model_lines(report), title=str(data.dir))
    if not screenshot:
        app.run()
        return 0
    if save_screenshot(app, screenshot, size, force=force):
        print(safe_text(f"snumap: wrote {screenshot}"))
    return 0
