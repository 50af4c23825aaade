"""The TUIs' last line of defence against terminal controls in what they draw.

Names from the traced machine are escaped where the views lay them out (``safe_text``: the
user sees ``\\x1b`` where a process name holds an ESC). This line filter, installed on both
apps, removes whatever control a path not covered would still carry to the terminal: a
Segment's text goes to the terminal as it is (Rich's Text drops only BEL, BS, VT, FF and CR,
not ESC or the C1 controls). Controls take no cell, so removing them keeps every line's width;
a lone surrogate (one cell) becomes U+FFFD. Strips cache their filtered form, so a line costs
``has_controls`` per segment the first time it is drawn (a few microseconds for a
120-column line, on the 2-vCPU VM the tests run on).
"""

from __future__ import annotations

from typing import Any

from rich.segment import Segment
from textual.color import Color
from textual.filter import LineFilter

from snumap_tui.textsafe import drop_controls, has_controls


class DropControls(LineFilter):
    """Terminal controls removed from every segment's text."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        out: list[Segment] | None = None
        for i, seg in enumerate(segments):
            text = seg.text if seg.control or not has_controls(seg.text) \
                else drop_controls(seg.text)
            if text is not seg.text:
                if out is None:
                    out = list(segments[:i])
                if text:                       # an empty segment is not drawn anyway
                    out.append(Segment(text, seg.style))
            elif out is not None:
                out.append(seg)
        return segments if out is None else out


def install(app: Any) -> None:
    """Add the filter to ``app``'s line filters (Textual keeps them in ``_filters``, which
    ``get_line_filters`` reads)."""
    filters = getattr(app, "_filters", None)
    if isinstance(filters, list) and not any(isinstance(f, DropControls) for f in filters):
        filters.append(DropControls())
