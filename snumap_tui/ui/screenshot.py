"""An app's screen as an SVG file, headless: `replay --screenshot` and `scale view
--screenshot` alike (the size checked, keys pressed, the file written as every output is,
through safeout)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from snumap_tui.errors import SnumapError

MAX_COLUMNS, MAX_LINES = 1000, 500   # a screenshot is drawn cell by cell


def parse_size(text: str) -> tuple[int, int]:
    """--size WxH, within 20x5 and MAX_COLUMNS x MAX_LINES."""
    try:
        w, h = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise SnumapError(f"--size: expected WxH, e.g. 120x40, not {text!r}") from None
    if not (20 <= w <= MAX_COLUMNS and 5 <= h <= MAX_LINES):
        raise SnumapError(f"--size {text}: at least 20x5, at most "
                          f"{MAX_COLUMNS}x{MAX_LINES} (a screenshot is drawn cell by cell)")
    return w, h


def save_screenshot(app: Any, out: str | Path, size: str, *, keys: Sequence[str] = (),
                    force: bool = False, inputs: Sequence[str | Path] = (),
                    mode: int | None = None) -> bool:
    """Run APP headless at SIZE, press KEYS, write its screen to OUT. False when the app
    ended without a screen (its own exit code says why)."""
    from snumap_tui.safeout import SafeOutput, check_output

    w, h = parse_size(size)
    out = Path(out)
    check_output(out, force=force, inputs=inputs)
    svg: list[str] = []

    async def pilot_fn(pilot: Any) -> None:
        await pilot.pause()
        for k in keys:
            await pilot.press(k)
        await pilot.pause()
        svg.append(pilot.app.export_screenshot())
        pilot.app.exit(0)

    # An SVG holds 24-bit colour whatever TERM says (TERM=xterm over ssh, in scripts and CI):
    # views that fall back to letters on a 16-colour terminal draw colours here.
    app.svg_colours = True
    app.run(headless=True, size=(w, h), auto_pilot=pilot_fn)
    if not svg:
        return False
    with SafeOutput(out, force=force, inputs=inputs, mode=mode) as sink, \
            sink.open(text=True) as f:
        f.write(svg[0])
    return True
