"""A study's pictures as SVG and PNG files (matplotlib, the `plots` extra).

- `efficiency-<region>`: the efficiency diagram of one region, configurations (inputs,
  placements, frequencies: whichever vary) by threads, each cell coloured by parallel
  efficiency (red below 0.5, green near 1) and labelled with it;
- `speedup`: each region's speedup over threads at every configuration, with the ideal line;
- `energy`: the whole program's energy and energy-delay product over threads, where measured.

The grid of a diagram is computed here without matplotlib (`efficiency_grid`), so the terminal
view draws the same cells.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import SnumapError
from .aggregate import PROGRAM

DIMS = ("input", "places", "freq")


def varying_dims(rows: Sequence[Mapping]) -> list[str]:
    """The configuration dimensions besides threads that take more than one value."""
    return [d for d in DIMS if len({r.get(d) for r in rows}) > 1]


def config_label(row: Mapping, dims: Sequence[str]) -> str:
    return " · ".join(str(row.get(d)) for d in dims) or "all runs"


def efficiency_grid(rows: Sequence[Mapping], region: str
                    ) -> tuple[list[str], list[int], list[list[float]]]:
    """(row labels, thread counts, efficiency[row][column]) of one region; NaN where a cell
    was not measured."""
    mine = [r for r in rows if r.get("region") == region]
    dims = varying_dims(rows)
    labels = sorted({config_label(r, dims) for r in mine})
    threads = sorted({int(r["threads"]) for r in mine})
    grid = [[math.nan] * len(threads) for _ in labels]
    li = {lab: i for i, lab in enumerate(labels)}
    ti = {t: j for j, t in enumerate(threads)}
    for r in mine:
        e = r.get("efficiency")
        if isinstance(e, (int, float)) and math.isfinite(float(e)):
            grid[li[config_label(r, dims)]][ti[int(r["threads"])]] = float(e)
    return labels, threads, grid


def regions_of(rows: Sequence[Mapping]) -> list[str]:
    names = {str(r["region"]) for r in rows}
    return ([PROGRAM] if PROGRAM in names else []) + sorted(names - {PROGRAM})


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "region"


def _text(name: object) -> str:
    """A name from the study as a label: terminal controls escaped (an SVG is text too), no
    mathtext (a region named ``$\\frac{`` would stop the drawing), at most 120 characters."""
    from ..textsafe import safe_text

    return safe_text(name)[:120]


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        plt.rcParams["text.parse_math"] = False      # names are text, never TeX
    except ImportError as exc:
        from ..extras import install_extra

        raise SnumapError(f"--plot needs matplotlib ({exc.name} missing): "
                          f"{install_extra('plots')}") from None
    return plt


def write_plots(out_dir: str | Path, rows: Sequence[Mapping],
                formats: Sequence[str] = ("svg", "png"), *, force: bool = False) -> list[Path]:
    """Draw the study's pictures into out_dir (created if missing); returns the files. Each
    is drawn into memory first, then written as every output of snumap is (safeout: beside,
    renamed; no link followed; an existing file replaced only with FORCE), after every name
    was checked, so a refusal writes none of them."""
    from ..safeout import check_output
    from .files import make_dir, write_bytes

    plt = _pyplot()
    out = Path(out_dir)
    make_dir(out)
    blobs: list[tuple[Path, bytes]] = []

    def save(fig, stem: str) -> None:
        for fmt in formats:
            buf = io.BytesIO()
            fig.savefig(buf, format=fmt, bbox_inches="tight", dpi=120)
            blobs.append((out / f"{stem}.{fmt}", buf.getvalue()))
        plt.close(fig)

    _draw(plt, rows, save)
    for path, _data in blobs:
        check_output(path, force=force)
    for path, data in blobs:
        write_bytes(path, data, force=force)
    return [path for path, _data in blobs]


def _draw(plt, rows: Sequence[Mapping], save) -> None:
    regions = regions_of(rows)
    used: set[str] = set()
    for region in regions:
        labels, threads, grid = efficiency_grid(rows, region)
        if not labels or not threads:
            continue
        fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(threads), 1.2 + 0.5 * len(labels)))
        im = ax.imshow(grid, cmap="RdYlGn", vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_xticks(range(len(threads)), [str(t) for t in threads])
        ax.set_yticks(range(len(labels)), [_text(x) for x in labels])
        ax.set_xlabel("threads")
        ax.set_title(f"parallel efficiency: {_text(region)}", fontsize=10)
        for i, line in enumerate(grid):
            for j, v in enumerate(line):
                ax.text(j, i, "n/a" if math.isnan(v) else f"{v:.2f}", ha="center",
                        va="center", fontsize=8)
        fig.colorbar(im, ax=ax, fraction=0.05)
        stem = "efficiency-" + _slug(region)
        while stem in used:
            stem += "_"
        used.add(stem)
        save(fig, stem)

    dims = varying_dims(rows)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    top = 1
    for region in regions:
        series: dict[str, list[tuple[int, float]]] = {}
        for r in rows:
            s = r.get("speedup")
            if r.get("region") == region and isinstance(s, (int, float)) and math.isfinite(s):
                series.setdefault(config_label(r, dims), []).append((int(r["threads"]), s))
        for label, pts in sorted(series.items()):
            pts.sort()
            top = max(top, pts[-1][0])
            name = region if label == "all runs" else f"{region} [{label}]"
            ax.plot([p for p, _ in pts], [s for _, s in pts], marker="o", label=_text(name))
    ax.plot([1, top], [1, top], linestyle="--", color="grey", label="ideal")
    ax.set_xlabel("threads")
    ax.set_ylabel("speedup")
    ax.set_title("speedup per region")
    ax.legend(fontsize=7)
    save(fig, "speedup")

    energy = [r for r in rows if r.get("region") == PROGRAM
              and isinstance(r.get("energy_j"), (int, float)) and math.isfinite(r["energy_j"])]
    if energy:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        ax2 = ax.twinx()
        series2: dict[str, list[tuple[int, float, float]]] = {}
        for r in energy:
            edp = r.get("edp")
            series2.setdefault(config_label(r, dims), []).append(
                (int(r["threads"]), float(r["energy_j"]),
                 float(edp) if isinstance(edp, (int, float)) else math.nan))
        for label, epts in sorted(series2.items()):
            epts.sort()
            ax.plot([p for p, _, _ in epts], [e for _, e, _ in epts], marker="o",
                    label=f"energy [{_text(label)}]")
            ax2.plot([p for p, _, _ in epts], [d for _, _, d in epts], marker="x",
                     linestyle=":", label=f"EDP [{_text(label)}]")
        ax.set_xlabel("threads")
        ax.set_ylabel("energy (J)")
        ax2.set_ylabel("energy-delay product (J·s)")
        ax.set_title("energy of the whole program")
        ax.legend(fontsize=7, loc="upper left")
        ax2.legend(fontsize=7, loc="upper right")
        save(fig, "energy")
