"""Colours and glyphs shared by the views: one scale, readable without colour.

Why glyph *and* colour: over SSH many terminals have 16 colours and some users set NO_COLOR;
the block height (``▁`` .. ``█``) carries the value on its own, the colour makes it fast to
read. Truecolor stops are given; Rich/Textual downsample them to 256 or 16 colours.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from functools import lru_cache

from rich.color import Color
from rich.style import Style

GLYPHS = "▁▂▃▄▅▆▇█"
NA_STYLE = Style(color="grey50", dim=True)

# Cool (idle) to hot (busy): blue, cyan, green, yellow, orange, red.
_STOPS = ((0.0, (60, 90, 200)), (0.25, (0, 170, 190)), (0.5, (70, 190, 70)),
          (0.7, (225, 205, 40)), (0.85, (235, 130, 30)), (1.0, (220, 40, 50)))


def level_glyph(n: float) -> str:
    """The block whose height is the 0..1 value ``n``."""
    return GLYPHS[min(len(GLYPHS) - 1, max(0, int(n * len(GLYPHS))))]


def rgb(n: float) -> tuple[int, int, int]:
    n = min(1.0, max(0.0, n))
    for (a, ca), (b, cb) in itertools.pairwise(_STOPS):
        if n <= b:
            f = (n - a) / (b - a) if b > a else 0.0
            return tuple(int(x + (y - x) * f) for x, y in zip(ca, cb))  # type: ignore[return-value]
    return _STOPS[-1][1]


@lru_cache(maxsize=64)
def _style_q(q: int) -> Style:
    r, g, b = rgb(q / 32)
    return Style(color=Color.from_rgb(r, g, b))


def scale_style(n: float) -> Style:
    """Foreground style for a 0..1 value (quantised to 33 steps so styles are shared)."""
    return _style_q(round(min(1.0, max(0.0, n)) * 32))


def bar(n: float | None, width: int) -> tuple[str, str]:
    """A horizontal bar of ``width`` cells for 0..1 (eighth-cell resolution): (filled, rest)."""
    if n is None:
        return "", "·" * width
    eighths = round(min(1.0, max(0.0, n)) * width * 8)
    full, part = divmod(eighths, 8)
    s = "█" * full + ("▏▎▍▌▋▊▉"[part - 1] if part else "")
    return s, " " * (width - len(s))


def sparkline(values: list[float | None], width: int,
              norm: Callable[[float], float | None]) -> str:
    """The last ``width`` values as ``▁..█`` (space for a missing value), each at its place on
    the metric's scale: ``norm`` maps a value onto 0..1 (``MetricView.norm``: log for the
    metrics the catalogue draws on a log scale, so page faults or migrations that vary by
    decades are not all ``▁``)."""
    return "".join(spark_glyph(v, norm) for v in values[-width:]).rjust(width)


def spark_glyph(v: float | None, norm: Callable[[float], float | None]) -> str:
    """One value's block in a sparkline (a space for a missing value)."""
    n = None if v is None or math.isnan(v) else norm(v)
    return " " if n is None or math.isnan(n) else level_glyph(min(1.0, max(0.0, n)))


#: Each block's colour: the scale's at the block's own height.
BAR_STYLES = {ch: scale_style(i / (len(GLYPHS) - 1)) for i, ch in enumerate(GLYPHS)}
