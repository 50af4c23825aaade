"""`snumap top`'s first frame, drawn before the Textual UI has even been imported.

Why: loading Textual and laying out the app takes most of a second on a busy 2-core machine
(htop shows its first numbers in a tenth of that). The numbers themselves are ready much
sooner: two sweeps a few tens of milliseconds apart give every PU's utilisation. So the
terminal gets them at once, as plain text on the alternate screen -- the header line and the
folded tree of `snumap top --batch` -- and the live view replaces it when it is up.

Only on a terminal (``stream.isatty()``); nothing here imports textual or rich.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO

from snumap_tui.textsafe import safe_text

#: Between the two sweeps: /proc/stat moves in USER_HZ ticks (10 ms), so one or two waits.
GAP_S = 0.015
TRIES = 8

ALT_SCREEN = "\x1b[?1049h"        # as Textual will (it does not clear a screen it finds there)
HOME_CLEAR = "\x1b[H\x1b[2J"
HIDE_CURSOR = "\x1b[?25l"


def first_frame(sampler: Any) -> Any:
    """A Frame with utilisation from the sampler (which has swept once already): sweeps a
    few tens of milliseconds apart until /proc/stat has moved; None if it never does."""
    for _ in range(TRIES):
        time.sleep(GAP_S)
        frame = sampler.frame()
        if frame is not None and frame.get("util_pct", frame.topology.root.id) is not None:
            return frame
    return None


def frame_lines(frame: Any, title: str, width: int, height: int) -> list[str]:
    """The header and the folded tree, cut to the terminal (what --batch prints)."""
    from snumap_tui.ui.tree_rows import plain_tree

    lines = [f" snumap top  {title}", ""] + [" " + ln for ln in plain_tree(frame)]
    lines.append("")
    lines.append(" starting the live view...")
    # The title (host name) and the tree's names are the machine's text: escaped.
    return [safe_text(ln)[:width] for ln in lines[:max(1, height - 1)]]


def draw(frame: Any, title: str, stream: TextIO | None = None) -> bool:
    """Draw the frame on ``stream`` (the terminal Textual will use: stderr); False when it
    is not a terminal."""
    out = stream or sys.__stderr__
    if out is None or not out.isatty():
        return False
    try:
        size = os.get_terminal_size(out.fileno())
    except OSError:
        return False
    body = "\r\n".join(frame_lines(frame, title, size.columns, size.lines))
    out.write(ALT_SCREEN + HIDE_CURSOR + HOME_CLEAR + body)
    out.flush()
    return True
